"""The state behind ``lazyops.__getattr__``: settings, backends, and the resolved kernels.

One ``Namespace`` owns a module's ``__dict__``: a resolved kernel is stored there, so every later read is a plain
attribute read that never reaches ``__getattr__`` again.

Threads. The namespace's lock guards its own fields and is held only for a few dictionary operations, never while
code lazyops does not control runs (a backend's import, its ``register_backend()`` or ``unavailable_reason()``):
such code may import, start threads or call back into lazyops, and a lock held across it invites deadlocks with the
import system's locks. So a first access decides under the lock what to do, loads outside it (each backend loads
once, see ``_once``), and stores under the lock again, re-checking: threads racing on a first access all get the
object the first of them stored, and a resolution begun before a ``configure()`` is not stored after it (each
``configure()`` or ``reset()`` starts a new *generation*).

``configure()`` validates all the new settings before touching anything, then drops every stored kernel; a
failed ``configure()`` changes nothing.

The fast state. CPython's specialised module-attribute read (``LOAD_ATTR_MODULE``) declines any module whose
``__dict__`` holds a ``__getattr__``, so even a stored kernel costs a slow read while the hook is there. Once every
known kernel of the current generation is stored, ``resolve_all()`` takes ``__getattr__`` out of the dict (nothing
is left for it to do but say did-you-mean to a misspelt name), and ``_install`` puts it back, first thing and under
the lock, so that no reader can see a generation whose kernels are gone and whose hook is still missing.
"""

from __future__ import annotations

import _thread
import os

from lazyops._backends import platform_default
from lazyops._errors import BackendError, ConfigError, KernelUnavailableError
from lazyops._errors import hide_in_pytest_tracebacks as __tracebackhide__  # noqa: F401
from lazyops._once import OnceCycleError, fork_safe
from lazyops._registry import Registry
from lazyops._resolve import INHERITED, PLAN, Resolution, chain_of, resolve, unknown_kernel_error, validate
from lazyops._settings import (
    Settings,
    apply_overrides,
    environment_without_overridden,
    settings_from_environment,
    unknown_variables,
)

# Only what the first access of a kernel from the platform default needs is imported above; the printed lines
# (_notices), the summary (_sources), tracing (_trace) and the wrapper (_wrap) are imported where first needed.
TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping
    from typing import Any

    from lazyops._notices import Notices
    from lazyops._trace import Tracer


class InstalledUniverse:
    """The ``_resolve.Universe`` of a registry: exports from manifests, the default probed on first need.

    Its memos are computed without a lock (reading a kernel list may import a stub-less backend) and published
    whole; two threads computing one at once compute the same thing.
    """

    def __init__(self, registry: Registry, default: Callable[[], str]) -> None:
        self.registry = registry
        self._default_probe = default
        self._default: str | None = None
        self._known: frozenset[str] | None = None
        self._sorted: tuple[str, ...] | None = None

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

    @property
    def complete(self) -> bool:
        """Whether ``known_kernels()`` is final (not an answer given from inside a backend's own loading)."""
        return self._known is not None

    def known_kernels(self) -> frozenset[str]:
        """Every kernel name any backend exports; a backend that cannot list its kernels contributes none (it
        fails when it is selected: one broken plugin must not take the namespace down)."""
        known = self._known
        if known is not None:
            return known
        names: set[str] = set()
        final = True
        for backend in self.registry:
            try:
                names.update(backend.exports())
            except BackendError as error:
                # Asked from inside that backend's own loading (a stub-less one listing its kernels): the answer
                # lacks its names, so it is not one to keep.
                final = final and not isinstance(error.__cause__, OnceCycleError)
        known = frozenset(names)
        if final:
            self._known = known
        return known

    def kernel_names(self) -> tuple[str, ...]:
        """``known_kernels()`` sorted, kept once final: ``dir(lazyops)`` and ``lazyops.kernels()`` ask often."""
        names = self._sorted
        if names is None:
            names = tuple(sorted(self.known_kernels()))
            if self.complete:
                self._sorted = names
        return names


class _Configured:
    """``Namespace.configured``'s context manager (a class: ``contextlib`` costs milliseconds to import)."""

    def __init__(self, namespace: _SettingsInForce, overrides: dict[str, Any]) -> None:
        self._namespace, self._overrides = namespace, overrides
        self._previous: dict[str, Any] = {}

    def __enter__(self) -> Settings:
        with self._namespace._lock:
            self._previous = dict(self._namespace._overrides)
        return self._namespace.configure(**self._overrides)

    def __exit__(self, *exc_info: object) -> None:
        self._namespace._restore(self._previous)


