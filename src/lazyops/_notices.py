"""The lines lazyops prints: each one once per process, and on rank 0 only unless verbose.

Users porting kernels need to see what did not come from the backend they selected, but an inference engine
with eight data-parallel ranks should not print every line eight times, and a line that repeats on every access
would be noise that people learn to ignore.
"""

from __future__ import annotations

import _thread
import sys

from lazyops._errors import KernelUnavailableError
from lazyops._once import fork_safe
from lazyops._resolve import chain_of, resolve

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from lazyops._config import Settings
    from lazyops._namespace import InstalledUniverse


class Notices:
    def __init__(self) -> None:
        self._printed: set[str] = set()
        self._lock = _thread.allocate_lock()
        fork_safe(self)

    def emit(self, line: str, *, verbose: bool, rank: int) -> None:
        """Print ``line`` to stderr unless it was printed before, or this is not rank 0 and not ``verbose``."""
        with self._lock:
            if line in self._printed:
                return
            self._printed.add(line)
        if verbose or rank == 0:
            print(line, file=sys.stderr, flush=True)

    def _after_fork_in_child(self) -> None:
        self._lock = _thread.allocate_lock()


def inherited_line(kernel: str, source: str, lacking: tuple[str, ...]) -> str:
    return (
        f"lazyops: {kernel} runs from {source!r} (inherited): the selected backend "
        f"{','.join(lacking)!r} does not export it"
    )


def summary_line(settings: Settings, universe: InstalledUniverse) -> str | None:
    """The first resolution's line, when the chain is anything but the platform default alone (else ``None``).

    ``Report.summary_line`` tells the same from a full report; this resolves only the kernels the chain lacks, and
    counts and finds them without a set of every kernel (``KnownKernels``), so that a first access costs about the
    same with ten kernels or ten thousand in the chain.
    """
    if settings.chain is None:
        return None
    chain, default = chain_of(settings, universe), universe.default
    known = universe.known_kernels()
    lacking: dict[str, str | None] = {}
    for kernel in sorted(known.outside([universe.exports(backend) for backend in chain])):
        try:
            lacking[kernel] = resolve(kernel, settings, universe).backend
        except KernelUnavailableError:
            lacking[kernel] = None
    return summary_text(chain, default, settings.strict, settings.verbose, len(known), lacking)


def summary_text(
    chain: tuple[str, ...], default: str, strict: bool, verbose: bool, total: int, lacking: dict[str, str | None]
) -> str | None:
    """How much of the selection is missing: ``lacking`` maps each kernel the chain lacks to where it comes from
    instead (``None``: nowhere); ``None`` when the chain is the platform default alone."""
    if chain == (default,):
        return None
    selected = f"backend {','.join(chain)!r}" + (" (strict)" if strict else "")
    if not lacking:
        return f"lazyops: {selected} provides all {total} known kernels"
    by_source: dict[str | None, list[str]] = {}
    for kernel, source in lacking.items():
        by_source.setdefault(source, []).append(kernel)
    parts = []
    for source, kernels in by_source.items():
        where = f"inherited from {source!r}" if source else "unavailable (KernelUnavailableError)"
        names = ", ".join(kernels) if verbose or len(kernels) == 1 else f"{kernels[0]} and {len(kernels) - 1} more"
        parts.append(f"{len(kernels)} {where}: {names}")
    hint = "" if verbose or all(len(k) == 1 for k in by_source.values()) else " (LAZYOPS_VERBOSE=1 names them all)"
    return f"lazyops: {selected} lacks {len(lacking)} of {total} known kernels; {'; '.join(parts)}{hint}"
