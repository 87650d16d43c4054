"""The resolution order, as pure logic over names and sets.

Nothing here imports a backend: a ``Universe`` answers which backends exist and what each exports, and the
functions below decide where a kernel comes from. That is the whole of the order in docs/design.md, small enough for a
hypothesis model test to check against an independent model, and the reason ``which()`` can answer without
importing anything.

The three roles: the *chain* (the selected backends in priority order), the *platform default* (what runs best
here), and the *last resort* (``torch``: it implements every kernel). A kernel that the
chain lacks is *inherited* from the default or the last resort, never silently: the namespace wraps it so that its
first call says so, and the first resolution prints how many kernels the chain lacks (``_sources``). A partial port
is never mistaken for a complete one; strict means no fallback of any kind.

The same order answers for one *configuration* of a kernel (``resolve(..., serves=..., planned=...)``): a backend
that exports the kernel may still decline a configuration it cannot serve (``serves(backend)`` gives its reason),
and the order then goes on as if that backend lacked the kernel; a plan (``lazyops tune``) may name the backend for
the configuration, which comes first wherever it serves it (within the chain, in strict mode).
"""

from __future__ import annotations

from lazyops._errors import ConfigError, KernelUnavailableError
from lazyops._errors import hide_in_pytest_tracebacks as __tracebackhide__  # noqa: F401
from lazyops._settings import Settings

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from collections.abc import Callable, Set
    from typing import Protocol
else:  # the protocol is for type checkers; at run time a plain base will do
    Protocol = object

#: the torch backend implements every kernel, so it is the last resort of every order
LAST_RESORT = "torch"

SELECTED = "selected"
FALLBACK_LIST = "fallback-list"
INHERITED = "inherited"
#: a backend before this one in the order declined the configuration (``Resolution.declined`` says who and why)
DECLINED = "declined"
#: the plan in force names this backend for the configuration
PLAN = "plan"


class Universe(Protocol):
    """What the resolution order needs to know about the installed backends."""

    @property
    def backends(self) -> tuple[str, ...]:
        """Every known backend name, built-ins first."""

    @property
    def default(self) -> str:
        """The platform default; only asked for when the order needs it."""

    def exports(self, backend: str) -> Set[str]:
        """The kernel names ``backend`` exports (may raise ``BackendError`` for a backend without a stub)."""

    def known_kernels(self) -> Set[str]:
        """Every kernel name any known backend exports."""


class Resolution:
    """Where a kernel comes from and why: what ``lazyops.which`` returns.

    ``chain`` is the chain in force; ``lacking`` the selected backends that do not export the kernel (non-empty
    exactly when it is inherited or forced by the fallback list); ``declined`` the backends that export it but
    declined the configuration asked about, each with its reason, in the order they were asked.
    """

    __slots__ = ("backend", "chain", "declined", "kernel", "lacking", "reason")

    def __init__(
        self,
        kernel: str,
        backend: str,
        reason: str,
        chain: tuple[str, ...],
        lacking: tuple[str, ...],
        declined: tuple[tuple[str, str], ...] = (),
    ):
        self.kernel = kernel
        self.backend = backend
        self.reason = reason
        self.chain = chain
        self.lacking = lacking
        self.declined = declined

    def __repr__(self) -> str:
        return f"Resolution(kernel={self.kernel!r}, backend={self.backend!r}, reason={self.reason!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resolution):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in self.__slots__))


def chain_of(settings: Settings, universe: Universe) -> tuple[str, ...]:
    return settings.chain if settings.chain is not None else (universe.default,)