class _Installed:
    """What is installed: the backends, their kernels, whether one runs here; the state every part below shares
    (its fields, its lock). The first part of :class:`Namespace`, whose concerns stack so: what is installed, the
    settings (and the lines they print), tracing and wrapping, one configuration, then the attribute read."""

    def __init__(
        self,
        module_dict: MutableMapping[str, Any],
        *,
        environ: Mapping[str, str] = os.environ,
        discover: Callable[[], Registry] = Registry.discover,
        default: Callable[[], str] = platform_default,
    ) -> None:
        # Nothing here imports or runs user code: the package's state accessor builds this under a lock.
        self._dict = module_dict
        self._environ = environ
        self._discover = discover
        self._default = default
        self._lock = _thread.allocate_lock()  # _thread, not threading: a lighter first access
        self._generation = 0
        self._universe: InstalledUniverse | None = None
        self._settings: Settings | None = None
        self._overrides: dict[str, Any] = {}
        self._stored: set[str] = set()
        self._tracer: Tracer | None = None
        self._summarised = False
        #: the module's ``__getattr__`` while resolve_all() has taken it out of the dict (the fast state), else None
        self._hidden_getattr: Any = None
        self._notices: Notices | None = None
        #: the plan in force (``None``: none, or one that does not apply here) and the generation it was read for
        self._plan: Any = None
        self._plan_generation = -1
        #: what EAGER_IMPORT's resolution raised when lazyops was imported for its own tools (see lazyops._eager)
        self.eager_error: BaseException | None = None
        fork_safe(self)

    # -- what is installed -------------------------------------------------------------------------------------
    def universe(self) -> InstalledUniverse:
        universe = self._universe
        if universe is not None:
            return universe
        fresh = InstalledUniverse(self._discover(), self._default)  # reads metadata: outside the lock
        with self._lock:
            if self._universe is None:
                self._universe = fresh
            return self._universe

    def backend_names(self) -> tuple[str, ...]:
        return self.universe().backends

    def kernel_names(self) -> tuple[str, ...]:
        return self.universe().kernel_names()

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

    def _check_name(self, kernel: str) -> None:
        # Private and unknown names fail before the configuration is read: tools probe such names (copy's
        # __deepcopy__, IPython's canaries) and must get a plain AttributeError, whatever the environment holds.
        if kernel.startswith("_"):
            raise AttributeError(f"module 'lazyops' has no attribute {kernel!r}", name=kernel, obj=None)
        universe = self.universe()
        if kernel not in universe.known_kernels():
            raise unknown_kernel_error(kernel, universe)

    def _after_fork_in_child(self) -> None:
        self._lock = _thread.allocate_lock()


