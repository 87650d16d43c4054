"""Softmax over the last dimension in TileLang, math in float32."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T

from lazyops._backends.tilelang._rows import RowPlan, plan_rows, vector_elements
from lazyops._backends.tilelang._runtime import F32, INDEX, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.softmax import SoftmaxConfig, spec

#: exp(x) = exp2(x * log2(e)): exp2 is a single hardware instruction plus a little range handling, expf more.
LOG2E = 1.4426950408889634


def softmax_program(n: int, dtype: str, plan: RowPlan | None = None) -> Any:
    """The TileLang program ``main(x[M, n], y[M, n])`` for a dynamic token count ``M``."""
    plan = plan or plan_rows(n, dtype)
    rows, cols, chunks = plan.block_rows, plan.block_cols, plan.chunks
    M = T.dynamic("M", INDEX)
    # Row strides: multiples of `vec` elements (the launch copies other layouts), so rows take 16-byte vectors.
    x_stride, y_stride = T.dynamic("x_stride, y_stride", INDEX)
    vec = vector_elements(n, dtype)
    neg_inf = -T.infinity(F32)

    if plan.resident:

        @T.prim_func
        def main(x: T.StridedTensor((M, n), (x_stride, 1), dtype), y: T.StridedTensor((M, n), (y_stride, 1), dtype)):
            T.assume(x_stride % vec == 0)
            T.assume(y_stride % vec == 0)
            with T.Kernel(T.ceildiv(M, rows), threads=plan.threads) as block:
                xs = T.alloc_fragment((rows, cols), F32)
                row_max = T.alloc_fragment((rows,), F32)
                row_sum = T.alloc_fragment((rows,), F32)
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    xs[i, j] = T.if_then_else(row < M and j < n, T.cast(x[row, j], F32), neg_inf)
                T.reduce_max(xs, row_max, dim=1)
                for i, j in T.Parallel(rows, cols):
                    xs[i, j] = T.exp2((xs[i, j] - row_max[i]) * LOG2E)
                T.reduce_sum(xs, row_sum, dim=1)
                for i in T.Parallel(rows):
                    row_sum[i] = T.float32(1) / row_sum[i]
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    if row < M and j < n:
                        y[row, j] = T.cast(xs[i, j] * row_sum[i], dtype)

        return main

    # Streamed rows: an online softmax. Every lane keeps its own running maximum and the sum of exponentials
    # relative to it; the lanes are merged once at the end, and a second pass writes exp(x - max) / sum.
    @T.prim_func
    def main(x: T.StridedTensor((M, n), (x_stride, 1), dtype), y: T.StridedTensor((M, n), (y_stride, 1), dtype)):
        T.assume(x_stride % vec == 0)
        T.assume(y_stride % vec == 0)
        with T.Kernel(M, threads=plan.threads) as row:
            lane_max = T.alloc_fragment((1, cols), F32)
            lane_sum = T.alloc_fragment((1, cols), F32)
            row_max = T.alloc_fragment((1,), F32)
            row_sum = T.alloc_fragment((1,), F32)
            T.fill(lane_max, neg_inf)
            T.clear(lane_sum)
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    value = T.if_then_else(col < n, T.cast(x[row, col], F32), neg_inf)
                    new_max = T.max(lane_max[i, j], value)
                    # A lane that has seen only -inf keeps a zero sum (exp(-inf - -inf) would be NaN).
                    lane_sum[i, j] = T.if_then_else(
                        new_max == neg_inf,
                        T.float32(0),
                        lane_sum[i, j] * T.exp2((lane_max[i, j] - new_max) * LOG2E) + T.exp2((value - new_max) * LOG2E),
                    )
                    lane_max[i, j] = new_max
            T.reduce_max(lane_max, row_max, dim=1)
            for i, j in T.Parallel(1, cols):
                lane_sum[i, j] = lane_sum[i, j] * T.exp2((lane_max[i, j] - row_max[i]) * LOG2E)
            T.reduce_sum(lane_sum, row_sum, dim=1)
            for i in T.Parallel(1):
                row_sum[i] = T.float32(1) / row_sum[i]
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    if col < n:
                        y[row, col] = T.cast(
                            T.exp2((T.cast(x[row, col], F32) - row_max[i]) * LOG2E) * row_sum[i], dtype
                        )

    return main


def programs(config: SoftmaxConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    return {"main": lambda: softmax_program(config.n, tl_dtype(config.dtype))}


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True)
def softmax_tl(config: SoftmaxConfig) -> Callable[..., None]:
    kernel = compiled(config.label, programs(config))["main"]
    return launch_out_of_place(spec, kernel, vector_elements(config.n, tl_dtype(config.dtype)))
