"""The state behind ``lazyops.__getattr__``: settings, backends, and the resolved kernels.

One ``Namespace`` owns a module's ``__dict__``: a resolved kernel is stored there, so every later read is a plain
attribute read that never reaches ``__getattr__`` again. Resolution holds one lock, re-checking the dict inside
it, so threads racing on a first access resolve once and all get the same object. ``configure()`` validates a
whole new configuration before touching anything, then drops every stored kernel; a failed ``configure()``
changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator, Mapping, MutableMapping

from lazyops._config import Settings, apply_overrides, settings_from_environment
from lazyops._platform import platform_default
from lazyops._registry import Registry
from lazyops._resolve import INHERITED, Resolution, chain_of, inherited_kernels, resolve, unknown_kernel_error, validate
from lazyops._notices import Notices, inherited_line, summary_line
from lazyops._trace import Tracer
from lazyops._wrap import ResolvedFactory
from lazyops._errors import BackendError


_VARIABLE_OF = {"backend": "LAZYOPS_BACKEND", "fallback": "LAZYOPS_FALLBACK", "strict": "LAZYOPS_STRICT"}


class InstalledUniverse:
    """The ``_resolve.Universe`` of a registry: exports from manifests, the default probed on first need."""

    def __init__(self, registry: Registry, default: Callable[[], str]) -> None:
        self.registry = registry
        self._default_probe = default
        self._default: str | None = None
        self._known: frozenset[str] | None = None
        #: backends whose kernel list could not be read, with why (shown by ``lazyops list``)
        self.unreadable: dict[str, BackendError] = {}

    @property
    def backends(self) -> tuple[str, ...]:
        return self.registry.names

    @property
    def default(self) -> str:
        if self._default is None:
            self._default = self._default_probe()
        return self._default

    def exports(self, backend: str) -> frozenset[str]:
        return self.registry[backend].exports()

    def known_kernels(self) -> frozenset[str]:
        if self._known is None:
            known: set[str] = set()
            for backend in self.registry:
                try:
                    known |= backend.exports()
                except BackendError as error:
                    # A backend that cannot list its kernels only fails when it is selected; here it just
                    # contributes no names, so one broken plugin does not take the whole namespace down.
                    self.unreadable[backend.name] = error
            self._known = frozenset(known)
        return self._known


class Namespace:
    def __init__(
        self,
        module_dict: MutableMapping[str, Any],
        *,
        environ: Mapping[str, str] = os.environ,
        discover: Callable[[], Registry] = Registry.discover,
        default: Callable[[], str] = platform_default,
    ) -> None:
        self._dict = module_dict
        self._environ = environ
        self._discover = discover
        self._default = default
        self._lock = threading.RLock()
        self._universe: InstalledUniverse | None = None
        self._settings: Settings | None = None
        self._overrides: dict[str, Any] = {}
        self._stored: set[str] = set()
        self._tracer: Tracer | None = None
        self._summarised = False
        self.notices = Notices()

    # -- what is installed -------------------------------------------------------------------------------------
    def universe(self) -> InstalledUniverse:
        with self._lock:
            if self._universe is None:
                self._universe = InstalledUniverse(self._discover(), self._default)
            return self._universe

    def backend_names(self) -> tuple[str, ...]:
        return self.universe().backends

    def kernel_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.universe().known_kernels()))

    def unavailable_reason(self, backend: str) -> str | None:
        """``None`` when ``backend`` can serve kernels here; else why not (not installed, import fails, no GPU).

        This loads the backend package (not its kernel modules): it is for listings and test parametrization,
        never for resolution, which reports the same problems as exceptions.
        """
        try:
            reason = self.universe().registry[backend].unavailable_reason()
        except BackendError as error:
            return str(error)
        return f"backend {backend!r} cannot run here: {reason}" if reason else None

    # -- configuration -----------------------------------------------------------------------------------------
    def settings(self) -> Settings:
        """The settings in force, read from the environment on first need and validated then."""
        with self._lock:
            if self._settings is None:
                self._settings = self._read(self._overrides)
            return self._settings

    def _read(self, overrides: Mapping[str, Any]) -> Settings:
        # A variable that configure() overrides is not parsed: its value cannot matter, so it cannot be a mistake.
        environ = {k: v for k, v in self._environ.items() if k not in {_VARIABLE_OF[name] for name in overrides}}
        settings = apply_overrides(settings_from_environment(environ), overrides)
        validate(settings, self.universe())
        return settings

    def configure(self, **overrides: Any) -> Settings:
        with self._lock:
            merged = {**self._overrides, **overrides}
            settings = self._read(merged)  # raises before anything changes
            self._overrides = merged
            self._install(settings)
            return settings

    @contextlib.contextmanager
    def configured(self, **overrides: Any) -> Iterator[Settings]:
        """``configure(**overrides)`` for the length of a ``with`` block, then the configuration before it back.

        For the pytest plugin: ``--lazyops-backend`` holds for one session and the ``lazyops_backend`` fixture for
        one test, and neither may leak into what runs after it (pytester's in-process runs share this module). A
        refused configuration raises before the block and changes nothing.
        """
        with self._lock:
            previous = dict(self._overrides)
            settings = self.configure(**overrides)
        try:
            yield settings
        finally:
            with self._lock:
                self._overrides = previous
                self._install(None)  # re-read on next need: the environment may have changed meanwhile

    def reset(self) -> None:
        """Forget configure()'s arguments and every resolution: as just imported (tests, the pytest plugin)."""
        with self._lock:
            self._overrides = {}
            self._universe = None
            self._install(None)

    def _install(self, settings: Settings | None) -> None:
        for name in self._stored:
            self._dict.pop(name, None)
        self._stored.clear()
        self._settings = settings
        self._tracer = None
        self._summarised = False

    # -- resolution --------------------------------------------------------------------------------------------
    def which(self, kernel: str) -> Resolution:
        if not isinstance(kernel, str):
            raise TypeError(f"lazyops.which() takes a kernel name, got {type(kernel).__name__}")
        self._check_name(kernel)
        with self._lock:
            return resolve(kernel, self.settings(), self.universe())

    def _check_name(self, kernel: str) -> None:
        # Private and unknown names fail before the configuration is read: tools probe such names (copy's
        # __deepcopy__, IPython's canaries) and must get a plain AttributeError, whatever the environment holds.
        if kernel.startswith("_"):
            raise AttributeError(f"module 'lazyops' has no attribute {kernel!r}", name=kernel, obj=None)
        universe = self.universe()
        if kernel not in universe.known_kernels():
            raise unknown_kernel_error(kernel, universe)

    def attribute(self, kernel: str) -> Any:
        """``lazyops.<kernel>`` on first access: resolve, load, wrap if needed, store."""
        self._check_name(kernel)
        with self._lock:
            if kernel in self._stored:  # another thread resolved it while this one waited
                return self._dict[kernel]
            settings = self.settings()
            self._summarise(settings)  # before resolving: in strict mode the first access may well raise
            resolution = resolve(kernel, settings, self.universe())
            factory = self.universe().registry[resolution.backend].kernel(kernel)
            resolved = self._wrap(factory, resolution, settings)
            self._dict[kernel] = resolved
            self._stored.add(kernel)
            return resolved

    def _wrap(self, factory: Any, resolution: Resolution, settings: Settings) -> Any:
        announce = None
        if resolution.reason == INHERITED:
            line = inherited_line(resolution.kernel, resolution.backend, resolution.lacking)
            verbose = settings.verbose

            def announce() -> None:
                self.notices.emit(line, verbose=verbose)

        if settings.trace and self._tracer is None:
            self._tracer = Tracer(settings.trace, settings.trace_args)
        if announce is None and self._tracer is None:
            return factory
        return ResolvedFactory(factory, resolution, on_first_call=announce, tracer=self._tracer)

    def _summarise(self, settings: Settings) -> None:
        """The first resolution's one line, when the chain is anything but the platform default alone."""
        if self._summarised:
            return
        self._summarised = True
        universe = self.universe()
        chain = chain_of(settings, universe)
        if settings.chain is None or chain == (universe.default,):
            return
        lacking = inherited_kernels(settings, universe)
        line = summary_line(chain, settings.strict, lacking, len(universe.known_kernels()), settings.verbose)
        self.notices.emit(line, verbose=settings.verbose)

    def eager_resolve(self) -> None:
        """``EAGER_IMPORT``: resolve every kernel now, so that any error surfaces at import."""
        from lazyops._errors import KernelUnavailableError

        for kernel in self.kernel_names():
            try:
                self.attribute(kernel)
            except KernelUnavailableError:
                # Not an import problem: strict mode on a partial backend is a valid state, and the access itself
                # raises with the full explanation.
                pass
