"""``import lazyops.<backend>`` gives the backend's own module (the TVM-style public alias).

A finder appended to ``sys.meta_path`` answers only for ``lazyops.<name>`` where ``<name>`` is a registered
backend and no real submodule of that name exists (the path finder, which runs first, finds real ones). The
alias is the backend module itself, loaded through the registry, so ``register_backend()`` runs and rolls back as
for any other load.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from types import ModuleType
    from typing import Any, Callable


class BackendAliasFinder:
    """A meta-path finder and loader in one (duck-typed: ``importlib.abc`` alone costs 25 ms to import)."""

    def __init__(self, package: str, load_backend: "Callable[[str], ModuleType | None]") -> None:
        self._prefix = package + "."
        self._load_backend = load_backend

    def find_spec(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "importlib.machinery.ModuleSpec | None":
        if not fullname.startswith(self._prefix):
            return None
        name = fullname[len(self._prefix):]
        if "." in name or name.startswith("_"):
            return None
        module = self._load_backend(name)
        if module is None:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self, origin=getattr(module, "__file__", None))  # type: ignore[arg-type]

    def create_module(self, spec: "importlib.machinery.ModuleSpec") -> "ModuleType":
        module = self._load_backend(spec.name[len(self._prefix):])
        assert module is not None  # find_spec just loaded it
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: "ModuleType") -> None:
        # Nothing to run: the registry executed the backend module. The import system has just replaced its
        # __spec__ with the alias's; put the real one back so the module keeps its identity (reload, pickling).
        module.__spec__ = self._own_spec
