"""One TileLang program for two targets: CUDA, where the kernels run, and TileLang's C target, where CI runs them.

TileLang's C target (0.1.15) runs a program's thread blocks one after another on the host, but lowers neither a
fragment (a tile spread over a block's threads) in a reduction nor a ``T.Parallel`` loop over a thread-private
buffer. A program that takes its tiles and loops from a :class:`Dialect` gets fragments, ``T.Parallel`` and
shared memory on CUDA, and on the CPU thread-private buffers and serial loops over the same indices: the same
statements compute the same values, so a CPU run checks the program's arithmetic and indexing against the torch
backend. It does not check what only CUDA has: the layouts TileLang infers, the barriers it inserts, the
reductions across threads. Those a GPU confirms (the conformance kit on the device).

The CPU runs a parallel loop's elements one after another, so a loop whose element reads what another element of
the same loop writes would compute something there that it does not on a GPU; ``T.Parallel`` forbids such loops
anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tilelang.language as T


@dataclass(frozen=True)
class Dialect:
    """The tiles and loops of a program for one target: ``cpu=False`` for CUDA, ``True`` for the C target."""

    cpu: bool = False

    @property
    def target(self) -> str:
        """The ``tilelang.compile`` target of this dialect's programs."""
        return "c" if self.cpu else "cuda"

    def parallel(self, *extents: Any) -> Any:
        """A loop over a tile's elements: spread over the block's threads, or nested serial loops on the CPU."""
        return T.grid(*extents) if self.cpu else T.Parallel(*extents)

    def tile(self, shape: tuple[Any, ...], dtype: str) -> Any:
        """A tile of registers spread over the block's threads (a fragment)."""
        return T.alloc_local(shape, dtype) if self.cpu else T.alloc_fragment(shape, dtype)

    def shared(self, shape: tuple[Any, ...], dtype: str) -> Any:
        """A buffer every thread of the block reads: shared memory, where a value moves between tile layouts."""
        return T.alloc_local(shape, dtype) if self.cpu else T.alloc_shared(shape, dtype)


CUDA = Dialect()
CPU = Dialect(cpu=True)
