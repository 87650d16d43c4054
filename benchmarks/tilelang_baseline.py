"""The TileLang programs of main at d686586, frozen for ``benchmarks/tilelang_variants.py`` (issue 12).

The backend now builds other programs for rope and the float8 norms (``lazyops._backends.tilelang``); these are
the ones they replaced, copied verbatim (only the module-level names they need beside them), so that one GPU
run can time and check both side by side. Delete this file once that run has decided between them.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func.
# ruff: noqa
# mypy: ignore-errors

from typing import Any

import tilelang.language as T

from lazyops._backends.tilelang._rows import RowPlan, plan_rows, vector_elements
from lazyops._backends.tilelang._runtime import F32
from lazyops.specs.rmsnorm_fp8 import FP8_MAX

FP8 = "float8_e4m3fn"


def saturated(value: Any) -> Any:
    """``value`` clamped to ±448 by comparisons, which NaN fails, so NaN passes through (``fminf``/``fmaxf``
    would turn it into a bound); the conversion (``__nv_cvt_float_to_fp8``, satfinite) keeps it NaN."""
    return T.if_then_else(
        value > FP8_MAX, T.float32(FP8_MAX), T.if_then_else(value < -FP8_MAX, T.float32(-FP8_MAX), value)
    )


def rmsnorm_fp8_program(
    n: int, dtype: str, eps: float, plan: RowPlan | None = None, weight_dtype: str | None = None, offset: float = 0.0
) -> Any:
    """The TileLang program ``main(x[M, n], weight[n], scale[1], y[M, n])``, ``y`` in float8 e4m3, for a dynamic
    token count ``M``. The scale is read from memory by every launch (a CUDA graph sees its updates)."""
    plan = plan or plan_rows(n, dtype)
    weight_dtype = weight_dtype or dtype
    rows, cols, chunks = plan.block_rows, plan.block_cols, plan.chunks
    M = T.dynamic("M")

    if plan.resident:

        @T.prim_func
        def main(
            x: T.Tensor((M, n), dtype),
            weight: T.Tensor((n,), weight_dtype),
            scale: T.Tensor((1,), F32),
            y: T.Tensor((M, n), FP8),
        ):
            with T.Kernel(T.ceildiv(M, rows), threads=plan.threads) as block:
                xs = T.alloc_fragment((rows, cols), F32)
                squares = T.alloc_fragment((rows, cols), F32)
                factor = T.alloc_fragment((rows,), F32)
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    xs[i, j] = T.if_then_else(row < M and j < n, T.cast(x[row, j], F32), T.float32(0))
                for i, j in T.Parallel(rows, cols):
                    squares[i, j] = xs[i, j] * xs[i, j]
                T.reduce_sum(squares, factor, dim=1)
                for i in T.Parallel(rows):
                    factor[i] = T.rsqrt(factor[i] / n + eps) / scale[0]
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    if row < M and j < n:
                        y[row, j] = T.cast(saturated(xs[i, j] * factor[i] * (T.cast(weight[j], F32) + offset)), FP8)

        return main

    @T.prim_func
    def main(
        x: T.Tensor((M, n), dtype),
        weight: T.Tensor((n,), weight_dtype),
        scale: T.Tensor((1,), F32),
        y: T.Tensor((M, n), FP8),
    ):
        with T.Kernel(M, threads=plan.threads) as row:
            squares = T.alloc_fragment((1, cols), F32)
            factor = T.alloc_fragment((1,), F32)
            T.clear(squares)
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    value = T.if_then_else(col < n, T.cast(x[row, col], F32), T.float32(0))
                    squares[i, j] += value * value
            T.reduce_sum(squares, factor, dim=1)
            for i in T.Parallel(1):
                factor[i] = T.rsqrt(factor[i] / n + eps) / scale[0]
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    if col < n:
                        y[row, col] = T.cast(
                            saturated(T.cast(x[row, col], F32) * factor[i] * (T.cast(weight[col], F32) + offset)),
                            FP8,
                        )

    return main


def add_rmsnorm_fp8_program(
    n: int, dtype: str, eps: float, plan: RowPlan | None = None, weight_dtype: str | None = None, offset: float = 0.0
) -> Any:
    """The TileLang program ``main(x[M, n], residual[M, n], weight[n], scale[1], y[M, n])``, ``y`` in float8 e4m3;
    it rewrites ``residual``. The norm is taken of the float32 sum, not of the sum rounded back into ``residual``."""
    plan = plan or plan_rows(n, dtype)
    weight_dtype = weight_dtype or dtype
    rows, cols, chunks = plan.block_rows, plan.block_cols, plan.chunks
    M = T.dynamic("M")

    if plan.resident:

        @T.prim_func
        def main(
            x: T.Tensor((M, n), dtype),
            residual: T.Tensor((M, n), dtype),
            weight: T.Tensor((n,), weight_dtype),
            scale: T.Tensor((1,), F32),
            y: T.Tensor((M, n), FP8),
        ):
            with T.Kernel(T.ceildiv(M, rows), threads=plan.threads) as block:
                total = T.alloc_fragment((rows, cols), F32)
                squares = T.alloc_fragment((rows, cols), F32)
                factor = T.alloc_fragment((rows,), F32)
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    total[i, j] = T.if_then_else(
                        row < M and j < n,
                        T.cast(x[row, j], F32) + T.cast(residual[row, j], F32),
                        T.float32(0),
                    )
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    if row < M and j < n:
                        residual[row, j] = T.cast(total[i, j], dtype)
                for i, j in T.Parallel(rows, cols):
                    squares[i, j] = total[i, j] * total[i, j]
                T.reduce_sum(squares, factor, dim=1)
                for i in T.Parallel(rows):
                    factor[i] = T.rsqrt(factor[i] / n + eps) / scale[0]
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    if row < M and j < n:
                        y[row, j] = T.cast(saturated(total[i, j] * factor[i] * (T.cast(weight[j], F32) + offset)), FP8)

        return main

    # Streamed rows: the sum is formed twice from the inputs, and residual is written only in the second pass,
    # so the norm still sees the float32 sum rather than what was rounded back into residual.
    @T.prim_func
    def main(
        x: T.Tensor((M, n), dtype),
        residual: T.Tensor((M, n), dtype),
        weight: T.Tensor((n,), weight_dtype),
        scale: T.Tensor((1,), F32),
        y: T.Tensor((M, n), FP8),
    ):
        with T.Kernel(M, threads=plan.threads) as row:
            squares = T.alloc_fragment((1, cols), F32)
            factor = T.alloc_fragment((1,), F32)
            T.clear(squares)
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    value = T.if_then_else(
                        col < n, T.cast(x[row, col], F32) + T.cast(residual[row, col], F32), T.float32(0)
                    )
                    squares[i, j] += value * value
            T.reduce_sum(squares, factor, dim=1)
            for i in T.Parallel(1):
                factor[i] = T.rsqrt(factor[i] / n + eps) / scale[0]
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    if col < n:
                        value = T.cast(x[row, col], F32) + T.cast(residual[row, col], F32)
                        residual[row, col] = T.cast(value, dtype)
                        y[row, col] = T.cast(saturated(value * factor[i] * (T.cast(weight[col], F32) + offset)), FP8)

    return main


THREADS = 128


LANES_PER_THREAD = 2


def rope_program(head_dim: int, dtype: str, is_neox: bool, cache_dtype: str, positions_dtype: str) -> Any:
    """The TileLang program ``main(positions[M], query[M, Hq, head_dim], key[M, Hk, head_dim], cache[P, r])``.

    Everything but ``head_dim`` is a run-time size: the token count, the head counts, the cache's length, its
    rotary width ``r`` and the row strides of positions, query and key (each a multiple of
    :func:`rope_alignment` elements, which the launch guarantees), so one compiled kernel serves every model
    that shares a head size, packed ``qkv`` views included.
    """
    M, Hq, Hk, P, R = T.dynamic("M, Hq, Hk, P, R")
    positions_stride, query_stride, key_stride = T.dynamic("positions_stride, query_stride, key_stride")
    vec = vector_elements(head_dim, dtype)
    # Pairs one lane rotates: neox, a vector of first halves and its partner vector; interleaved, one vector.
    pairs = vec if is_neox else max(1, vec // 2)
    span = pairs if is_neox else 2 * pairs  # features of one loaded vector
    lanes_per_head = -(-(head_dim // 2) // pairs)
    lanes = LANES_PER_THREAD

    def turned_first(first: Any, second: Any, cos: Any, sin: Any) -> Any:
        return T.cast(T.cast(first, F32) * cos - T.cast(second, F32) * sin, dtype)

    def turned_second(first: Any, second: Any, cos: Any, sin: Any) -> Any:
        return T.cast(T.cast(second, F32) * cos + T.cast(first, F32) * sin, dtype)

    @T.macro
    def rotate(x: T.Tensor, heads: Any, cache: T.Tensor, token: Any, row: Any, half: Any, tx: Any, buffers: Any):
        a, b, cos, sin = buffers
        # The partner half's offset, written so that the compiler sees it is a whole number of vectors.
        partner = (half // pairs) * pairs
        vectorised = half % pairs == 0
        for step in T.serial(T.ceildiv(heads * lanes_per_head, THREADS * lanes)):
            for u in T.unroll(lanes):
                lane = (step * lanes + u) * THREADS + tx
                head = lane // lanes_per_head
                p0 = lane % lanes_per_head * pairs
                if vectorised and head < heads and p0 < half:
                    for v in T.vectorized(pairs):
                        cos[u * pairs + v] = T.cast(cache[row, p0 + v], F32)
                        sin[u * pairs + v] = T.cast(cache[row, partner + p0 + v], F32)
                    if is_neox:
                        for v in T.vectorized(span):
                            a[u * span + v] = x[token, head, p0 + v]
                        for v in T.vectorized(span):
                            b[u * span + v] = x[token, head, partner + p0 + v]
                    else:
                        for v in T.vectorized(span):
                            a[u * span + v] = x[token, head, 2 * p0 + v]
            for u in T.unroll(lanes):
                lane = (step * lanes + u) * THREADS + tx
                head = lane // lanes_per_head
                p0 = lane % lanes_per_head * pairs
                if head < heads and p0 < half:
                    if vectorised:
                        if is_neox:
                            for v in T.vectorized(span):
                                x[token, head, p0 + v] = turned_first(
                                    a[u * span + v], b[u * span + v], cos[u * pairs + v], sin[u * pairs + v]
                                )
                            for v in T.vectorized(span):
                                x[token, head, partner + p0 + v] = turned_second(
                                    a[u * span + v], b[u * span + v], cos[u * pairs + v], sin[u * pairs + v]
                                )
                        else:
                            for v in T.unroll(pairs):
                                b[u * span + 2 * v] = turned_first(
                                    a[u * span + 2 * v], a[u * span + 2 * v + 1], cos[u * pairs + v], sin[u * pairs + v]
                                )
                                b[u * span + 2 * v + 1] = turned_second(
                                    a[u * span + 2 * v], a[u * span + 2 * v + 1], cos[u * pairs + v], sin[u * pairs + v]
                                )
                            for v in T.vectorized(span):
                                x[token, head, 2 * p0 + v] = b[u * span + v]
                    else:
                        # r/2 is not a whole number of vectors: the same pairs, one element at a time.
                        for v in T.serial(pairs):
                            i = p0 + v
                            if i < half:
                                c = T.cast(cache[row, i], F32)
                                s = T.cast(cache[row, half + i], F32)
                                # The pair is read into registers before either element is written.
                                if is_neox:
                                    a[0] = x[token, head, i]
                                    b[0] = x[token, head, half + i]
                                    x[token, head, i] = turned_first(a[0], b[0], c, s)
                                    x[token, head, half + i] = turned_second(a[0], b[0], c, s)
                                else:
                                    a[0] = x[token, head, 2 * i]
                                    b[0] = x[token, head, 2 * i + 1]
                                    x[token, head, 2 * i] = turned_first(a[0], b[0], c, s)
                                    x[token, head, 2 * i + 1] = turned_second(a[0], b[0], c, s)

    @T.prim_func
    def main(
        positions: T.StridedTensor((M,), (positions_stride,), positions_dtype),
        query: T.StridedTensor((M, Hq, head_dim), (query_stride, head_dim, 1), dtype),
        key: T.StridedTensor((M, Hk, head_dim), (key_stride, head_dim, 1), dtype),
        cache: T.Tensor((P, R), cache_dtype),
    ):
        T.assume(query_stride % vec == 0)
        T.assume(key_stride % vec == 0)
        with T.Kernel(M, threads=THREADS) as token:
            tx = T.get_thread_binding()
            a = T.alloc_local((lanes * span,), dtype)
            b = T.alloc_local((lanes * span,), dtype)
            cos = T.alloc_local((lanes * pairs,), F32)
            sin = T.alloc_local((lanes * pairs,), F32)
            position = positions[token]
            half = R // 2
            if position >= 0 and position < P:
                rotate(query, Hq, cache, token, position, half, tx, (a, b, cos, sin))
                rotate(key, Hk, cache, token, position, half, tx, (a, b, cos, sin))

    return main
