"""The internal API of lazyops' own tools: the command line, the pytest plugin, the conformance kit.

Private (not part of ``lazyops``' public surface, not in its stub) but stable: these tools need more than the
public functions (a backend's module, whether it can run here, settings for the length of a block), and
reaching into the namespace object for it would tie every tool to how the namespace is built. Everything here is
a thin, named question to that object.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import lazyops  # noqa: F401  (the package is initialised before its namespace is asked for)
from lazyops._errors import ConfigError
from lazyops._namespace import Namespace
from lazyops._registry import Backend, RefusedBackend
from lazyops._resolve import Resolution, resolve, validate
from lazyops._settings import Settings
from lazyops._sources import Sources, build_sources


def _namespace() -> Namespace:
    # Through the module object: the stub type checkers read for lazyops does not publish _state, on purpose.
    package: Any = sys.modules["lazyops"]
    return package._state()  # type: ignore[no-any-return]


def sources() -> Sources:
    """Where each kernel comes from under the settings in force (names and stubs only; nothing imported)."""
    namespace = _namespace()
    universe = namespace.universe()
    settings = namespace.settings()
    refused = tuple(r.reason for r in universe.registry.refused)
    return build_sources(settings, universe, refused=refused)


def settings() -> Settings:
    """The settings in force (read and validated on first need; raises ``ConfigError`` if they are wrong)."""
    return _namespace().settings()


def default_backend() -> str:
    """The platform default: ``tilelang`` or ``triton`` with a CUDA device, else ``torch`` (probed once)."""
    return _namespace().universe().default


def check(settings: Settings) -> None:
    """Raise the ``ConfigError`` that ``settings`` would raise against the installed backends, if any.

    For ``lazyops doctor``, which checks the backend names alone when another variable is already malformed (the
    settings in force stop at the first mistake).
    """
    validate(settings, _namespace().universe())


def backend(name: str) -> Backend | RefusedBackend:
    """Backend ``name``'s registry entry (``ConfigError`` if none): its ``origin``, and its hooks asked directly.

    For ``lazyops doctor``, which reports what the other functions here fold together: a broken hook apart from a
    backend that cannot run, the hook's own reason, where the backend was registered from.
    """
    registry = _namespace().universe().registry
    if name not in registry:
        raise ConfigError(
            f"no backend named {name!r} is registered; known backends: {', '.join(registry.names)} (third-party "
            "ones register through the 'lazyops.backends' entry-point group)"
        )
    return registry[name]


def backend_origins() -> dict[str, str]:
    """Each registered backend's origin (``"built-in"``, or its distribution): what a plan is locked to."""
    return _namespace().universe().registry.origins()


def backend_module(name: str) -> ModuleType:
    """The backend's package, loaded (``register_backend()`` run) if it was not; ``BackendError`` if it cannot."""
    return backend(name).load()


def exports(name: str) -> frozenset[str]:
    """The kernel names backend ``name`` exports (from its stub; ``BackendError`` if it cannot be read)."""
    return backend(name).exports()


def kernel_factory(name: str, kernel: str) -> Any:
    """Backend ``name``'s own factory for ``kernel``, bypassing the settings (no wrapper, nothing stored)."""
    return backend(name).kernel(kernel)


def unavailable_reason(name: str) -> str | None:
    """``None`` when backend ``name`` can serve kernels here, else why not (loads its package, no kernel module)."""
    backend(name)
    return _namespace().unavailable_reason(name)


def backend_statuses() -> dict[str, str | None]:
    """``unavailable_reason`` of every registered backend, in registry order."""
    return {name: _namespace().unavailable_reason(name) for name in _namespace().backend_names()}


def default_device(name: str) -> str:
    """Where backend ``name``'s kernels take tensors by default: its ``default_device()`` hook, else ``"cpu"``."""
    return backend(name).default_device()


def resolve_alone(kernel: str, backend: str) -> Resolution:
    """Where ``kernel`` would resolve with ``backend`` selected alone and strict (the ``lazyops_backend`` fixture's
    configuration): raises ``KernelUnavailableError`` if the backend lacks it, without changing anything."""
    return resolve(kernel, Settings(chain=(backend,), strict=True), _namespace().universe())


@contextlib.contextmanager
def configured(**overrides: Any) -> Iterator[Settings]:
    """``lazyops.configure(**overrides)`` for a ``with`` block, then the settings before it back."""
    with _namespace().configured(**overrides) as settings:
        yield settings


def reset() -> None:
    """Forget ``configure()``'s arguments and every resolution, and rediscover the backends: as just imported."""
    _namespace().reset()


def eager_error() -> BaseException | None:
    """What ``EAGER_IMPORT``'s resolution raised when lazyops was imported for one of its tools (see ``_eager``)."""
    return _namespace().eager_error


__all__ = [
    "Sources",
    "backend",
    "backend_module",
    "backend_statuses",
    "check",
    "configured",
    "default_backend",
    "default_device",
    "eager_error",
    "exports",
    "kernel_factory",
    "reset",
    "resolve_alone",
    "settings",
    "sources",
    "unavailable_reason",
]
