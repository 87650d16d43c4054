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

import re
from collections.abc import Iterable, Iterator
from typing import NoReturn

from lazyops._backend import Backend
from lazyops._errors import BackendError

ENTRY_POINT_GROUP = "lazyops.backends"

#: (name, module, how to install what it needs); the reference comes first.
BUILTINS = (
    ("torch", "lazyops._backends.torch", "install it with: pip install torch"),
    ("triton", "lazyops._backends.triton", "install it with: pip install 'lazyops[triton]'"),
    ("tilelang", "lazyops._backends.tilelang", "install it with: pip install 'lazyops[tilelang]'"),
)

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class EntryPointSpec:
    """The three facts of one entry point that discovery uses (also how tests describe fake ones)."""

    __slots__ = ("distribution", "name", "value")

    def __init__(self, name: str, value: str, distribution: str) -> None:
        self.name, self.value, self.distribution = name, value, distribution


def installed_entry_points() -> list[EntryPointSpec]:
    from importlib.metadata import entry_points

    specs = []
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        distribution = getattr(entry_point, "dist", None)
        dist_name = getattr(distribution, "name", None) or "an unknown distribution"
        specs.append(EntryPointSpec(entry_point.name, entry_point.value, dist_name))
    return specs


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
        self._backends: dict[str, Backend | RefusedBackend] = {}
        for backend in backends:
            self._backends[backend.name] = backend
        #: every refused entry point, including those whose name stays with a built-in
        self.refused: tuple[RefusedBackend, ...] = tuple(refused)

    @classmethod
    def discover(cls, entry_points: Iterable[EntryPointSpec] | None = None) -> Registry:
        specs = installed_entry_points() if entry_points is None else list(entry_points)
        found: dict[str, Backend | RefusedBackend] = {
            name: Backend(name, module, "built-in", hint) for name, module, hint in BUILTINS
        }
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
    if not _NAME.match(spec.name):
        problem = (
            "a backend name must be lowercase letters, digits and '_' (it is written in LAZYOPS_BACKEND's comma "
            "list); ask its authors to rename it"
        )
    elif not _MODULE.match(spec.value):
        problem = "the value must be a module path like 'package.module' (no ':attribute'); ask its authors to fix it"
    else:
        problem = None
    if problem:
        return RefusedBackend(name, spec.distribution, f"{where} is refused: {problem}")
    return Backend(spec.name, spec.value, spec.distribution, f"reinstall {spec.distribution}")
