"""Where each kernel comes from, computed once: the one table behind every summary lazyops shows.

The first resolution's summary line, the pytest header and ``lazyops list`` all answer the same question (which
kernels come from the chain, which are inherited or forced elsewhere, which are missing) and must never disagree,
so they format one ``Sources``. Building it reads names and stubs only: no backend is imported for it (asking
whether a backend can run here is a separate, costlier question, ``lazyops._api.backend_statuses``).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from lazyops._errors import BackendError, KernelUnavailableError
from lazyops._resolve import INHERITED, Universe, chain_of, resolve
from lazyops._settings import Settings

UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class KernelSource:
    """One kernel: who exports it, and where it resolves now (``backend`` is ``None`` when it is unavailable)."""

    kernel: str
    exported_by: tuple[str, ...]
    backend: str | None
    reason: str  # "selected", "fallback-list", "inherited" or "unavailable"
    unavailable: str | None = None  # the KernelUnavailableError's message


@dataclass(frozen=True, slots=True)
class Sources:
    chain: tuple[str, ...]
    default: str
    chain_is_default: bool  # no backend selected: the chain is the platform default alone
    strict: bool
    verbose: bool
    origin: Mapping[str, str]  # where backend, fallback and strict were set (variable or configure argument)
    kernels: tuple[KernelSource, ...]
    backends: tuple[str, ...]
    unreadable: Mapping[str, str]  # backends whose kernel list could not be read, and why
    refused: tuple[str, ...]  # refused entry points, each as its error message

    def lacking(self) -> dict[str, str | None]:
        """The kernels the chain does not export, with the backend each comes from instead (``None``: nowhere)."""
        return {k.kernel: k.backend for k in self.kernels if k.reason in (INHERITED, UNAVAILABLE)}

    def summary_line(self) -> str | None:
        """The first resolution's line: how much of the selection is missing; ``None`` when the chain is the
        platform default alone."""
        if self.chain_is_default or self.chain == (self.default,):
            return None
        selected = f"backend {','.join(self.chain)!r}" + (" (strict)" if self.strict else "")
        lacking = self.lacking()
        if not lacking:
            return f"lazyops: {selected} provides all {len(self.kernels)} known kernels"
        by_source: dict[str | None, list[str]] = {}
        for kernel, source in lacking.items():
            by_source.setdefault(source, []).append(kernel)
        parts = []
        for source, kernels in by_source.items():
            where = f"inherited from {source!r}" if source else "unavailable (KernelUnavailableError)"
            names = (
                ", ".join(kernels) if self.verbose or len(kernels) == 1 else f"{kernels[0]} and {len(kernels) - 1} more"
            )
            parts.append(f"{len(kernels)} {where}: {names}")
        shortened = not self.verbose and any(len(kernels) > 1 for kernels in by_source.values())
        hint = " (LAZYOPS_VERBOSE=1 names them all)" if shortened else ""
        total = len(self.kernels)
        return f"lazyops: {selected} lacks {len(lacking)} of {total} known kernels; {'; '.join(parts)}{hint}"


def build_sources(settings: Settings, universe: Universe, *, refused: tuple[str, ...] = ()) -> Sources:
    """Where each kernel comes from under ``settings``; ``refused`` are the registry's refused entry points, to show
    alongside."""
    known = sorted(universe.known_kernels())
    exports: dict[str, Set[str]] = {}
    unreadable: dict[str, str] = {}
    for backend in universe.backends:
        try:
            exports[backend] = universe.exports(backend)
        except BackendError as error:  # listed as unreadable; it fails when it is selected
            unreadable[backend] = str(error)
    rows = []
    for kernel in known:
        exported_by = tuple(b for b, names in exports.items() if kernel in names)
        try:
            resolution = resolve(kernel, settings, universe)
        except KernelUnavailableError as error:
            rows.append(KernelSource(kernel, exported_by, None, UNAVAILABLE, str(error)))
            continue
        rows.append(KernelSource(kernel, exported_by, resolution.backend, resolution.reason))
    return Sources(
        chain=chain_of(settings, universe),
        default=universe.default,
        chain_is_default=settings.chain is None,
        strict=settings.strict,
        verbose=settings.verbose,
        origin=dict(settings.origin),
        kernels=tuple(rows),
        backends=universe.backends,
        unreadable=unreadable,
        refused=refused,
    )
