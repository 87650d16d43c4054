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

import os
from collections.abc import Set  # the namespace's settings import collections.abc already

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    import re
    from collections.abc import Iterator

# One line of a plain stub: an import (groups: module, name, alias), a one-line ``def name() -> annotation: ...``
# (groups: name, annotation; stubs declare the package's own hooks so), a comment, or blank. Compiled on the first
# stub actually parsed: with the cache (``read_kernel_list``) most processes parse none.
_NAME = r"[A-Za-z_]\w*"
_DOTTED = rf"{_NAME}(?:\.{_NAME})*"
_LINE_PATTERN = (
    rf"^(?:from \.({_DOTTED}) import ({_NAME})(?: as ({_NAME}))?"
    rf"|def ({_NAME})\(\) -> ({_DOTTED}(?: \| {_DOTTED})*): \.\.\.)?[ \t]*(?:#.*)?$"
)
_line: re.Pattern[str] | None = None
# Python's keywords (soft ones such as match and type are valid names): a stub using one as a name is a syntax
# error, which the ast reader reports with its line. None, True and False may stand in an annotation, though.
_CONSTANTS = frozenset({"None", "True", "False"})


def _line_regex() -> re.Pattern[str]:
    global _line
    if _line is None:
        import re

        _line = re.compile(_LINE_PATTERN, re.ASCII | re.MULTILINE)
    return _line


def _keywords() -> frozenset[str]:
    import keyword  # collections imports it: usually loaded already

    return frozenset(keyword.kwlist) - _CONSTANTS


class ManifestError(Exception):
    """A stub that cannot serve as a manifest; the caller turns it into a ``BackendError`` naming the backend."""


class KernelList(Set[str]):
    """One backend's kernels, answering ``name in kernels`` without a set of them (a set of 10,000 names costs
    about a millisecond to build on a slow machine, more than the whole first access may).

    Held as strings: ``table``, one ``\\nname\\tmodule\\tattribute`` line per kernel sorted by name (module
    empty for a kernel that is an attribute of the package itself); ``names``, the names alone, sorted and
    newline-joined; and a sparse index, the first name and offset of every ``BLOCK``-th line. ``in`` and ``where``
    bisect the index (a few comparisons) and search one block of the table for ``\\nname\\t``, exact because a
    name holds no tab or newline (a probe that does is refused first). ``names()`` and iteration split ``names`` on
    first use.
    """

    BLOCK = 64
    __slots__ = ("_answers", "_count", "_keys", "_names", "_offsets", "_sorted", "_table")

    def __init__(self, names: str, table: str, count: int, keys: tuple[str, ...], offsets: tuple[int, ...]) -> None:
        self._names, self._table, self._count, self._keys, self._offsets = names, table, count, keys, offsets
        self._sorted: tuple[str, ...] | None = None
        self._answers: dict[str, bool] = {}

    @classmethod
    def of(cls, manifest: dict[str, tuple[str | None, str]]) -> KernelList:
        names = sorted(manifest)
        lines = [f"\n{name}\t{manifest[name][0] or ''}\t{manifest[name][1]}" for name in names]
        keys, offsets, offset = [], [], 0
        for index, line in enumerate(lines):
            if index % cls.BLOCK == 0:
                keys.append(names[index])
                offsets.append(offset)
            offset += len(line)
        return cls("\n".join(names), "".join(lines), len(names), tuple(keys), tuple(offsets))

    def record(self) -> tuple[str, str, int, tuple[str, ...], tuple[int, ...]]:
        """What the on-disk cache keeps (``KernelList(*record)`` rebuilds it)."""
        return (self._names, self._table, self._count, self._keys, self._offsets)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        known = self._answers.get(name)
        if known is None:  # kept: one access asks the same list about the same name two or three times
            known = self._answers[name] = self._find(name) >= 0
        return known

    def _find(self, name: str) -> int:
        """Where ``name``'s line starts in the table (at its newline), else -1."""
        if "\t" in name or "\n" in name:
            return -1
        keys = self._keys
        low, high = 0, len(keys)
        while low < high:  # the last block whose first name is not after ``name``
            middle = (low + high) // 2
            if keys[middle] <= name:
                low = middle + 1
            else:
                high = middle
        if low == 0:
            return -1
        end = self._offsets[low] if low < len(keys) else len(self._table)
        return self._table.find(f"\n{name}\t", self._offsets[low - 1], end)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> tuple[str, ...]:
        names = self._sorted
        if names is None:
            names = self._sorted = tuple(self._names.split("\n")) if self._count else ()
        return names

    def where(self, name: str) -> tuple[str | None, str]:
        """``(submodule or None, attribute)`` of a kernel in the list; ``KeyError`` for any other name."""
        start = self._find(name)
        if start < 0:
            raise KeyError(name)
        end = self._table.find("\n", start + 1)
        _, module, attribute = self._table[start + 1 : end if end >= 0 else None].split("\t")
        return (module or None, attribute)

    def manifest(self) -> dict[str, tuple[str | None, str]]:
        return {name: self.where(name) for name in self.names()}


def read_kernel_list(stub_path: str) -> KernelList:
    """The stub's kernels, from the on-disk cache when the stub is the one recorded (``_cache``), else read and
    validated in full by ``read_manifest`` (and recorded for the next process).

    The record's key is the stub's path, inode, size and ``st_mtime_ns``: any rewrite of the stub changes one of
    them (the cache's racy rule covers a same-size rewrite within one timestamp tick).
    """
    from lazyops import _cache

    facts = os.stat(stub_path)
    key = (stub_path, facts.st_ino, facts.st_size, facts.st_mtime_ns)
    name = _cache.file_name("kernels", stub_path)
    record = _cache.load(name, key)
    if type(record) is tuple and [type(part) for part in record] == [str, str, int, tuple, tuple]:
        return KernelList(*record)
    kernels = KernelList.of(dict(read_manifest(stub_path)))
    _cache.store(name, key, kernels.record(), facts.st_mtime_ns)
    return kernels


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
    from itertools import chain

    lines = _line_regex().findall(text)
    if len(lines) != text.count("\n") + 1:
        return None  # some line is not a plain import, def, blank or comment: the full parser decides
    words = set(chain.from_iterable(lines))
    joined = "\n".join(words)
    if "." in joined or " " in joined:  # dotted modules, annotations "a | b": their parts are words too
        words.update(joined.replace(" | ", "\n").replace(".", "\n").split("\n"))
    if not _keywords().isdisjoint(words) or (not _CONSTANTS.isdisjoint(words) and _misplaced_constant(lines)):
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
