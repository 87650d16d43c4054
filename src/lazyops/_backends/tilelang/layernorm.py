"""LayerNorm in TileLang: ``(x - mean(x)) / sqrt(var(x) + eps) * weight + bias`` over the last dimension, math in
float32.

As in the Triton kernel, the variance is taken of centred values: a row held in registers is centred by its exact
mean and then squared; a wider row is read in chunks whose exact means and centred sums of squares are merged with
Chan's parallel update, so the statistics take one read of the row and the output a second.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T

from lazyops._backends.tilelang._rows import RowPlan, plan_rows, vector_elements
from lazyops._backends.tilelang._runtime import F32, INDEX, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.layernorm import LayerNormConfig, spec


def layernorm_program(
    n: int, dtype: str, eps: float, plan: RowPlan | None = None, weight_dtype: str | None = None
) -> Any:
    """The TileLang program ``main(x[M, n], weight[n], bias[n], y[M, n])`` for a dynamic token count ``M``."""
    plan = plan or plan_rows(n, dtype)
    weight_dtype = weight_dtype or dtype
    rows, cols, chunks = plan.block_rows, plan.block_cols, plan.chunks
    M = T.dynamic("M", INDEX)
    # Row strides: multiples of `vec` elements (the launch copies other layouts), so rows take 16-byte vectors.
    x_stride, y_stride = T.dynamic("x_stride, y_stride", INDEX)
    vec = vector_elements(n, dtype)

    if plan.resident:

        @T.prim_func
        def main(
            x: T.StridedTensor((M, n), (x_stride, 1), dtype),
            weight: T.Tensor((n,), weight_dtype),
            bias: T.Tensor((n,), weight_dtype),
            y: T.StridedTensor((M, n), (y_stride, 1), dtype),
        ):
            T.assume(x_stride % vec == 0)
            T.assume(y_stride % vec == 0)
            with T.Kernel(T.ceildiv(M, rows), threads=plan.threads) as block:
                xs = T.alloc_fragment((rows, cols), F32)
                squares = T.alloc_fragment((rows, cols), F32)
                mean = T.alloc_fragment((rows,), F32)
                rstd = T.alloc_fragment((rows,), F32)
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    xs[i, j] = T.if_then_else(row < M and j < n, T.cast(x[row, j], F32), T.float32(0))
                T.reduce_sum(xs, mean, dim=1)
                for i in T.Parallel(rows):
                    mean[i] = mean[i] / n
                for i, j in T.Parallel(rows, cols):
                    # Centred in place: the padding lanes stay 0, so neither the sum below nor the output sees them.
                    xs[i, j] = T.if_then_else(j < n, xs[i, j] - mean[i], T.float32(0))
                for i, j in T.Parallel(rows, cols):
                    squares[i, j] = xs[i, j] * xs[i, j]
                T.reduce_sum(squares, rstd, dim=1)
                for i in T.Parallel(rows):
                    rstd[i] = T.rsqrt(rstd[i] / n + eps)
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    if row < M and j < n:
                        y[row, j] = T.cast(xs[i, j] * rstd[i] * T.cast(weight[j], F32) + T.cast(bias[j], F32), dtype)

        return main

    @T.prim_func
    def main(
        x: T.StridedTensor((M, n), (x_stride, 1), dtype),
        weight: T.Tensor((n,), weight_dtype),
        bias: T.Tensor((n,), weight_dtype),
        y: T.StridedTensor((M, n), (y_stride, 1), dtype),
    ):
        T.assume(x_stride % vec == 0)
        T.assume(y_stride % vec == 0)
        with T.Kernel(M, threads=plan.threads) as row:
            xs = T.alloc_fragment((1, cols), F32)
            squares = T.alloc_fragment((1, cols), F32)
            chunk_mean = T.alloc_fragment((1,), F32)
            chunk_m2 = T.alloc_fragment((1,), F32)
            mean = T.alloc_fragment((1,), F32)
            m2 = T.alloc_fragment((1,), F32)  # the sum of squared deviations from the running mean
            T.clear(mean)
            T.clear(m2)
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    xs[i, j] = T.if_then_else(col < n, T.cast(x[row, col], F32), T.float32(0))
                T.reduce_sum(xs, chunk_mean, dim=1)
                for i in T.Parallel(1):
                    chunk_mean[i] = chunk_mean[i] / T.cast(T.min(cols, n - c * cols), F32)
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    squares[i, j] = T.if_then_else(
                        col < n, (xs[i, j] - chunk_mean[i]) * (xs[i, j] - chunk_mean[i]), T.float32(0)
                    )
                T.reduce_sum(squares, chunk_m2, dim=1)
                for i in T.Parallel(1):
                    # Chan's update: every chunk before this one was full.
                    seen = T.cast(c * cols, F32)
                    count = T.cast(T.min(cols, n - c * cols), F32)
                    delta = chunk_mean[i] - mean[i]
                    mean[i] = mean[i] + delta * count / (seen + count)
                    m2[i] = m2[i] + chunk_m2[i] + delta * delta * seen * count / (seen + count)
            for i in T.Parallel(1):
                m2[i] = T.rsqrt(m2[i] / n + eps)  # from here on the inverse standard deviation
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    if col < n:
                        y[row, col] = T.cast(
                            (T.cast(x[row, col], F32) - mean[i]) * m2[i] * T.cast(weight[col], F32)
                            + T.cast(bias[col], F32),
                            dtype,
                        )

    return main


def programs(config: LayerNormConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    return {
        "main": lambda: layernorm_program(
            config.n, tl_dtype(config.dtype), config.eps, weight_dtype=tl_dtype(config.weight_dtype)
        )
    }


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True)
def layernorm_tl(config: LayerNormConfig) -> Callable[..., None]:
    kernel = compiled(config.label, programs(config))["main"]
    return launch_out_of_place(spec, kernel, vector_elements(config.n, tl_dtype(config.dtype)))
