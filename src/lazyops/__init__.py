"""lazyops: one namespace of compute-kernel factories across backends.

``import lazyops`` imports no backend, no torch and no kernel library. ``lazyops.rmsnorm_tl`` resolves one kernel
factory on first access through this module's ``__getattr__`` (PEP 562): from the selected backend
(``LAZYOPS_BACKEND``), else from the platform default, else from the torch reference, else it raises
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

from lazyops._errors import BackendError, ConfigError, KernelInputError, KernelUnavailableError, LazyopsError
from lazyops._errors import hide_in_pytest_tracebacks as __tracebackhide__  # noqa: F401  (read by pytest)

TYPE_CHECKING = False  # typing's own constant would cost importing typing
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from lazyops._config import Settings
    from lazyops._namespace import Namespace
    from lazyops._resolve import Resolution

__version__ = "0.1.0"
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
    return state


def __getattr__(name: str) -> "Any":
    if name.startswith("_"):
        raise AttributeError(f"module 'lazyops' has no attribute {name!r}", name=name, obj=None)
    return _state().attribute(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_state().kernel_names()))


def configure(backend: "Any" = _UNSET, fallback: "Any" = _UNSET, strict: "Any" = _UNSET) -> "Settings":
    """Set the backend chain, the fallback list or strict mode from code, as the environment variables do.

    ``backend`` is a name, a comma list or a list or tuple of names (a priority chain), or ``None`` for the
    platform default; ``fallback`` the kernel names that must come from the platform default; ``strict`` forbids
    every fallback. Arguments left out keep their current values. The whole configuration is validated at once
    (``ConfigError``, nothing changed, if it is wrong), and every resolved kernel is dropped, so the next access
    resolves afresh. Returns the settings now in force.
    """
    given = {
        key: value
        for key, value in (("backend", backend), ("fallback", fallback), ("strict", strict))
        if value is not _UNSET
    }
    return _state().configure(**given)


def resolve_all() -> tuple[str, ...]:
    """Resolve every known kernel now (as ``EAGER_IMPORT=1`` does); returns the names that could not be resolved.

    A kernel the configuration has no source for (``KernelUnavailableError``, e.g. in strict mode) is returned,
    not raised; any other error (``ConfigError``, ``BackendError``) raises as the access would. When the tuple is
    empty, every kernel sits in this module's dict and the module's ``__getattr__`` is removed, so reading
    ``lazyops.<kernel>`` is as fast as any module attribute (CPython does not specialise attribute reads on a
    module with a ``__getattr__``). The one visible difference until the next ``configure()`` (which puts the hook
    back): a misspelt name gets Python's plain ``AttributeError``, without lazyops' did-you-mean.
    """
    return _state().resolve_all()


def which(name: str) -> "Resolution":
    """Where ``name`` resolves now and why (``.backend``, ``.reason``), without importing or calling anything.

    ``.reason`` is ``"selected"`` (from the chain), ``"fallback-list"`` (forced to the platform default by
    ``LAZYOPS_FALLBACK``) or ``"inherited"`` (the chain lacks it). Raises as the access would.
    """
    return _state().which(name)


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


from lazyops._alias import BackendAliasFinder as _BackendAliasFinder  # noqa: E402

# One finder per package, also after a reload (which runs this file again in the same module).
_sys.meta_path[:] = [f for f in _sys.meta_path if not (isinstance(f, _BackendAliasFinder) and f.package == __name__)]
_sys.meta_path.append(_BackendAliasFinder(__name__, _is_backend, _load_backend))

if _os.environ.get("EAGER_IMPORT", "") not in ("", "0"):
    from lazyops._eager import resolve_at_import as _resolve_at_import

    _resolve_at_import(_state())
