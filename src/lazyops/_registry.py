"""Discovery: the built-in backends, then third-party ones from the ``lazyops.backends`` entry-point group.

An entry point is ``name = "package.module"``; the name is what ``LAZYOPS_BACKEND`` selects. Only registered
names can be selected, never arbitrary module paths: an environment variable must not be a way to import any
module at all. Two distributions claiming one name (or a third party claiming a built-in's) is an error naming
both, since silently preferring one would make the running code depend on install order.
"""

from __future__ import annotations

import re
from typing import Iterable

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

    __slots__ = ("name", "value", "distribution")

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


class Registry:
    """The known backends, in order: built-ins first, then third-party ones sorted by name."""

    def __init__(self, backends: Iterable[Backend]) -> None:
        self._backends: dict[str, Backend] = {}
        for backend in backends:
            self._backends[backend.name] = backend

    @classmethod
    def discover(cls, entry_points: Iterable[EntryPointSpec] | None = None) -> Registry:
        specs = installed_entry_points() if entry_points is None else list(entry_points)
        found = {name: Backend(name, module, "built-in", hint) for name, module, hint in BUILTINS}
        for spec in sorted(specs, key=lambda s: (s.name, s.distribution)):
            where = f"entry point {spec.name!r} = {spec.value!r} of {spec.distribution}"
            if not _NAME.match(spec.name):
                raise BackendError(
                    f"{where}: a backend name must be lowercase letters, digits and '_' (it is written in "
                    "LAZYOPS_BACKEND's comma list); ask its authors to rename it",
                    backend=spec.name,
                )
            if not _MODULE.match(spec.value):
                raise BackendError(
                    f"{where}: the value must be a module path like 'package.module' (no ':attribute')",
                    backend=spec.name,
                )
            if spec.name in found:
                other = found[spec.name].origin
                raise BackendError(
                    f"backend name {spec.name!r} is claimed twice: by {other} and by {spec.distribution} "
                    f"({spec.value}); uninstall one of them",
                    backend=spec.name,
                )
            found[spec.name] = Backend(spec.name, spec.value, spec.distribution, f"reinstall {spec.distribution}")
        return cls(found.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._backends)

    def __getitem__(self, name: str) -> Backend:
        return self._backends[name]

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def __iter__(self):
        return iter(self._backends.values())