class _SettingsInForce(_Installed):
    """The settings and the plan in force: read from the environment on first need, replaced by ``configure()``
    (a new generation), put back by ``reset()``; and the lines printed once per process under them."""

    @property
    def notices(self) -> Notices:
        """The printed lines' once-per-process memory, made when the first line is printed."""
        notices = self._notices
        if notices is None:
            from lazyops._notices import Notices  # before the lock: an import must never wait for a lock of ours

            with self._lock:
                if self._notices is None:
                    self._notices = Notices()
                notices = self._notices
        return notices

    def announce(self, line: str) -> None:
        """Print ``line`` once per process (rank 0 unless verbose)."""
        settings = self.settings()
        self.notices.emit(line, verbose=settings.verbose, rank=settings.rank)

    # -- settings --------------------------------------------------------------------------------------------
    def settings(self) -> Settings:
        """The settings in force, read from the environment on first need and validated then."""
        return self._current()[1]

    def _current(self) -> tuple[int, Settings]:
        while True:
            with self._lock:
                generation, settings, overrides = self._generation, self._settings, self._overrides
            if settings is not None:
                return generation, settings
            settings = self._read(overrides)  # validating may import a stub-less backend: outside the lock
            with self._lock:
                if self._generation == generation:
                    if self._settings is None:
                        self._settings = settings
                    return generation, self._settings
            # configure() or reset() ran meanwhile: read what is in force now

    def _read(self, overrides: Mapping[str, Any]) -> Settings:
        environ = environment_without_overridden(self._environ, overrides)
        settings = apply_overrides(settings_from_environment(environ), overrides)
        validate(settings, self.universe())
        return settings

    def configure(self, **overrides: Any) -> Settings:
        while True:
            with self._lock:
                generation, merged = self._generation, {**self._overrides, **overrides}
            settings = self._read(merged)  # raises before anything changes
            if overrides.get("plan") is not None and settings.plan is not None:
                from lazyops import _plan

                _plan.load(settings.plan)  # configure validates at once: a missing plan is refused here (33.9)
            with self._lock:
                if self._generation == generation:
                    self._overrides = merged
                    self._install(settings)
                    return settings
            # another configure() won the race: apply these arguments over its settings

    def configured(self, **overrides: Any) -> _Configured:
        """``configure(**overrides)`` for the length of a ``with`` block, then the settings before it back.

        For the pytest plugin: ``--lazyops-backend`` holds for one session and the ``lazyops_backend`` fixture for
        one test, and neither may leak into what runs after it (pytester's in-process runs share this module). A
        refused setting raises before the block and changes nothing.
        """
        return _Configured(self, overrides)

    def _restore(self, overrides: dict[str, Any]) -> None:
        with self._lock:
            self._overrides = overrides
            self._install(None)  # re-read on next need: the environment may have changed meanwhile

    def reset(self) -> None:
        """Forget configure()'s arguments and every resolution: as just imported (tests, the pytest plugin)."""
        with self._lock:
            self._overrides = {}
            self._universe = None
            self._install(None)

    def _install(self, settings: Settings | None) -> None:
        """Start a new generation under ``settings`` (``None``: read on next need). Called with the lock held."""
        # The hook first: a reader between these two steps must find either the kernel or the hook, never neither.
        if self._hidden_getattr is not None:
            self._dict["__getattr__"] = self._hidden_getattr
            self._hidden_getattr = None
        for name in self._stored:
            self._dict.pop(name, None)
        self._stored.clear()
        self._settings = settings
        self._generation += 1
        self._tracer = None
        self._summarised = False

    def plan(self) -> Any:
        """The plan in force (``_plan.Plan``), read and checked against this machine once per change of settings;
        ``None`` without ``LAZYOPS_PLAN``, or where the plan does not apply here (said once; ``LAZYOPS_PLAN_STRICT=1``
        raises the ``ConfigError`` instead)."""
        generation, settings = self._current()
        with self._lock:
            if self._plan_generation == generation:
                return self._plan
        plan = None
        if settings.plan is not None:
            from lazyops import _plan  # only with a plan: it reads the device and the versions

            plan = _plan.load(settings.plan)
            differences = _plan.applies_here(plan, self.universe().registry.origins())
            if differences:
                line = (
                    f"the plan {_plan.printable(settings.plan)} was made elsewhere or is stale "
                    f"({'; '.join(differences)}); kernels resolve as without a plan. Make it again here with "
                    "`lazyops tune`"
                )
                if settings.plan_strict:
                    raise ConfigError(f"{line} (LAZYOPS_PLAN_STRICT=1 makes this an error)")
                self.announce(f"lazyops: {line}")
                plan = None
        with self._lock:
            if generation == self._generation:
                self._plan, self._plan_generation = plan, generation
        return plan


