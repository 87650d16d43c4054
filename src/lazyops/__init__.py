"""lazyops: one namespace of compute-kernel factories across backends.

``import lazyops`` imports no backend, no torch and no kernel library. ``lazyops.rmsnorm_tl`` resolves one kernel
factory on first access through this module's ``__getattr__`` (PEP 562): from the selected backend
(``LAZYOPS_BACKEND``), else from the platform default, else from the torch backend (the last resort), else it raises
``KernelUnavailableError``. The resolved factory is then stored in this module's ``__dict__``, so every later
access is a plain attribute read. ``lazyops.which(name)`` says where a name resolves and why.

Caveats of laziness, by design: type checkers cannot see through ``__getattr__``, so the package ships generated
stubs; and an error in a backend surfaces at first access, not at import, unless ``EAGER_IMPORT=1`` (the
scientific-python SPEC 1 switch) resolves everything at import.

While this module's dict holds ``__getattr__``, CPython reads even a stored kernel on its slow path. Once every
known kernel is resolved, ``lazyops.resolve_all()`` (or ``EAGER_IMPORT=1``) removes the hook, so kernel reads cost
what any module attribute costs; ``configure()`` puts it back.
"""

import _thread
import os as _os
import sys as _sys

TYPE_CHECKING = False  # typing's own constant would cost importing typing
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from lazyops._errors import BackendError, ConfigError, KernelInputError, KernelUnavailableError, LazyopsError
    from lazyops._namespace import Namespace
    from lazyops._resolve import Resolution
    from lazyops._settings import Settings

__version__ = "0.2.0"
__all__ = [
    "BackendError",
    "ConfigError",
    "KernelInputError",
    "KernelUnavailableError",
    "LazyopsError",
    "backends",
    "configure",
    "kernels",
    "resolve_all",
    "which",
]

if "_state_lock" not in globals() and hasattr(_os, "register_at_fork"):  # the first run of this file, not a reload
    # Through the module's dict, so that a reload's new function is the one called.
    _os.register_at_fork(after_in_child=lambda: globals()["_renew_state_lock"]())  # noqa: PLW0108

if globals().get("_state_object") is not None:
    # importlib.reload(lazyops): the kernels the previous namespace stored in this very dict are stale.
    globals()["_state_object"].reset()

# Not named after the module _namespace: importing that submodule sets the package attribute of its name.
_state_object: "Namespace | None" = None
_state_lock = _thread.allocate_lock()  # _thread, not threading: this file must stay cheap to import
_UNSET = object()
# The public errors live in lazyops._errors, imported on their first use (or with the namespace) rather than by
# ``import lazyops``: a module costs a few hundred microseconds to import, and most programs never name them.
_ERRORS = ("BackendError", "ConfigError", "KernelInputError", "KernelUnavailableError", "LazyopsError")


def __tracebackhide__(excinfo: object) -> bool:  # read by pytest; see lazyops._errors.hide_in_pytest_tracebacks
    from lazyops._errors import hide_in_pytest_tracebacks

    return hide_in_pytest_tracebacks(excinfo)


def _publish_errors() -> None:
    """Put the public errors in this module's dict, where every later read finds them directly."""
    from lazyops import _errors

    for name in _ERRORS:
        globals()[name] = getattr(_errors, name)


def _renew_state_lock() -> None:
    """In a forked child: the parent's lock may have been held by a thread that does not exist here."""
    global _state_lock
    _state_lock = _thread.allocate_lock()


def _state() -> "Namespace":
    """The namespace behind this module, built once on first use: its imports are the part worth postponing."""
    global _state_object
    state = _state_object
    if state is None:
        # Imported before the lock is taken: an import must never wait for a lock of ours (another thread may hold
        # the import system's lock and be waiting for this one).
        from lazyops._namespace import Namespace

        with _state_lock:
            if _state_object is None:
                _state_object = Namespace(globals())
            state = _state_object
        _publish_errors()  # lazyops._errors is loaded by now: before resolve_all() can take the hook away
    return state


def __getattr__(name: str) -> "Any":
    if name.startswith("_"):
        raise AttributeError(f"module 'lazyops' has no attribute {name!r}", name=name, obj=None)
    if name in _ERRORS:
        _publish_errors()
        return globals()[name]
    return _state().attribute(name)


def __dir__() -> list[str]:
    state = _state()
    kernels = state.kernel_names()  # sorted, and kept: with the few other names, one merge of two sorted runs
    others = (set(globals()) | set(_ERRORS)).difference(state.universe().known_kernels())
    return sorted([*kernels, *sorted(others)])


def configure(
    backend: "Any" = _UNSET, fallback: "Any" = _UNSET, strict: "Any" = _UNSET, plan: "Any" = _UNSET
) -> "Settings":
    """Set the backend chain, the fallback list, strict mode or the plan from code, as the environment variables do.

    ``backend`` is a name, a comma list or a list or tuple of names (a priority chain), or ``None`` for the
    platform default; ``fallback`` the kernel names that must come from the platform default; ``strict`` forbids
    every fallback; ``plan`` is a plan file's path (``lazyops tune``), or ``None`` for none. Arguments left out keep
    their current values. All the settings are validated at once (``ConfigError``, nothing changed, if it is
    wrong), and every resolved kernel is dropped, so the next access resolves afresh. Returns the settings now in
    force.
    """
    given = {
        key: value
        for key, value in (("backend", backend), ("fallback", fallback), ("strict", strict), ("plan", plan))
        if value is not _UNSET
    }
    return _state().configure(**given)