def suggest(name: str, choices: Set[str] | tuple[str, ...]) -> str:
    """`` Did you mean 'rmsnorm_tl'?`` or nothing: appended to errors about unknown names."""
    import difflib  # only on an error path

    close = difflib.get_close_matches(name, sorted(choices), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


def unknown_kernel_error(kernel: str, universe: Universe) -> AttributeError:
    return AttributeError(
        f"module 'lazyops' has no attribute {kernel!r}: no known backend exports a kernel of that name."
        f"{suggest(kernel, universe.known_kernels())} `lazyops list` shows every kernel.",
        name=kernel,
        obj=None,
    )


def validate(settings: Settings, universe: Universe) -> None:
    """Raise ``ConfigError`` for a configuration that no access could honour; called when it is read."""
    origin = settings.origin
    if settings.chain is not None:
        for backend in settings.chain:
            if backend not in universe.backends:
                raise ConfigError(
                    f"{origin['backend']} names backend {backend!r}, which is not registered."
                    f"{suggest(backend, universe.backends)}"
                    f" Known backends: {', '.join(universe.backends)} (third-party ones register through the "
                    "'lazyops.backends' entry-point group)"
                )
    if not settings.fallback:
        return
    if settings.strict:
        raise ConfigError(
            f"{origin['strict']} forbids every fallback, but {origin['fallback']} lists "
            f"{', '.join(sorted(settings.fallback))}; drop one of the two"
        )
    chain = chain_of(settings, universe)
    default = universe.default
    for kernel in sorted(settings.fallback):
        if kernel not in universe.known_kernels():
            raise ConfigError(
                f"{origin['fallback']} names {kernel!r}, which no backend exports."
                f"{suggest(kernel, universe.known_kernels())}"
            )
        if not any(kernel in universe.exports(backend) for backend in chain):
            raise ConfigError(
                f"{origin['fallback']} names {kernel!r}, which the selected backend(s) {','.join(chain)} do not "
                f"export: it comes from elsewhere anyway; remove it from the list"
            )
        if kernel not in universe.exports(default):
            raise ConfigError(
                f"{origin['fallback']} names {kernel!r}, which the platform default {default!r} does not export, "
                "so it has nowhere to fall back to; remove it from the list"
            )


def resolve(
    kernel: str,
    settings: Settings,
    universe: Universe,
    *,
    serves: Callable[[str], str | None] | None = None,
    planned: str | None = None,
    label: str | None = None,
) -> Resolution:
    """Where ``kernel`` comes from under ``settings``; the order of docs/design.md, step by step.

    For one configuration (``label`` names it in messages): ``serves(backend)`` is ``None`` where ``backend`` serves
    it, else its reason for declining (asked only of backends that export the kernel, in the order's order, and at
    most once each); ``planned`` is the backend the plan in force names for it. Without them, every exporter serves.

    Raises ``AttributeError`` for a private or unknown name and ``KernelUnavailableError`` for a known kernel that
    nothing allowed can supply. ``settings`` must have passed ``validate``.
    """
    if kernel.startswith("_"):
        raise AttributeError(f"module 'lazyops' has no attribute {kernel!r}", name=kernel, obj=None)
    if kernel not in universe.known_kernels():
        raise unknown_kernel_error(kernel, universe)
    chain = chain_of(settings, universe)
    declined: dict[str, str] = {}

    def takes(backend: str) -> bool:
        if backend not in universe.backends or kernel not in universe.exports(backend):
            return False
        if backend in declined:
            return False
        reason = serves(backend) if serves is not None else None
        if reason:
            declined[backend] = reason
            return False
        return True

    def found(backend: str, reason: str, lacking: tuple[str, ...]) -> Resolution:
        return Resolution(kernel, backend, reason, chain, lacking, tuple(declined.items()))

    def lacking() -> tuple[str, ...]:
        return tuple(backend for backend in chain if kernel not in universe.exports(backend))

    if planned is not None and (not settings.strict or planned in chain) and takes(planned):
        return found(planned, PLAN, ())
    # the platform default, then the last resort: the fallback list's source, and the sources of inheritance
    sources = tuple(dict.fromkeys((universe.default, LAST_RESORT)))
    if kernel in settings.fallback:
        for source in sources:
            if takes(source):
                return found(source, DECLINED if declined else FALLBACK_LIST, lacking())
    else:
        for backend in chain:
            if takes(backend):
                return found(backend, DECLINED if declined else SELECTED, ())
        if not settings.strict:
            for source in sources:
                if takes(source):
                    return found(source, DECLINED if declined else INHERITED, lacking())
    raise unavailable_error(kernel, settings, universe, chain, declined, label)


def unavailable_error(
    kernel: str,
    settings: Settings,
    universe: Universe,
    chain: tuple[str, ...],
    declined: dict[str, str],
    label: str | None,
) -> KernelUnavailableError:
    available_in = tuple(backend for backend in universe.backends if _exports_safely(universe, backend, kernel))
    what = f"kernel {kernel!r}" if label is None else label
    if declined:
        reasons = "; ".join(f"{backend!r} declines it: {reason}" for backend, reason in declined.items())
        others = [backend for backend in available_in if backend not in declined]
        way_out = (
            f"Add {' or '.join(map(repr, others))} to LAZYOPS_BACKEND, or use a configuration those backends serve."
            if others
            else "No installed backend serves this configuration; use one they serve."
        )
        if settings.strict and others:
            way_out += " Or unset LAZYOPS_STRICT to let it come from elsewhere."
        return KernelUnavailableError(
            kernel,
            ",".join(chain),
            available_in,
            f"{what} is not served here: {reasons}. {way_out}",
            tuple(declined.items()),
        )
    runnable = tuple(backend for backend in available_in if _runs_here(backend))
    idle = [backend for backend in available_in if backend not in runnable]
    cannot = f" ({', '.join(idle)}: cannot run here)" if idle else ""
    mode = (
        "strict mode allows no fallback"
        if settings.strict
        else "neither the platform default nor the last resort (torch) has it"
    )
    return KernelUnavailableError(
        kernel,
        ",".join(chain),
        available_in,
        f"{what} is not available from backend {','.join(chain)!r} and {mode}; "
        f"it is available in: {', '.join(runnable) or 'no backend that runs here'}{cannot}. "
        + (
            ("Add one of those to LAZYOPS_BACKEND, or unset" if runnable else "Unset")
            + " LAZYOPS_STRICT to inherit it."
            if settings.strict
            else "Add one of those to LAZYOPS_BACKEND."
        ),
    )


def _runs_here(backend: str) -> bool:
    """For error messages only: whether a suggested backend can run on this machine (issue 33.13: strict mode
    suggested triton and tilelang on a CPU). A third-party backend is taken to run: its own errors say otherwise."""
    from lazyops._backends import _ways_out

    checks = {"triton": _ways_out.triton_runs, "tilelang": _ways_out.tilelang_runs}
    return checks[backend]() if backend in checks else True


def _exports_safely(universe: Universe, backend: str, kernel: str) -> bool:
    """For error messages only: a backend that cannot even list its kernels just isn't named."""
    try:
        return kernel in universe.exports(backend)
    except ImportError:
        return False