class _Wrapping(_SettingsInForce):
    """What is put around a resolved factory: the trace, the notice of an inherited kernel, the summary line."""

    def traced(self, factory: Any, resolution: Resolution) -> Any:
        """``factory``, wrapped to trace its constructions where tracing is on."""
        tracer = self._tracer
        if tracer is None:
            return factory
        from lazyops._wrap import ResolvedFactory

        return ResolvedFactory(factory, resolution, on_first_call=None, tracer=tracer)

    def _wrap(self, factory: Any, resolution: Resolution, settings: Settings) -> Any:
        """The object to store: ``factory`` itself, or a wrapper for a notice or tracing. Called with the lock held."""
        announce = None
        if resolution.reason == INHERITED:

            def announce() -> None:  # at the first call, where no lock of ours is held: it may import _notices
                from lazyops._notices import inherited_line

                line = inherited_line(resolution.kernel, resolution.backend, resolution.lacking)
                self.notices.emit(line, verbose=settings.verbose, rank=settings.rank)

        self._start_tracing(settings)
        if announce is None and self._tracer is None:
            return factory
        from lazyops._wrap import ResolvedFactory

        return ResolvedFactory(factory, resolution, on_first_call=announce, tracer=self._tracer)

    def _start_tracing(self, settings: Settings) -> None:
        """The tracer of this generation, made on the first resolution that needs it. Called with the lock held."""
        if settings.trace and self._tracer is None:
            from lazyops._trace import Tracer

            self._tracer = Tracer(settings.trace, settings.trace_args, settings.rank, self._report_trace_failure)

    def _report_trace_failure(self, line: str) -> None:
        self.notices.emit(line, verbose=True, rank=0)  # every rank: each writes its own file

    def _summarise(self, generation: int, settings: Settings) -> None:
        """The first resolution's lines: each misspelt variable, and how much of the chain is missing when the
        chain is anything but the platform default alone."""
        with self._lock:
            if self._summarised or generation != self._generation:
                return
            self._summarised = True
        lines: list[str | None] = []
        unknown = unknown_variables(self._environ)
        if unknown:
            from lazyops._notices import unknown_variable_line

            lines += [unknown_variable_line(name, nearest) for name, nearest in unknown]
        universe = self.universe()
        # Only a chain other than the platform default alone has a line (``Sources.summary_line``): the table behind
        # it is built, and its module imported, only then.
        if settings.chain is not None and chain_of(settings, universe) != (universe.default,):
            from lazyops._sources import build_sources

            lines.append(build_sources(settings, universe).summary_line())
        for line in lines:
            if line is not None:
                self.notices.emit(line, verbose=settings.verbose, rank=settings.rank)


class _PerConfiguration(_Wrapping):
    """One configuration of a kernel: where it resolves (declines, plans) and the factory that resolves each one."""

    # -- resolution --------------------------------------------------------------------------------------------
    def which(self, kernel: str, *args: Any, **kwargs: Any) -> Resolution:
        if not isinstance(kernel, str):
            raise TypeError(f"lazyops.which() takes a kernel name, got {type(kernel).__name__}")
        self._check_name(kernel)
        if not args and not kwargs:
            return resolve(kernel, self.settings(), self.universe())
        resolution = resolve(kernel, self.settings(), self.universe())
        spec = self.spec_of(kernel, self.factory(resolution.backend, kernel))
        if spec is None:
            raise TypeError(
                f"lazyops.which({kernel!r}, ...): lazyops has no spec of {kernel} to read a configuration with; ask "
                f"lazyops.which({kernel!r}) for the kernel's backend"
            )
        return self.resolve_configuration(kernel, spec.bind(*args, **kwargs))[0]

    def spec_of(self, kernel: str, factory: Any) -> Any:
        """The spec a configuration of ``kernel`` is read with: the factory's own, else lazyops' (or ``None``)."""
        spec = getattr(factory, "lazyops_spec", None)
        if spec is None:
            from lazyops.specs import has_spec
            from lazyops.specs import spec as spec_of_kernel

            spec = spec_of_kernel(kernel) if has_spec(kernel) else None
        return spec

    def factory(self, backend: str, kernel: str) -> Any:
        """``backend``'s own factory of ``kernel`` (``BackendError`` if it cannot run here)."""
        return self.universe().registry[backend].kernel(kernel)

    def resolve_configuration(self, kernel: str, config: Any) -> tuple[Resolution, Any]:
        """Where one configuration of ``kernel`` resolves (the order, with each backend's ``supports`` and the plan
        in force), and the plan's entry for it (``None`` if the plan names none)."""
        settings = self.settings()
        plan = self.plan()
        entry = None
        if plan is not None:
            from lazyops import _plan

            entry = _plan.lookup(plan, kernel, config)
        planned = None if entry is None else entry.choice

        def serves(backend: str) -> str | None:
            supports = getattr(self.factory(backend, kernel), "lazyops_supports", None)
            return supports(config) if supports is not None else None

        def planned_resolution(backend: str | None) -> tuple[Resolution, str | None]:
            # a backend the plan names that cannot run here (TileLang without a GPU) is not the plan's: why not
            cannot = None if backend is None else self._cannot_run(backend, kernel)
            named = None if cannot else backend
            return resolve(kernel, settings, self.universe(), serves=serves, planned=named, label=config.label), cannot

        resolution, cannot = planned_resolution(planned)
        if planned is not None and resolution.reason != PLAN:
            from lazyops._dispatch import stale_plan_entry

            self.announce(stale_plan_entry(kernel, config.label, planned, resolution, settings.plan_strict, cannot))
            entry = None
        elif entry is not None and entry.switch is not None:
            # the switch's backend is checked as the choice is: one that would not be the plan's here is said once
            # (an error under LAZYOPS_PLAN_STRICT) and dropped, every call then running from the choice
            below, switched = entry.switch.below, entry.switch.backend
            under, cannot = planned_resolution(switched)
            if under.reason != PLAN:
                import dataclasses

                from lazyops._dispatch import stale_plan_entry

                strict, switch = settings.plan_strict, (below, entry.choice)
                self.announce(stale_plan_entry(kernel, config.label, switched, under, strict, cannot, switch))
                entry = dataclasses.replace(entry, switch=None)
        return resolution, entry

    def _cannot_run(self, backend: str, kernel: str) -> str | None:
        """Why ``backend``, which a plan names, cannot build ``kernel`` here (its ``BackendError``); ``None`` where it
        can, or where the order itself says why not (an unknown backend, one that does not export ``kernel``)."""
        universe = self.universe()
        try:
            if backend in universe.backends and kernel in universe.exports(backend):
                self.factory(backend, kernel)
        except BackendError as error:
            return str(error)
        return None

    def _per_configuration(self, kernel: str, factory: Any) -> bool:
        """Whether ``kernel``'s configurations may resolve elsewhere than ``factory``'s backend: its backend may
        decline one, or the plan in force names some. (Outside the lock: reading the plan reads a file.)"""
        if getattr(factory, "lazyops_supports", None) is None:
            plan = self.plan()
            if plan is None or not any(entry.kernel == kernel for entry in plan.entries):
                return False
        return self.spec_of(kernel, factory) is not None


