"""lazyops: one namespace of compute-kernel factories across backends.

``import lazyops`` imports no backend, no torch and no kernel library. ``lazyops.rmsnorm_tl`` resolves one kernel
factory on first access through this module's ``__getattr__`` (PEP 562): from the selected backend
(``LAZYOPS_BACKEND``), else from the platform default, else from the torch reference, else it raises
``KernelUnavailableError``. The resolved factory is then stored in this module's ``__dict__``, so every later
access is a plain attribute read. ``lazyops.which(name)`` says where a name resolves and why.

Caveats of laziness, by design: type checkers cannot see through ``__getattr__``, so the package ships generated
stubs; and an error in a backend surfaces at first access, not at import, unless ``EAGER_IMPORT=1`` (the
scientific-python SPEC 1 switch) resolves everything at import.
"""

import os as _os
import sys as _sys

from lazyops._errors import BackendError, ConfigError, KernelInputError, KernelUnavailableError, LazyopsError

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
    "which",
]

# Not named after the module _namespace: importing that submodule sets the package attribute of its name.
_state_object = None
_UNSET = object()


def _state():
    """The namespace behind this module, built on first use: its imports are the part worth postponing."""
    global _state_object
    if _state_object is None:
        from lazyops._namespace import Namespace

        _state_object = Namespace(globals())
    return _state_object


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'lazyops' has no attribute {name!r}", name=name, obj=None)
    return _state().attribute(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_state().kernel_names()))


def configure(backend=_UNSET, fallback=_UNSET, strict=_UNSET):
    """Set the backend chain, the fallback list or strict mode from code, as the environment variables do.

    ``backend`` is a name, a comma list or a sequence of names (a priority chain), or ``None`` for the platform
    default; ``fallback`` the kernel names that must come from the platform default; ``strict`` forbids every
    fallback. Arguments left out keep their current values. The whole configuration is validated at once
    (``ConfigError``, nothing changed, if it is wrong), and every resolved kernel is dropped, so the next access
    resolves afresh. Returns the settings now in force.
    """
    given = {key: value for key, value in (("backend", backend), ("fallback", fallback), ("strict", strict)) if value is not _UNSET}
    return _state().configure(**given)


def which(name: str):
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


def _load_backend_module(name: str):
    """For ``import lazyops.<backend>``: the backend's module, or None when ``name`` is no backend."""
    state = _state()
    if name not in state.universe().registry:
        return None
    return state.universe().registry[name].load()


from lazyops._alias import BackendAliasFinder as _BackendAliasFinder  # noqa: E402

_sys.meta_path.append(_BackendAliasFinder(__name__, _load_backend_module))

if _os.environ.get("EAGER_IMPORT", "") not in ("", "0"):
    _state().eager_resolve()
