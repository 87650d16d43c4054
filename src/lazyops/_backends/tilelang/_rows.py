"""How the row-wise kernels (the norms, softmax) split a row of ``n`` features over a thread block.

Each thread block owns whole rows, so a row's reduction (a sum of squares, a maximum) stays inside one block: no
second launch, no atomics. A row is padded to a power of two, ``block_cols`` wide, and every thread takes a few
16-byte vectors of it; the padding lanes are masked. Up to :data:`MAX_RESIDENT` features a row is read once and
held in registers between the reduction and the write. Wider rows are streamed in ``chunks`` passes of
``block_cols`` features, reading the row twice (the second time mostly from L2). Narrow rows share a block, so
that no block runs fewer than :data:`MIN_THREADS` threads.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The widest row held in registers: at most 32 float32 values a thread (16384 half-precision features over 512
#: threads, float32 over 1024), within the registers a thread has at that block size; wider rows would spill.
MAX_RESIDENT = 16384
MAX_THREADS = 1024
MIN_THREADS = 128
VECTOR_BYTES = 16
#: 16-byte vectors each thread loads per row: 4 (128 threads for a row of 4096) against 1 (512 threads) keeps more
#: loads in flight a thread and fewer threads in each block's reduction, measured faster for every row kernel on an
#: H200 (docs/decisions/006-row-kernel-layouts.md).
VECTORS_PER_THREAD = 4
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class RowPlan:
    block_rows: int  #: rows one thread block handles
    block_cols: int  #: features one pass over a row covers (a power of two; lanes past n are masked)
    threads: int  #: threads per block
    chunks: int  #: passes over a row; 1 means the row stays in registers

    @property
    def resident(self) -> bool:
        return self.chunks == 1


def next_power_of_two(value: int) -> int:
    return 1 << (value - 1).bit_length()


def plan_rows(n: int, dtype: str, vectors_per_thread: int = VECTORS_PER_THREAD) -> RowPlan:
    """The block shape for rows of ``n`` features of ``dtype`` (a TileLang dtype name)."""
    vector = VECTOR_BYTES // ITEMSIZE[dtype]
    width = max(next_power_of_two(n), vector)
    if width > MAX_RESIDENT:
        return RowPlan(1, MAX_RESIDENT, MAX_THREADS, -(-n // MAX_RESIDENT))
    threads_per_row = max(1, width // (vector * vectors_per_thread))
    if threads_per_row >= MIN_THREADS:
        return RowPlan(1, width, min(threads_per_row, MAX_THREADS), 1)
    return RowPlan(MIN_THREADS // threads_per_row, width, MIN_THREADS, 1)


def vector_elements(width: int, dtype: str) -> int:
    """Elements of ``dtype`` in the widest vector (at most 16 bytes) that divides a row of ``width``: the multiple
    a strided program assumes of its row strides, which every contiguous row of ``width`` satisfies."""
    return min(VECTOR_BYTES // ITEMSIZE[dtype], width & -width)
