"""Discovery: the built-in backends, then third-party ones from the ``lazyops.backends`` entry-point group.

An entry point is ``name = "package.module"``; the name is what ``LAZYOPS_BACKEND`` selects. Only registered
names can be selected, never arbitrary module paths: an environment variable must not be a way to import any
module at all.

A bad entry point (a malformed name or value, a name two distributions claim, a third party claiming a built-in's
name, a name lazyops itself uses) is refused, not fatal: one broken plugin must not take down every kernel of
every other backend. A refused name stays known, and using it raises the ``BackendError`` that says why (two
claimants are both refused, since preferring one would make the running code depend on install order); a claim on
a built-in's name leaves the built-in in place. ``Registry.refused`` lists every refusal, for ``lazyops list``.

The entry points are read through ``importlib.metadata`` on every discovery (the first access of a process): about
2 ms for 54 installed distributions with torch imported, which docs/decisions/001-no-disk-cache.md weighs against
keeping a cache.
"""

from __future__ import annotations

import sys

from lazyops._backend import Backend
from lazyops._errors import BackendError

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from importlib.metadata import EntryPoint
    from typing import NoReturn

ENTRY_POINT_GROUP = "lazyops.backends"

#: (name, module, how to install what it needs); torch, the last resort, comes first.
BUILTINS = (
    ("torch", "lazyops._backends.torch", "install it with: pip install torch"),
    ("triton", "lazyops._backends.triton", "install it with: pip install 'lazyops[triton]'"),
    ("tilelang", "lazyops._backends.tilelang", "install it with: pip install 'lazyops[tilelang]'"),
)

#: One entry point as discovery uses it: (name, value, the distribution that declares it).
EntryPointTriple = tuple[str, str, str]


class RefusedBackend:
    """A registered name that cannot be a backend: every use raises the ``BackendError`` saying why."""

    def __init__(self, name: str, origin: str, reason: str) -> None:
        self.name = name
        self.module_name = ""
        self.origin = origin
        self.reason = reason
        self.loaded = False

    def __repr__(self) -> str:
        return f"<lazyops refused backend {self.name!r}: {self.reason}>"

    def error(self) -> BackendError:
        return BackendError(self.reason, backend=self.name)

    def exports(self) -> frozenset[str]:
        raise self.error()

    def manifest(self) -> dict[str, tuple[str | None, str]]:
        raise self.error()

    def load(self) -> NoReturn:
        raise self.error()

    def unavailable_reason(self) -> str | None:
        raise self.error()

    def default_device(self) -> str:
        raise self.error()

    def kernel(self, kernel: str) -> NoReturn:
        raise self.error()


class Registry:
    """The known backends, in order: built-ins first, then third-party ones sorted by name."""

    def __init__(self, backends: Iterable[Backend | RefusedBackend], refused: Iterable[RefusedBackend] = ()) -> None:
        self._backends = {backend.name: backend for backend in backends}
        #: every refused entry point, including those whose name stays with a built-in
        self.refused = tuple(refused)

    @classmethod
    def discover(cls, entry_points: Iterable[EntryPointTriple] | None = None) -> Registry:
        """The built-ins and the installed entry points (or ``entry_points``, for tests)."""
        found: dict[str, Backend | RefusedBackend] = {
            name: Backend(name, module, "built-in", hint) for name, module, hint in BUILTINS
        }
        refused: list[RefusedBackend] = []
        if entry_points is None:
            try:
                entry_points = installed_entry_points()
            except Exception as error:  # noqa: BLE001 - one distribution's unreadable file fails the whole scan
                refused.append(_unreadable_entry_points(error))
                entry_points = []
        claims: dict[str, list[EntryPointTriple]] = {}
        for triple in sorted(entry_points, key=lambda t: (t[0], t[2])):
            claims.setdefault(triple[0], []).append(triple)
        reserved = reserved_names() if claims else frozenset()
        for name, claimants in claims.items():
            backend = _backend_of(name, claimants, found.get(name), reserved)
            if isinstance(backend, RefusedBackend):
                refused.append(backend)
            found.setdefault(name, backend)
        return cls(found.values(), refused)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._backends)

    def __getitem__(self, name: str) -> Backend | RefusedBackend:
        return self._backends[name]

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def __iter__(self) -> Iterator[Backend | RefusedBackend]:
        return iter(self._backends.values())

    def origins(self) -> dict[str, str]:
        """Each backend's origin: ``"built-in"``, or the distribution that registered it (what a plan locks)."""
        return {name: backend.origin for name, backend in self._backends.items()}


