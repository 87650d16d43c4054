"""Discovery: the built-in backends, then third-party ones from the ``lazyops.backends`` entry-point group.

An entry point is ``name = "package.module"``; the name is what ``LAZYOPS_BACKEND`` selects. Only registered
names can be selected, never arbitrary module paths: an environment variable must not be a way to import any
module at all.

A bad entry point (a malformed name or value, a name two distributions claim, a third party claiming a built-in's
name) is refused, not fatal: one broken plugin must not take down every kernel of every other backend. A refused
name stays known, and using it raises the ``BackendError`` that says why (two claimants are both refused, since
preferring one would make the running code depend on install order); a claim on a built-in's name leaves the
built-in in place. ``Registry.refused`` lists every refusal, for ``lazyops list``.
"""

from __future__ import annotations

import os
import sys

from lazyops._backend import Backend
from lazyops._errors import BackendError

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import NoReturn

ENTRY_POINT_GROUP = "lazyops.backends"

#: (name, module, how to install what it needs); the reference comes first.
BUILTINS = (
    ("torch", "lazyops._backends.torch", "install it with: pip install torch"),
    ("triton", "lazyops._backends.triton", "install it with: pip install 'lazyops[triton]'"),
    ("tilelang", "lazyops._backends.tilelang", "install it with: pip install 'lazyops[tilelang]'"),
)

# The characters of a backend name (it is written in LAZYOPS_BACKEND's comma list): lowercase ASCII letters first.
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _is_backend_name(name: str) -> bool:
    return "a" <= name[:1] <= "z" and set(name) <= _NAME_CHARACTERS


def _is_module_path(value: str) -> bool:
    """``package.module``: dotted ASCII identifiers (checked without ``re``: compiling two patterns cost more than
    the rest of a first access)."""
    return all(part.isascii() and part.isidentifier() for part in value.split("."))


class EntryPointSpec:
    """The three facts of one entry point that discovery uses (also how tests describe fake ones)."""

    __slots__ = ("distribution", "name", "value")

    def __init__(self, name: str, value: str, distribution: str) -> None:
        self.name, self.value, self.distribution = name, value, distribution


def installed_entry_points() -> list[EntryPointSpec]:
    """The ``lazyops.backends`` entry points of the installed distributions, as ``importlib.metadata`` lists them.

    ``importlib.metadata`` costs tens of milliseconds to import and then reads every installed distribution's
    entry points, on the first access of a kernel. Where ``sys.path`` holds only directories and no finder besides
    the standard one knows distributions (the usual case), the same answer is read here directly: the
    ``*.dist-info`` and ``*.egg-info`` directories of each ``sys.path`` entry, in ``importlib.metadata``'s order and
    with its rule that the first distribution of a name hides the others, and of those only the
    ``entry_points.txt`` files that mention the group are parsed. Anything else goes to ``importlib.metadata``.
    """
    specs = _entry_points_from_directories()
    return specs if specs is not None else _entry_points_from_metadata()


def _entry_points_from_metadata() -> list[EntryPointSpec]:
    from importlib.metadata import entry_points

    specs = []
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        distribution = getattr(entry_point, "dist", None)
        dist_name = getattr(distribution, "name", None) or "an unknown distribution"
        specs.append(EntryPointSpec(entry_point.name, entry_point.value, dist_name))
    return specs


class _Unusual(Exception):
    """Something the direct reader does not mirror exactly: ask ``importlib.metadata`` instead."""


def _entry_points_from_directories() -> list[EntryPointSpec] | None:
    """The direct reader, through the on-disk cache (``_cache``): a hit costs a ``stat`` per ``sys.path`` entry.

    The record's key is ``sys.path`` (and the working directory, for an empty entry) with each entry's
    ``st_mtime_ns``: installing or removing a distribution adds or removes a ``.dist-info`` directory, which
    changes its parent's timestamp. The record also keeps the ``stat`` of each ``entry_points.txt`` that
    registered a backend, checked on every hit, so an edit of one of those is seen too. Not seen: an
    ``entry_points.txt`` of a distribution that registered nothing, edited in place to add the group (installers
    write a new ``.dist-info`` instead); reinstall it, or delete the cache.
    """
    # importlib.machinery's PathFinder is the bootstrap's own, loaded at startup; the public module costs an import.
    bootstrap = sys.modules.get("_frozen_importlib_external")
    PathFinder = getattr(bootstrap, "PathFinder", None)
    if PathFinder is None:
        from importlib.machinery import PathFinder

    if any(hasattr(finder, "find_distributions") and finder is not PathFinder for finder in sys.meta_path):
        return None  # another finder knows distributions (a zip importer, a custom one): only it can list them
    key = _path_key()
    if key is not None:
        from lazyops import _cache

        record = _cache.file_name("entry-points", sys.prefix)
        cached = _cache.load(record, key)
        if cached is not None and all(_stat_of(path) == (mtime, size) for path, mtime, size in cached[0]):
            return [EntryPointSpec(*triple) for triple in cached[1]]
    try:
        specs: list[EntryPointSpec] = []
        sources = []
        for dist_path in _distributions():
            path = os.path.join(dist_path, "entry_points.txt")
            text = _read_text(path)
            if text is None or ENTRY_POINT_GROUP not in text:
                continue
            pairs = _group_pairs(text)
            if pairs:
                name = _distribution_name(dist_path) or "an unknown distribution"
                specs.extend(EntryPointSpec(ep_name, value, name) for ep_name, value in pairs)
                sources.append((path, *_stat_of(path)))
    except _Unusual:
        return None
    if key is not None:
        newest = max([mtime for _, mtime in key[2]] + [mtime for _, mtime, _ in sources], default=0)
        value = (tuple(sources), tuple((spec.name, spec.value, spec.distribution) for spec in specs))
        _cache.store(record, key, value, newest)
    return specs


