"""One backend: its kernel list, its module, its kernels; loaded once, rolled back if loading fails.

What a backend package may provide, beside its kernels:

- ``__init__.pyi``: the manifest (see ``_manifest``); without it the package is imported to list its public
  ``*_tl`` names.
- ``register_backend()``: run once, right after the package is first imported. If it raises, the load is rolled
  back: the package's modules leave ``sys.modules`` and the next access tries again, so nothing half-registered
  stays behind.
- ``unavailable_reason()``: ``None`` when the backend can run on this machine, else why not and the way out. It
  is asked when a kernel is resolved from the backend, so that a user learns it then, with the cure, instead of
  from a driver error at the first launch.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

from lazyops._errors import BackendError
from lazyops._manifest import ManifestError, read_manifest, stub_beside


class Backend:
    """A registered backend, loaded on demand; every method is idempotent and thread-safe."""

    def __init__(self, name: str, module: str, origin: str, install_hint: str) -> None:
        self.name = name
        self.module_name = module
        self.origin = origin  # "built-in", or the distribution that registered it
        self.install_hint = install_hint
        self._lock = threading.RLock()
        self._manifest: dict[str, tuple[str | None, str]] | None = None
        self._module: ModuleType | None = None

    def __repr__(self) -> str:
        return f"<lazyops backend {self.name!r}: {self.module_name} ({self.origin})>"

    # -- the kernel list ---------------------------------------------------------------------------------------
    def exports(self) -> frozenset[str]:
        return frozenset(self.manifest())

    def manifest(self) -> dict[str, tuple[str | None, str]]:
        """``{kernel: (submodule or None, attribute)}``; reads the stub, or imports a package that has none."""
        with self._lock:
            if self._manifest is None:
                stub = stub_beside(self._find_spec().origin)
                if stub is not None:
                    try:
                        self._manifest = dict(read_manifest(stub))
                    except (ManifestError, SyntaxError, OSError) as error:
                        raise BackendError(
                            f"backend {self.name!r} has an unusable kernel list: {error}", backend=self.name
                        ) from error
                else:
                    module = self.load()
                    names = (name for name in dir(module) if name.endswith("_tl") and not name.startswith("_"))
                    self._manifest = {name: (None, name) for name in sorted(names)}
            return self._manifest

    def _find_spec(self) -> importlib.machinery.ModuleSpec:
        try:
            spec = importlib.util.find_spec(self.module_name)
        except ModuleNotFoundError as error:
            raise self._import_error(error) from error
        except Exception as error:  # a parent package that fails to import
            raise self._import_error(error) from error
        if spec is None:
            raise BackendError(
                f"backend {self.name!r} ({self.origin}) points at module {self.module_name!r}, which is not "
                f"installed; {self.install_hint}",
                backend=self.name,
                missing=True,
            )
        return spec

    # -- loading -----------------------------------------------------------------------------------------------
    def load(self) -> ModuleType:
        """Import the backend package and run its ``register_backend()`` once; roll back if either fails."""
        with self._lock:
            if self._module is not None:
                return self._module
            try:
                module = importlib.import_module(self.module_name)
                hook = getattr(module, "register_backend", None)
                if callable(hook):
                    hook()
            except BaseException as error:
                self._roll_back()
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                raise self._import_error(error) from error
            self._module = module
            return module

    @property
    def loaded(self) -> bool:
        return self._module is not None

    def _roll_back(self) -> None:
        prefix = self.module_name + "."
        for name in [n for n in sys.modules if n == self.module_name or n.startswith(prefix)]:
            del sys.modules[name]
        parent, _, child = self.module_name.rpartition(".")
        if parent and parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
            try:
                delattr(sys.modules[parent], child)
            except AttributeError:
                pass

    def unavailable_reason(self) -> str | None:
        check = getattr(self.load(), "unavailable_reason", None)
        return check() if callable(check) else None

    def kernel(self, kernel: str) -> Any:
        """The backend's own factory object for ``kernel``; raises ``BackendError`` if it cannot run here."""
        submodule, attribute = self.manifest()[kernel]
        module = self.load()
        reason = self.unavailable_reason()
        if reason:
            raise BackendError(f"backend {self.name!r} cannot run here: {reason}", backend=self.name)
        if submodule is not None:
            qualified = f"{self.module_name}.{submodule}"
            try:
                module = importlib.import_module(qualified)
            except Exception as error:
                raise self._import_error(error, what=f"its module {qualified!r} for {kernel!r}") from error
        try:
            return getattr(module, attribute)
        except AttributeError:
            raise BackendError(
                f"backend {self.name!r} declares {kernel!r} in its stub, but {module.__name__!r} has no "
                f"{attribute!r}; fix the stub or the module",
                backend=self.name,
            ) from None

    def _import_error(self, error: BaseException, what: str | None = None) -> BackendError:
        what = what or f"module {self.module_name!r}"
        if isinstance(error, BackendError):
            return error
        if isinstance(error, ModuleNotFoundError) and error.name:
            own = error.name == self.module_name or self.module_name.startswith(error.name + ".")
            if own:
                message = f"backend {self.name!r} ({self.origin}): {what} is not installed; {self.install_hint}"
            else:
                message = (
                    f"backend {self.name!r} needs the package {error.name.partition('.')[0]!r}, which is not "
                    f"installed; {self.install_hint}"
                )
            return BackendError(message, backend=self.name, missing=True)
        return BackendError(
            f"importing backend {self.name!r} ({what}) failed: {type(error).__name__}: {error}; "
            "the chained traceback shows where. Fix it, or select another backend (LAZYOPS_BACKEND)",
            backend=self.name,
        )