def installed_entry_points() -> list[EntryPointTriple]:
    """The ``lazyops.backends`` entry points of the installed distributions, as ``importlib.metadata`` lists them."""
    from importlib.metadata import entry_points

    return [(ep.name, ep.value, _distribution_of(ep)) for ep in entry_points(group=ENTRY_POINT_GROUP)]


def _distribution_of(entry_point: EntryPoint) -> str:
    """The name of the distribution declaring ``entry_point``, for messages.

    Reading it parses the distribution's ``METADATA``, which may be broken (a non-UTF-8 author name) where its
    ``entry_points.txt`` and its code are fine: the entry point is used all the same, named by its folder.
    """
    distribution = getattr(entry_point, "dist", None)
    try:
        name = getattr(distribution, "name", None)
    except Exception as error:  # noqa: BLE001 - whatever the metadata's parser raises
        folder = getattr(distribution, "_path", None)  # PathDistribution's .dist-info folder: no public name for it
        where = f"at {folder}" if folder else f"of entry point {entry_point.name!r}"
        return f"the distribution {where} (its metadata is unreadable: {type(error).__name__})"
    return name or "an unknown distribution"


def _unreadable_entry_points(error: Exception) -> RefusedBackend:
    return RefusedBackend(
        ENTRY_POINT_GROUP,
        "the installed distributions",
        f"the installed '{ENTRY_POINT_GROUP}' entry points cannot be read ({type(error).__name__}: {error}); only "
        "the built-in backends are available. Reinstall or uninstall the distribution whose metadata is broken "
        '(`python -c "import importlib.metadata as m; m.entry_points()"` shows the same error)',
    )


def reserved_names() -> frozenset[str]:
    """Names no backend may take: ``lazyops.<name>`` is already lazyops' own.

    ``import lazyops.<backend>`` gives the backend's module and sets the package's attribute of that name, so a
    backend named ``kernels`` would replace the function ``lazyops.kernels``; and a real submodule
    (``lazyops.testing``) is found before any backend, so a backend of its name could not be imported so. Derived
    from the package itself (its ``__all__``, its public functions, its submodules found without importing them),
    so that a new public name or submodule is reserved without a list to keep.
    """
    import pkgutil

    package = sys.modules["lazyops"]  # imported before any of its modules (an import statement would be a cycle)
    functions = {
        name
        for name, value in vars(package).items()
        if callable(value) and getattr(value, "__module__", None) == "lazyops" and not name.startswith("_")
    }
    submodules = {module.name for module in pkgutil.iter_modules(getattr(package, "__path__", []))}
    return frozenset(package.__all__) | functions | submodules


def _backend_of(
    name: str, claimants: list[EntryPointTriple], builtin: Backend | RefusedBackend | None, reserved: frozenset[str]
) -> Backend | RefusedBackend:
    """The backend that entry points named ``name`` register, or the refusal saying why they cannot."""
    distributions = " and ".join(distribution for _, _, distribution in claimants)
    values = ", ".join(value for _, value, _ in claimants)
    if builtin is not None:
        return RefusedBackend(
            name,
            distributions,
            f"backend name {name!r} is claimed by built-in and by {distributions} ({values}); the built-in stays "
            f"in use. Uninstall {distributions}, or ask its authors to rename the entry point",
        )
    if len(claimants) > 1:
        return RefusedBackend(
            name,
            distributions,
            f"backend name {name!r} is claimed twice: by {distributions} ({values}); neither is used until one "
            "of them is uninstalled",
        )
    ((_, value, distribution),) = claimants
    if not _is_backend_name(name):
        problem = (
            "a backend name must be lowercase letters, digits and '_' (it is written in LAZYOPS_BACKEND's comma "
            "list); ask its authors to rename it"
        )
    elif name in reserved:
        problem = (
            f"lazyops.{name} is lazyops' own (a public name or submodule), so `import lazyops.{name}` could not "
            "give the backend; ask its authors to rename the entry point, or uninstall it"
        )
    elif not all(part.isascii() and part.isidentifier() for part in value.split(".")):
        problem = "the value must be a module path like 'package.module' (no ':attribute'); ask its authors to fix it"
    else:
        return Backend(name, value, distribution, f"reinstall {distribution}")
    return RefusedBackend(
        name, distribution, f"entry point {name!r} = {value!r} of {distribution} is refused: {problem}"
    )


# The characters of a backend name (it is written in LAZYOPS_BACKEND's comma list): lowercase ASCII letters first.
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _is_backend_name(name: str) -> bool:
    return "a" <= name[:1] <= "z" and set(name) <= _NAME_CHARACTERS