def resolve_all() -> tuple[str, ...]:
    """Resolve every known kernel now (as ``EAGER_IMPORT=1`` does); returns the names that could not be resolved.

    A kernel the settings give no source for (``KernelUnavailableError``, e.g. in strict mode) is returned,
    not raised; any other error (``ConfigError``, ``BackendError``) raises as the access would. When the tuple is
    empty, every kernel sits in this module's dict and the module's ``__getattr__`` is removed, so reading
    ``lazyops.<kernel>`` is as fast as any module attribute (CPython does not specialise attribute reads on a
    module with a ``__getattr__``). The one visible difference until the next ``configure()`` (which puts the hook
    back): a misspelt name gets Python's plain ``AttributeError``, without lazyops' did-you-mean.
    """
    return _state().resolve_all()


def which(name: str, *args: "Any", **kwargs: "Any") -> "Resolution":
    """Where ``name`` resolves now and why (``.backend``, ``.reason``), without calling its factory.

    ``.reason`` is ``"selected"`` (from the chain), ``"fallback-list"`` (forced to the platform default by
    ``LAZYOPS_FALLBACK``) or ``"inherited"`` (the chain lacks it). Given the factory's arguments
    (``lazyops.which("rmsnorm_tl", 4096, torch.bfloat16)``), it answers for that configuration, which may also be
    ``"declined"`` (a backend before it in the order does not serve the configuration: ``.declined`` says who and
    why) or ``"plan"`` (the plan in force names the backend); that asks the backends' kernel modules whether they
    serve it. Raises as the access would.
    """
    return _state().which(name, *args, **kwargs)


def backends() -> tuple[str, ...]:
    """Every known backend name: the built-ins, then those registered through entry points."""
    return _state().backend_names()


def kernels() -> tuple[str, ...]:
    """Every kernel name any known backend exports, sorted."""
    return _state().kernel_names()


def _is_backend(name: str) -> bool:
    return name in _state().universe().registry


def _load_backend(name: str) -> "ModuleType":
    return _state().universe().registry[name].load()


class BackendAliasFinder:
    """A meta-path finder and loader in one (duck-typed: ``importlib.abc`` alone costs 25 ms to import).

    ``import lazyops.<backend>`` gives the backend's own module (the TVM-style public alias).

    A finder appended to ``sys.meta_path`` answers only for ``lazyops.<name>`` where ``<name>`` is a registered
    backend and no real submodule of that name exists (the path finder, which runs first, finds real ones). The
    alias is the backend module itself, loaded through the registry, so ``register_backend()`` runs and rolls back as
    for any other load.

    Where the loading happens matters. The import system calls ``find_spec`` with its global lock held, so every
    other thread's import waits until it returns: ``find_spec`` only looks the name up in the registry and never runs
    the backend's code. ``create_module`` runs under the lock of ``lazyops.<name>`` alone, which is where the backend
    is loaded: an unrelated import elsewhere goes on, and a backend whose import uses a helper thread does not stall.

    Defined here rather than in a module of its own: ``import lazyops`` installs it, and every module that import
    loads costs a few hundred microseconds.
    """

    def __init__(
        self,
        package: str,
        is_backend: "Callable[[str], bool]",
        load_backend: "Callable[[str], ModuleType]",
    ) -> None:
        self.package = package
        self._prefix = package + "."
        self._is_backend = is_backend
        self._load_backend = load_backend
        # Each module's own spec, from create_module to exec_module (a dict: aliases of different backends may be
        # imported by several threads at once).
        self._own_specs: dict[str, Any] = {}

    def find_spec(
        self, fullname: str, path: "Any" = None, target: "Any" = None
    ) -> "importlib.machinery.ModuleSpec | None":
        if not fullname.startswith(self._prefix):
            return None
        name = fullname[len(self._prefix) :]
        if "." in name or name.startswith("_") or not self._is_backend(name):
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)  # type: ignore[arg-type]

    def create_module(self, spec: "importlib.machinery.ModuleSpec") -> "ModuleType":
        module = self._load_backend(spec.name[len(self._prefix) :])
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: "ModuleType") -> None:
        # Nothing to run: the registry executed the backend module. The import system has just replaced its
        # __spec__ with the alias's; put the real one back so the module keeps its identity (reload, pickling).
        module.__spec__ = self._own_specs.pop(module.__spec__.name, module.__spec__)  # type: ignore[union-attr]


# Kept out of the public names (dir(), the stub) under a private one; its class name is what a reload looks for.
_BackendAliasFinder = BackendAliasFinder
del BackendAliasFinder


def _is_alias_finder(finder: object) -> bool:
    return type(finder).__name__ == "BackendAliasFinder" and getattr(finder, "package", None) == __name__


# One finder per package, also after a reload (which runs this file again in the same module, with a new class).
_sys.meta_path[:] = [finder for finder in _sys.meta_path if not _is_alias_finder(finder)]
_sys.meta_path.append(_BackendAliasFinder(__name__, _is_backend, _load_backend))

if _os.environ.get("EAGER_IMPORT", "") not in ("", "0"):
    from lazyops._eager import resolve_at_import as _resolve_at_import

    _resolve_at_import(_state())