class Namespace(_PerConfiguration):
    """The state behind ``lazyops.__getattr__`` (the module's docstring): the attribute read, ``resolve_all()``."""

    def attribute(self, kernel: str) -> Any:
        """``lazyops.<kernel>`` on first access: resolve, load, wrap if needed, store."""
        self._check_name(kernel)
        while True:
            generation, settings = self._current()
            with self._lock:
                if kernel in self._stored and generation == self._generation:
                    return self._dict[kernel]
            self._summarise(generation, settings)  # before resolving: in strict mode the first access may well raise
            universe = self.universe()
            resolution = resolve(kernel, settings, universe)
            factory = universe.registry[resolution.backend].kernel(kernel)  # the backend's code runs here
            configured = None
            if self._per_configuration(kernel, factory):
                from lazyops._dispatch import ConfiguredFactory  # before the lock: no import waits for a lock of ours

                configured = ConfiguredFactory(self, kernel, factory, resolution)
            with self._lock:
                if generation != self._generation:
                    continue  # configure() ran meanwhile: resolve again under what is in force now
                if kernel not in self._stored:  # the first thread to get here stores; every thread returns that
                    if configured is not None:
                        self._start_tracing(settings)
                        self._dict[kernel] = configured
                    else:
                        self._dict[kernel] = self._wrap(factory, resolution, settings)
                    self._stored.add(kernel)
                return self._dict[kernel]

    def resolve_all(self) -> tuple[str, ...]:
        """Resolve every known kernel; when all resolved, enter the fast state. Returns the kernels that could not.

        A kernel the chain lacks in strict mode (``KernelUnavailableError``) is only listed: a partial port is a
        valid state, and the access itself raises with the full explanation. Any other error (``ConfigError``,
        ``BackendError``) raises, as the access would. With nothing listed, the module's ``__getattr__`` leaves its
        dict until the next ``configure()`` or ``reset()``.
        """
        while True:
            with self._lock:
                generation = self._generation
            unavailable = []
            for kernel in self.kernel_names():
                try:
                    self.attribute(kernel)
                except KernelUnavailableError:
                    unavailable.append(kernel)
            if unavailable:
                return tuple(unavailable)
            universe = self.universe()
            with self._lock:
                if generation != self._generation or universe is not self._universe:
                    continue  # configure() or reset() ran meanwhile: what was stored may be gone
                everything = universe.complete and universe.known_kernels() <= self._stored
                if everything and self._hidden_getattr is None and "__getattr__" in self._dict:
                    self._hidden_getattr = self._dict.pop("__getattr__")
                return ()

    def eager_resolve(self) -> None:
        """``EAGER_IMPORT``: resolve every kernel now, so that any error surfaces at import (and the fast state)."""
        self.resolve_all()
