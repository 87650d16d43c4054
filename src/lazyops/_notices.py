"""The lines lazyops prints: each one once per process, and on rank 0 only unless verbose.

Users porting kernels need to see what did not come from the backend they selected, but an inference engine
with eight data-parallel ranks should not print every line eight times, and a line that repeats on every access
would be noise that people learn to ignore.
"""

from __future__ import annotations

import _thread
import sys

from lazyops._once import fork_safe
from lazyops._settings import VARIABLES


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


def unknown_variable_line(name: str, nearest: str | None) -> str:
    """The line for a ``LAZYOPS_*`` variable lazyops does not read (``_settings.unknown_variables``)."""
    known = ", ".join(variable for variable in VARIABLES if variable.startswith("LAZYOPS_"))
    hint = f"did you mean {nearest}?" if nearest else f"the variables lazyops reads are {known}"
    return f"lazyops: {name} is not a lazyops variable and is ignored; {hint}"
