"""``import lazyops.<backend>`` gives the backend's own module (the TVM-style public alias).

A finder appended to ``sys.meta_path`` answers only for ``lazyops.<name>`` where ``<name>`` is a registered
backend and no real submodule of that name exists (the path finder, which runs first, finds real ones). The
alias is the backend module itself, loaded through the registry, so ``register_backend()`` runs and rolls back as
for any other load.

Where the loading happens matters. The import system calls ``find_spec`` with its global lock held, so every
other thread's import waits until it returns: ``find_spec`` only looks the name up in the registry and never runs
the backend's code. ``create_module`` runs under the lock of ``lazyops.<name>`` alone, which is where the backend
is loaded: an unrelated import elsewhere goes on, and a backend whose import uses a helper thread does not stall.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any


class BackendAliasFinder:
    """A meta-path finder and loader in one (duck-typed: ``importlib.abc`` alone costs 25 ms to import)."""

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
