"""A backend's kernel list, read from the stub beside its ``__init__`` without importing anything.

The stub is ``__init__.pyi`` made of ``from .module import name as name`` lines: the form
``lazy_loader.attach_stub`` reads at run time and type checkers read statically, so one file serves both. Reading
it here (rather than through ``attach_stub``) keeps, for each kernel, the submodule it lives in, so that the first
access imports exactly that module, and lets a name exported twice be reported with both places.

Two readers, one answer. A stub of plain lines (imports one a line, one-line ``def name() -> annotation: ...``
declarations of the package's own hooks, comments, blank lines: every stub the built-in backends, ``lazyops
stubs`` and the tests write) is read by one regular expression, at C speed and without importing ``ast``; about
three times faster than ``ast.parse`` at 10,000 kernels. Anything else (a docstring, parentheses, several names a
line, a name exported twice, a keyword used as a name, non-ASCII) goes to ``ast``, which gives the same mapping for
what both accept and the errors with their line numbers for the rest.
"""

from __future__ import annotations

import keyword  # collections imports it: usually loaded already
import os
import re
from itertools import chain

# One line of a plain stub: an import (groups: module, name, alias), a one-line ``def name() -> annotation: ...``
# (groups: name, annotation; stubs declare the package's own hooks so), a comment, or blank.
_NAME = r"[A-Za-z_]\w*"
_DOTTED = rf"{_NAME}(?:\.{_NAME})*"
_LINE = re.compile(
    rf"^(?:from \.({_DOTTED}) import ({_NAME})(?: as ({_NAME}))?"
    rf"|def ({_NAME})\(\) -> ({_DOTTED}(?: \| {_DOTTED})*): \.\.\.)?[ \t]*(?:#.*)?$",
    re.ASCII | re.MULTILINE,
)
# Python's keywords (soft ones such as match and type are valid names): a stub using one as a name is a syntax
# error, which the ast reader reports with its line. None, True and False may stand in an annotation, though.
_CONSTANTS = frozenset({"None", "True", "False"})
_KEYWORDS = frozenset(keyword.kwlist) - _CONSTANTS


class ManifestError(Exception):
    """A stub that cannot serve as a manifest; the caller turns it into a ``BackendError`` naming the backend."""


def read_manifest(stub_path: str) -> dict[str, tuple[str, str]]:
    """``{kernel name: (submodule, attribute)}`` for every ``*_tl`` name the stub exports."""
    with open(stub_path, encoding="utf-8") as stub:
        text = stub.read()
    exports = _read_simple(text)
    return exports if exports is not None else _read_with_ast(stub_path, text)


def _read_simple(text: str) -> dict[str, tuple[str, str]] | None:
    """The manifest of a stub of plain lines, or ``None`` when the stub needs the full parser.

    Written for stubs of thousands of kernels: one regex pass, one dict comprehension, and every other check on
    whole collections at C speed (a Python loop per line would cost as much again).
    """
    lines = _LINE.findall(text)
    if len(lines) != text.count("\n") + 1:
        return None  # some line is not a plain import, def, blank or comment: the full parser decides
    words = set(chain.from_iterable(lines))
    joined = "\n".join(words)
    if "." in joined or " " in joined:  # dotted modules, annotations "a | b": their parts are words too
        words.update(joined.replace(" | ", "\n").replace(".", "\n").split("\n"))
    if not _KEYWORDS.isdisjoint(words) or (not _CONSTANTS.isdisjoint(words) and _misplaced_constant(lines)):
        return None  # a syntax error: the full parser says where
    exports = {alias or name: (module, name) for module, name, alias, _, _ in lines if module}
    names = "\n" + "\n".join(exports) + "\n"
    if names.count("_tl\n") != len(exports) or "\n_" in names:  # not all kernels: keep the *_tl ones
        exports = {name: where for name, where in exports.items() if name.endswith("_tl") and not name.startswith("_")}
    imports = text.count("\nfrom ") + text.startswith("from ")  # every such line is an import, once validated
    if len(exports) != imports and _exported_twice(lines):
        return None  # a name exported twice: the full parser reports both lines
    return exports


def _misplaced_constant(lines: list[tuple[str, str, str, str, str]]) -> bool:
    """Whether None, True or False stands anywhere but as a whole atom of an annotation (``-> str | None``)."""
    for module, name, alias, function, annotation in lines:
        atoms = [*module.split("."), name, alias, function]
        atoms += [part for atom in annotation.split(" | ") for part in atom.split(".")[1:]]
        if not _CONSTANTS.isdisjoint(atoms):
            return True
    return False


def _exported_twice(lines: list[tuple[str, str, str, str, str]]) -> bool:
    kernels = [alias or name for module, name, alias, _, _ in lines if module]
    kernels = [name for name in kernels if name.endswith("_tl") and not name.startswith("_")]
    return len(set(kernels)) != len(kernels)


def _read_with_ast(stub_path: str, text: str) -> dict[str, tuple[str, str]]:
    import ast

    tree = ast.parse(text, filename=stub_path)
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
