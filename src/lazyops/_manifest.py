"""A backend's kernel list, read from the stub beside its ``__init__`` without importing anything.

The stub is ``__init__.pyi`` made of ``from .module import name as name`` lines: the form
``lazy_loader.attach_stub`` reads at run time and type checkers read statically, so one file serves both. Reading
it here (rather than through ``attach_stub``) keeps, for each kernel, the submodule it lives in, so that the first
access imports exactly that module, and lets a name exported twice be reported with both places.
"""

from __future__ import annotations

import ast
import os

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
