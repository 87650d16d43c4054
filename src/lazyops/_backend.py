"""One backend: its kernel list (its manifest), its module, its kernels; loaded once, rolled back if loading fails.

What a backend package may provide, beside its kernels:

- ``__init__.pyi``: the manifest, its kernel list (below); without it the package is imported to list its public
  ``*_tl`` names.
- ``register_backend()``: run once, right after the package is first imported. If it raises, the load is rolled
  back: the modules this load added leave ``sys.modules`` (modules that were there before stay, even inside the
  package: the program may be using them) and the next access tries again, so nothing half-registered stays.
- ``unavailable_reason()``: ``None`` when the backend can run on this machine, else why not and the way out. It
  is asked when a kernel is resolved from the backend, so that a user learns it then, with the cure, instead of
  from a driver error at the first launch.
- ``default_device()``: where the backend's kernels take tensors by default (``"cuda"``, ``"cpu"``, ...), for
  tools that make inputs for it (the conformance kit, benchmarks); ``"cpu"`` when absent.

A hook that raises or returns the wrong type is the backend's bug, reported as a ``BackendError`` naming the
backend and chained to the original error, never as a raw exception (an ``AttributeError`` escaping from here
would make ``hasattr(lazyops, ...)`` quietly false).

Loading runs the backend's code, so no lazyops lock is held meanwhile (see ``_once``): it may import, start
threads, or call ``lazyops.which()`` without deadlocking against another thread's first access.

The manifest is read without importing anything. The stub is ``__init__.pyi`` made of ``from .module import name as
name`` lines: the form ``lazy_loader.attach_stub`` reads at run time and type checkers read statically, so one file
serves both. Reading it here (rather than through ``attach_stub``) keeps, for each kernel, the submodule it lives in,
so that the first access imports exactly that module, and lets a name exported twice be reported with both places.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys

from lazyops._errors import BackendError
from lazyops._once import Once, OnceCycleError

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any, TypeVar

    T = TypeVar("T")


# -- the manifest: a backend's kernel list, read from its stub ------------------------------------------------------
#: ``{kernel: (submodule, attribute)}``; the submodule is ``None`` for a kernel that is an attribute of the package
Manifest = dict[str, tuple["str | None", str]]


class ManifestError(Exception):
    """A stub that cannot serve as a manifest; the caller turns it into a ``BackendError`` naming the backend."""


def is_kernel_name(name: str) -> bool:
    return name.endswith("_tl") and not name.startswith("_")


def read_manifest(stub_path: str) -> Manifest:
    """``{kernel: (submodule, attribute)}`` for every public ``*_tl`` name the stub exports.

    Raises ``ManifestError`` (or ``SyntaxError``, ``OSError``, ``UnicodeDecodeError``) for a stub that is not one.
    """
    with open(stub_path, encoding="utf-8") as stub:
        tree = ast.parse(stub.read(), filename=stub_path)
    manifest: Manifest = {}
    line_of: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue  # declarations of the package's own hooks (``def unavailable_reason() -> ...``), a docstring
        if node.level != 1 or not node.module:
            raise ManifestError(
                f"{stub_path}, line {node.lineno}: only 'from .module import name as name' lines declare kernels"
            )
        for alias in node.names:
            kernel = alias.asname or alias.name
            if not is_kernel_name(kernel):
                continue
            if kernel in manifest:
                raise ManifestError(
                    f"{stub_path} exports {kernel!r} twice: from .{manifest[kernel][0]} (line {line_of[kernel]}) "
                    f"and from .{node.module} (line {node.lineno}); keep one"
                )
            manifest[kernel] = (node.module, alias.name)
            line_of[kernel] = node.lineno
    return manifest


def stub_beside(init_path: str | None) -> str | None:
    """The ``__init__.pyi`` next to a package's ``__init__.py``, if the package has one."""
    if not init_path or os.path.basename(init_path) != "__init__.py":
        return None
    stub = os.path.splitext(init_path)[0] + ".pyi"
    return stub if os.path.exists(stub) else None


