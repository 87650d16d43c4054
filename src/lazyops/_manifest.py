"""A backend's kernel list, read from the stub beside its ``__init__`` without importing anything.

The stub is ``__init__.pyi`` made of ``from .module import name as name`` lines: the form
``lazy_loader.attach_stub`` reads at run time and type checkers read statically, so one file serves both. Reading
it here (rather than through ``attach_stub``) keeps, for each kernel, the submodule it lives in, so that the first
access imports exactly that module, and lets a name exported twice be reported with both places.
"""

from __future__ import annotations

import ast
import os


class ManifestError(Exception):
    """A stub that cannot serve as a manifest; the caller turns it into a ``BackendError`` naming the backend."""


def read_manifest(stub_path: str) -> dict[str, tuple[str, str]]:
    """``{kernel name: (submodule, attribute)}`` for every ``*_tl`` name the stub exports."""
    with open(stub_path, encoding="utf-8") as stub:
        tree = ast.parse(stub.read(), filename=stub_path)
    exports: dict[str, tuple[str, str]] = {}
    first_seen: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level != 1 or not node.module:
            raise ManifestError(
                f"{stub_path}, line {node.lineno}: only 'from .module import name as name' lines declare kernels"
            )
        for alias in node.names:
            exported = alias.asname or alias.name
            if not exported.endswith("_tl") or exported.startswith("_"):
                continue
            if exported in exports:
                raise ManifestError(
                    f"{stub_path} exports {exported!r} twice: from .{exports[exported][0]} (line "
                    f"{first_seen[exported]}) and from .{node.module} (line {node.lineno}); keep one"
                )
            exports[exported] = (node.module, alias.name)
            first_seen[exported] = node.lineno
    return exports


def stub_beside(init_path: str | None) -> str | None:
    """The ``__init__.pyi`` next to a package's ``__init__.py``, if the package has one."""
    if not init_path or os.path.basename(init_path) != "__init__.py":
        return None
    stub = os.path.splitext(init_path)[0] + ".pyi"
    return stub if os.path.exists(stub) else None
