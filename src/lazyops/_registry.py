"""The backends lazyops knows, one idea in two parts: discovery (``Registry``: the built-ins, then third-party
backends from the ``lazyops.backends`` entry-point group, or a ``RefusedBackend`` saying why a name cannot be one)
and each backend found (``Backend``: its kernel list read from its stub, its module loaded once, its kernels).

**Discovery.** An entry point is ``name = "package.module"``; the name is what ``LAZYOPS_BACKEND`` selects. Only
registered names can be selected, never arbitrary module paths: an environment variable must not be a way to import any
module at all. A bad entry point (a malformed name or value, a name two distributions claim, a third party claiming a
built-in's name, a name lazyops itself uses) is refused, not fatal: one broken plugin must not take down every kernel of
every other backend. A refused name stays known, and using it raises the ``BackendError`` that says why (two claimants
are both refused, since preferring one would make the running code depend on install order); a claim on a built-in's
name leaves the built-in in place. ``Registry.refused`` lists every refusal, for ``lazyops list``.

The entry points are read through ``importlib.metadata`` on every discovery (the first access of a process): about
2 ms for 54 installed distributions with torch imported, which docs/decisions/001-no-disk-cache.md weighs against
keeping a cache.

**One backend**: its kernel list (its manifest), its module, its kernels; loaded once, rolled back if loading fails.
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
    from collections.abc import Callable, Iterable, Iterator
    from importlib.metadata import EntryPoint
    from types import ModuleType
    from typing import Any, NoReturn, TypeVar

    T = TypeVar("T")

ENTRY_POINT_GROUP = "lazyops.backends"

#: (name, module, how to install what it needs); torch, the last resort, comes first.
BUILTINS = (
    ("torch", "lazyops._backends.torch", "install it with: pip install torch"),
    ("triton", "lazyops._backends.triton", "install it with: pip install 'lazyops[triton]'"),
    ("tilelang", "lazyops._backends.tilelang", "install it with: pip install 'lazyops[tilelang]'"),
)

#: One entry point as discovery uses it: (name, value, the distribution that declares it).
EntryPointTriple = tuple[str, str, str]


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
    # a snapshot (taken in one C call): another thread's first access sets attributes on the package meanwhile (its
    # submodules, resolved kernels), and iterating the live dict then raises "dictionary changed size during iteration"
    attributes = tuple(vars(package).items())
    functions = {
        name
        for name, value in attributes
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
