"""Penalties in TileLang (the spec: ``lazyops.specs.apply_penalties``): one elementwise pass over the logits, in
place; every input's rows at their own stride."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import next_power_of_two
from lazyops._backends.tilelang._runtime import F32, INDEX, compiled, direct, tl_dtype
from lazyops.specs.apply_penalties import ApplyPenaltiesConfig, spec

#: Logits one thread block updates: 256 threads at 16 values each.
TILE = 4096
THREADS = 256
MAX_BLOCK_COLS = 1024


def penalties_program(n: int, dtype: str) -> Any:
    """The TileLang program ``main(logits, counts, prompt_mask, repetition, frequency, presence)`` for a dynamic
    request count ``M``: ``prompt_mask`` as uint8 (a bool tensor's bytes), the parameters ``[M, 1]`` columns."""
    cols = min(next_power_of_two(n), MAX_BLOCK_COLS)
    rows = TILE // cols
    col_blocks = -(-n // cols)
    M = T.dynamic("M", INDEX)
    x_stride, c_stride, m_stride, r_stride, f_stride, p_stride = T.dynamic(
        "x_stride, c_stride, m_stride, r_stride, f_stride, p_stride", INDEX
    )

    @T.prim_func
    def main(
        logits: T.StridedTensor((M, n), (x_stride, 1), dtype),
        counts: T.StridedTensor((M, n), (c_stride, 1), "int32"),
        prompt_mask: T.StridedTensor((M, n), (m_stride, 1), "uint8"),
        repetition: T.StridedTensor((M, 1), (r_stride, 1), "float32"),
        frequency: T.StridedTensor((M, 1), (f_stride, 1), "float32"),
        presence: T.StridedTensor((M, 1), (p_stride, 1), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, rows) * col_blocks, threads=THREADS) as block:
            by = block // col_blocks
            bx = block % col_blocks
            for i, j in T.Parallel(rows, cols):
                row = by * rows + i
                col = bx * cols + j
                if row < M and col < n:
                    x = T.cast(logits[row, col], F32)
                    count = counts[row, col]
                    rep = repetition[row, 0]
                    seen = prompt_mask[row, col] != T.uint8(0) or count > 0
                    x = T.if_then_else(seen, T.if_then_else(x > T.float32(0), x / rep, x * rep), x)
                    x = x - frequency[row, 0] * T.cast(count, F32)
                    x = T.if_then_else(count > 0, x - presence[row, 0], x)
                    logits[row, col] = T.cast(x, dtype)

    return main


def programs(config: ApplyPenaltiesConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    return {"main": lambda: penalties_program(config.n, tl_dtype(config.dtype))}


@spec.implementation(device_type="cuda", strided_rows=True)
def apply_penalties_tl(config: ApplyPenaltiesConfig) -> Callable[..., None]:
    kernel = direct(compiled(config.label, programs(config))["main"])

    def apply_penalties(
        logits: torch.Tensor,
        output_counts: torch.Tensor,
        prompt_mask: torch.Tensor,
        repetition: torch.Tensor,
        frequency: torch.Tensor,
        presence: torch.Tensor,
    ) -> None:
        kernel(logits, output_counts, prompt_mask.view(torch.uint8), repetition, frequency, presence)

    return apply_penalties