def _path_key() -> tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...]] | None:
    """What the distributions on ``sys.path`` are read from, as the entry-point record's key (``None``: no key)."""
    entries = tuple(sys.path)
    if not all(isinstance(entry, str) for entry in entries):
        return None
    cwd = os.getcwd() if "" in entries else None
    return (entries, cwd, tuple((entry, _stat_of(entry or ".")[0]) for entry in entries))


def _stat_of(path: str) -> tuple[int, int]:
    """``(st_mtime_ns, st_size)``, or ``(-1, -1)`` for a path that is not there."""
    try:
        facts = os.stat(path)
    except OSError:
        return (-1, -1)
    return (facts.st_mtime_ns, facts.st_size)


def _distributions() -> list[str]:
    """Every distribution's metadata directory, first of each normalised name only (``importlib.metadata``'s
    ``_unique(distributions())``)."""
    seen: set[str] = set()
    found = []
    for entry in sys.path:
        if not isinstance(entry, str) or os.path.basename(entry).lower().endswith(".egg"):
            raise _Unusual
        try:
            children = os.listdir(entry or ".")
        except (FileNotFoundError, PermissionError):
            continue
        except OSError as error:  # a file (a zip?) or worse
            raise _Unusual from error
        by_name: dict[str, list[str]] = {}  # grouped by name in order of first appearance, as importlib's Lookup
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                by_name.setdefault(_normalize(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        for name, children_of_name in by_name.items():
            for child in children_of_name:
                if name not in seen:  # a distribution's name is the one its directory's name gives
                    seen.add(name)
                    found.append(os.path.join(entry, child))
    return found


def _normalize(name: str) -> str:
    """PEP 503 normalisation with underscores (``importlib.metadata.Prepared.normalize``), without ``re``."""
    for separator in "-.":
        name = name.replace(separator, "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name.lower()


def _read_text(path: str) -> str | None:
    """The file's text, ``None`` where ``importlib.metadata`` finds none (read as bytes: a text wrapper per file,
    for files most of which never mention the group, was a third of the time)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None
    except OSError as error:
        raise _Unusual from error
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Unusual from error


def _group_pairs(text: str) -> list[tuple[str, str]]:
    """``(name, value)`` of each entry point of the group, parsed as ``importlib.metadata.Sectioned`` does."""
    pairs = []
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == ENTRY_POINT_GROUP:
            name, equals, value = line.partition("=")
            if not equals:
                raise _Unusual  # importlib.metadata fails on it: let it
            pairs.append((name.strip(), value.strip()))
    return pairs


def _distribution_name(dist_path: str) -> str | None:
    """The ``Name`` field of the distribution's metadata (``Distribution.name``)."""
    text = _read_text(os.path.join(dist_path, "METADATA")) or _read_text(os.path.join(dist_path, "PKG-INFO"))
    if not text:
        raise _Unusual  # an egg-info file, or no metadata: importlib.metadata knows what to say
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.strip():
            return None  # the end of the headers
        key, colon, value = line.partition(":")
        if colon and key.lower() == "name":
            if index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t"):
                raise _Unusual  # a folded header
            return value.lstrip(" \t")
    return None


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

    def kernel_list(self) -> NoReturn:
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
    """The known backends, in order: built-ins first, then third-party ones sorted by name.

    ``Registry.discover()`` reads the installed entry points only when something needs a backend beyond the
    built-ins: iterating past them, a name that is not a built-in's, every name, or the refusals. A claim on a
    built-in's name never displaces the built-in, so a kernel that the platform default exports resolves without
    reading them. The third-party part is computed without a lock and published once (``dict.setdefault``, atomic):
    two threads computing it at once both use the one published first, so each backend is one object.
    """

    def __init__(
        self,
        backends: Iterable[Backend | RefusedBackend],
        refused: Iterable[RefusedBackend] = (),
        *,
        builtins: Iterable[Backend] = (),
        third_party: Callable[[dict[str, Backend | RefusedBackend]], Registry] | None = None,
    ) -> None:
        self._builtins: dict[str, Backend | RefusedBackend] = {backend.name: backend for backend in builtins}
        self._third_party = third_party
        self._state: dict[str, tuple[dict[str, Backend | RefusedBackend], tuple[RefusedBackend, ...]]] = {}
        if third_party is None:
            everything: dict[str, Backend | RefusedBackend] = {}
            for backend in backends:
                everything[backend.name] = backend
            #: every refused entry point, including those whose name stays with a built-in
            self._state["all"] = (everything, tuple(refused))

    @classmethod
    def discover(cls, entry_points: Iterable[EntryPointSpec] | None = None) -> Registry:
        here = os.path.dirname(os.path.abspath(__file__))
        builtins = [
            Backend(name, module, "built-in", hint, stub=os.path.join(here, "_backends", name, "__init__.pyi"))
            for name, module, hint in BUILTINS
        ]
        if entry_points is None:
            return cls((), builtins=builtins, third_party=lambda found: _registered(installed_entry_points(), found))
        return _registered(list(entry_points), {backend.name: backend for backend in builtins})

    def _all(self) -> tuple[dict[str, Backend | RefusedBackend], tuple[RefusedBackend, ...]]:
        state = self._state.get("all")
        if state is None:
            if self._third_party is None:  # never: it is set whenever "all" is not
                raise RuntimeError("lazyops internal error: the registry has no backends and no way to find them")
            complete = self._third_party(dict(self._builtins))  # reads metadata: no lock held
            state = self._state.setdefault("all", complete._all())
        return state

    @property
    def refused(self) -> tuple[RefusedBackend, ...]:
        """Every refused entry point, including those whose name stays with a built-in."""
        return self._all()[1]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._all()[0])

    def __getitem__(self, name: str) -> Backend | RefusedBackend:
        builtin = self._builtins.get(name)
        return builtin if builtin is not None else self._all()[0][name]

    def __contains__(self, name: object) -> bool:
        return name in self._builtins or name in self._all()[0]

    def __iter__(self) -> Iterator[Backend | RefusedBackend]:
        """The backends in order; the entry points are read only when the iteration goes past the built-ins."""
        yield from self._builtins.values()
        for name, backend in self._all()[0].items():
            if name not in self._builtins:
                yield backend


def _registered(specs: list[EntryPointSpec], found: dict[str, Backend | RefusedBackend]) -> Registry:
    """The registry of the built-ins ``found`` and the entry points ``specs`` (refused ones listed as such)."""
    claims: dict[str, list[EntryPointSpec]] = {}
    for spec in sorted(specs, key=lambda s: (s.name, s.distribution)):
        claims.setdefault(spec.name, []).append(spec)
    refused: list[RefusedBackend] = []
    for name, claimants in claims.items():
        backend = _backend_of(name, claimants, found.get(name))
        if isinstance(backend, RefusedBackend):
            refused.append(backend)
        if name not in found:
            found[name] = backend
    return Registry(found.values(), refused)


def _backend_of(
    name: str, claimants: list[EntryPointSpec], builtin: Backend | RefusedBackend | None
) -> Backend | RefusedBackend:
    """The backend that entry points named ``name`` register, or the refusal saying why they cannot."""
    distributions = " and ".join(spec.distribution for spec in claimants)
    if builtin is not None:
        return RefusedBackend(
            name,
            distributions,
            f"backend name {name!r} is claimed by built-in and by {distributions} "
            f"({', '.join(spec.value for spec in claimants)}); the built-in stays in use. Uninstall "
            f"{distributions}, or ask its authors to rename the entry point",
        )
    if len(claimants) > 1:
        return RefusedBackend(
            name,
            distributions,
            f"backend name {name!r} is claimed twice: by {distributions} "
            f"({', '.join(spec.value for spec in claimants)}); neither is used until one of them is uninstalled",
        )
    (spec,) = claimants
    where = f"entry point {spec.name!r} = {spec.value!r} of {spec.distribution}"
    if not _is_backend_name(spec.name):
        problem = (
            "a backend name must be lowercase letters, digits and '_' (it is written in LAZYOPS_BACKEND's comma "
            "list); ask its authors to rename it"
        )
    elif not _is_module_path(spec.value):
        problem = "the value must be a module path like 'package.module' (no ':attribute'); ask its authors to fix it"
    else:
        problem = None
    if problem:
        return RefusedBackend(name, spec.distribution, f"{where} is refused: {problem}")
    return Backend(spec.name, spec.value, spec.distribution, f"reinstall {spec.distribution}")
