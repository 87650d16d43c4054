"""The lines lazyops prints: each one once per process, and on rank 0 only unless verbose.

Users porting kernels need to see what did not come from the backend they selected, but an inference engine
with eight data-parallel ranks should not print every line eight times, and a line that repeats on every access
would be noise that people learn to ignore.
"""

from __future__ import annotations

import sys
import threading

from lazyops import _forksafe


class Notices:
    def __init__(self) -> None:
        self._printed: set[str] = set()
        self._lock = threading.Lock()
        _forksafe.register(self)

    def emit(self, line: str, *, verbose: bool, rank: int) -> None:
        """Print ``line`` to stderr unless it was printed before, or this is not rank 0 and not ``verbose``."""
        with self._lock:
            if line in self._printed:
                return
            self._printed.add(line)
        if verbose or rank == 0:
            print(line, file=sys.stderr, flush=True)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


def summary_line(
    chain: tuple[str, ...], strict: bool, lacking: dict[str, str | None], total: int, verbose: bool
) -> str:
    """How many of the known kernels the chain lacks and where they will come from."""
    selected = f"backend {','.join(chain)!r}" + (" (strict)" if strict else "")
    if not lacking:
        return f"lazyops: {selected} provides all {total} known kernels"
    by_source: dict[str | None, list[str]] = {}
    for kernel, source in lacking.items():
        by_source.setdefault(source, []).append(kernel)
    parts = []
    for source, kernels in by_source.items():
        where = f"inherited from {source!r}" if source else "unavailable (KernelUnavailableError)"
        names = ", ".join(kernels) if verbose else kernels[0] + (f" and {len(kernels) - 1} more" if len(kernels) > 1 else "")
        parts.append(f"{len(kernels)} {where}: {names}")
    hint = "" if verbose or all(len(k) == 1 for k in by_source.values()) else " (LAZYOPS_VERBOSE=1 names them all)"
    return f"lazyops: {selected} lacks {len(lacking)} of {total} known kernels; {'; '.join(parts)}{hint}"


def inherited_line(kernel: str, source: str, lacking: tuple[str, ...]) -> str:
    return (
        f"lazyops: {kernel} runs from {source!r} (inherited): the selected backend "
        f"{','.join(lacking)!r} does not export it"
    )