class Backend:
    """A registered backend, loaded on demand; every method is idempotent and thread-safe."""

    def __init__(self, name: str, module: str, origin: str, install_hint: str) -> None:
        self.name = name
        self.module_name = module
        self.origin = origin  # "built-in", or the distribution that registered it
        self.install_hint = install_hint
        self._manifest: Once[Manifest] = Once(f"reading the kernel list of backend {name!r}")
        self._module: Once[ModuleType] = Once(f"loading backend {name!r}")
        self._exports: frozenset[str] | None = None

    def __repr__(self) -> str:
        return f"<lazyops backend {self.name!r}: {self.module_name} ({self.origin})>"

    # -- the kernel list ---------------------------------------------------------------------------------------
    def manifest(self) -> Manifest:
        """``{kernel: (submodule or None, attribute)}``; reads the stub, or imports a package that has none."""
        return self._once(self._manifest, self._read_manifest)

    def exports(self) -> frozenset[str]:
        exports = self._exports
        if exports is None:  # kept: resolution asks for it on every first access
            exports = self._exports = frozenset(self.manifest())
        return exports

    def _read_manifest(self) -> Manifest:
        stub = stub_beside(self._find_spec().origin)
        if stub is None:
            module = self.load()
            return {name: (None, name) for name in dir(module) if is_kernel_name(name)}
        try:
            return read_manifest(stub)
        except (ManifestError, SyntaxError, OSError, UnicodeDecodeError) as error:
            raise BackendError(
                f"backend {self.name!r} has an unusable kernel list: {error}", backend=self.name
            ) from error

    def _find_spec(self) -> importlib.machinery.ModuleSpec:
        try:
            spec = importlib.util.find_spec(self.module_name)
        except Exception as error:  # a parent package that is missing or fails to import
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
        return self._once(self._module, self._import_and_register)

    def _import_and_register(self) -> ModuleType:
        # A dict copy, not a set: with torch imported there are a thousand modules, and a copy costs a third.
        modules_before = sys.modules.copy()
        try:
            module = importlib.import_module(self.module_name)
            hook = getattr(module, "register_backend", None)
            if callable(hook):
                hook()
        except BaseException as error:
            self._roll_back(modules_before)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            raise self._import_error(error) from error
        return module

    @property
    def loaded(self) -> bool:
        return self._module.done

    def _roll_back(self, modules_before: dict[str, Any]) -> None:
        """Remove what this load added to the backend's package: the modules, and the attribute on the parent."""
        prefix = self.module_name + "."
        added = [
            n for n in list(sys.modules) if n not in modules_before and (n == self.module_name or n.startswith(prefix))
        ]
        for name in added:
            sys.modules.pop(name, None)
        parent, _, child = self.module_name.rpartition(".")
        if self.module_name in added and parent in sys.modules:
            try:  # noqa: SIM105 (contextlib.suppress would cost importing contextlib on the first access)
                delattr(sys.modules[parent], child)
            except AttributeError:
                pass

    def _once(self, once: Once[T], compute: Callable[[], T]) -> T:
        try:
            return once.get(compute)
        except OnceCycleError as error:
            raise BackendError(
                f"backend {self.name!r}: {error}. Its import or register_backend() asks for one of its own kernels "
                "(or for a backend whose loading waits for this one); resolve kernels after loading, not during it",
                backend=self.name,
            ) from error

    # -- the optional hooks ------------------------------------------------------------------------------------
    def _call_hook(self, hook_name: str, expected: str) -> Any:
        """Call the package's ``hook_name()`` if it has one (``None`` if not); its failures become BackendError."""
        module = self.load()
        try:
            hook = getattr(module, hook_name, None)
            if not callable(hook):
                return None
            value = hook()
        except Exception as error:
            raise BackendError(
                f"backend {self.name!r}: its {hook_name}() raised {type(error).__name__}: {error}; it must return "
                f"{expected}. Fix the backend ({self.origin}), or select another one (LAZYOPS_BACKEND)",
                backend=self.name,
            ) from error
        return value

    def unavailable_reason(self) -> str | None:
        reason = self._call_hook("unavailable_reason", "None or a string saying why the backend cannot run here")
        if reason is not None and not isinstance(reason, str):
            raise BackendError(
                f"backend {self.name!r}: its unavailable_reason() returned {reason!r}; it must return None or a "
                f"string saying why the backend cannot run here. Fix the backend ({self.origin})",
                backend=self.name,
            )
        return reason or None

    def default_device(self) -> str:
        device = self._call_hook("default_device", "a device name such as 'cuda' or 'cpu'")
        if device is None:
            return "cpu"
        if not isinstance(device, str) or not device:
            raise BackendError(
                f"backend {self.name!r}: its default_device() returned {device!r}; it must return a device name "
                f"such as 'cuda' or 'cpu'. Fix the backend ({self.origin})",
                backend=self.name,
            )
        return device

    # -- kernels -----------------------------------------------------------------------------------------------
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
            missing = error.name
            if missing == self.module_name or self.module_name.startswith(missing + "."):
                message = f"backend {self.name!r} ({self.origin}): {what} is not installed; {self.install_hint}"
                return BackendError(message, backend=self.name, missing=True)
            if missing.startswith(self.module_name + "."):
                # The package is there (it may just have served another kernel); one of its own modules is not.
                return BackendError(
                    f"backend {self.name!r} ({self.origin}) is installed, but its module {missing!r} does not exist "
                    f"(needed for {what}): the installation is incomplete, or the backend's stub names a module "
                    f"that is not there. Reinstall the backend ({self.install_hint}), or fix its stub",
                    backend=self.name,
                )
            return BackendError(
                f"backend {self.name!r} needs the package {missing.partition('.')[0]!r}, which is not installed; "
                f"{self.install_hint}",
                backend=self.name,
                missing=True,
            )
        return BackendError(
            f"importing backend {self.name!r} ({what}) failed: {type(error).__name__}: {error}; "
            "the chained traceback shows where. Fix it, or select another backend (LAZYOPS_BACKEND)",
            backend=self.name,
        )
