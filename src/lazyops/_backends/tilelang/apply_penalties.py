"""Penalties in TileLang (the spec: ``lazyops.specs.apply_penalties``): one elementwise pass over the logits, in
place; every input's rows at their own stride. The logit bias (``K`` entries a row, compared with each token of
the tile in a serial loop: ``K`` is a handful) and the packed bitmask (a word per 32 tokens) are compiled in only
by the variants that take them; a variant without one is passed a placeholder it never reads."""

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
#: The program variants: (logit bias, token mask).
VARIANTS = ((False, False), (True, False), (False, True), (True, True))


def penalties_program(n: int, dtype: str, bias: bool = False, mask: bool = False) -> Any:
    """The TileLang program ``main(logits, counts, prompt_mask, repetition, frequency, presence, bias_ids,
    bias_values, allowed)`` for a dynamic request count ``M``: ``prompt_mask`` as uint8 (a bool tensor's bytes),
    the parameters ``[M, 1]`` columns, ``bias_ids``/``bias_values`` ``[M, K]`` (read where ``bias``), ``allowed``
    ``[M, W]`` int32 words (read where ``mask``)."""
    cols = min(next_power_of_two(n), MAX_BLOCK_COLS)
    rows = TILE // cols
    col_blocks = -(-n // cols)
    M = T.dynamic("M", INDEX)
    K, W = T.dynamic("K, W", INDEX)
    x_stride, c_stride, m_stride, r_stride, f_stride, p_stride, i_stride, v_stride, a_stride = T.dynamic(
        "x_stride, c_stride, m_stride, r_stride, f_stride, p_stride, i_stride, v_stride, a_stride", INDEX
    )

    @T.prim_func
    def main(
        logits: T.StridedTensor((M, n), (x_stride, 1), dtype),
        counts: T.StridedTensor((M, n), (c_stride, 1), "int32"),
        prompt_mask: T.StridedTensor((M, n), (m_stride, 1), "uint8"),
        repetition: T.StridedTensor((M, 1), (r_stride, 1), "float32"),
        frequency: T.StridedTensor((M, 1), (f_stride, 1), "float32"),
        presence: T.StridedTensor((M, 1), (p_stride, 1), "float32"),
        bias_ids: T.StridedTensor((M, K), (i_stride, 1), "int32"),
        bias_values: T.StridedTensor((M, K), (v_stride, 1), "float32"),
        allowed: T.StridedTensor((M, W), (a_stride, 1), "int32"),
    ):
        with T.Kernel(T.ceildiv(M, rows) * col_blocks, threads=THREADS) as block:
            by = block // col_blocks
            bx = block % col_blocks
            x = T.alloc_fragment((rows, cols), F32)
            for i, j in T.Parallel(rows, cols):
                row = T.min(by * rows + i, M - 1)
                col = T.min(bx * cols + j, n - 1)
                x[i, j] = T.cast(logits[row, col], F32)
            if bias:  # vLLM's order: the logit bias before the penalties
                for k in T.serial(K):
                    for i, j in T.Parallel(rows, cols):
                        row = T.min(by * rows + i, M - 1)
                        hit = bias_ids[row, k] == T.cast(bx * cols + j, "int32")
                        x[i, j] = T.if_then_else(hit, x[i, j] + bias_values[row, k], x[i, j])
            for i, j in T.Parallel(rows, cols):
                row = by * rows + i
                col = bx * cols + j
                if row < M and col < n:
                    v = x[i, j]
                    count = counts[row, col]
                    rep = repetition[row, 0]
                    seen = prompt_mask[row, col] != T.uint8(0) or count > 0
                    v = T.if_then_else(seen, T.if_then_else(v > T.float32(0), v / rep, v * rep), v)
                    v = v - frequency[row, 0] * T.cast(count, F32)
                    v = T.if_then_else(count > 0, v - presence[row, 0], v)
                    if mask:  # bit col % 32 of word col // 32: the token is allowed
                        word = allowed[row, col // 32]
                        v = T.if_then_else(((word >> T.cast(col % 32, "int32")) & 1) != 0, v, -T.infinity(F32))
                    logits[row, col] = T.cast(v, dtype)

    return main


def programs(config: ApplyPenaltiesConfig) -> dict[Any, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant (logit bias, token mask)."""
    dtype = tl_dtype(config.dtype)
    return {
        variant: (lambda variant=variant: penalties_program(config.n, dtype, *variant))  # type: ignore[misc]
        for variant in VARIANTS
    }


@spec.implementation(device_type="cuda", strided_rows=True)
def apply_penalties_tl(config: ApplyPenaltiesConfig) -> Callable[..., None]:
    kernels = {variant: direct(kernel) for variant, kernel in compiled(config.label, programs(config)).items()}

    def apply_penalties(
        logits: torch.Tensor,
        output_counts: torch.Tensor,
        prompt_mask: torch.Tensor,
        repetition: torch.Tensor,
        frequency: torch.Tensor,
        presence: torch.Tensor,
        bias_ids: torch.Tensor | None = None,
        bias_values: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> None:
        bias = bias_ids is not None and bias_ids.numel() > 0
        mask = allowed is not None and allowed.numel() > 0
        # placeholders, never read, of one column (``K`` = 1 for both bias tensors)
        ids = bias_ids if bias and bias_ids is not None else output_counts[:, :1]
        values = bias_values if bias and bias_values is not None else repetition
        words = allowed if mask and allowed is not None else output_counts
        kernels[bias, mask](
            logits, output_counts, prompt_mask.view(torch.uint8), repetition, frequency, presence, ids, values, words
        )

    return apply_penalties
