"""Residual add fused with RMSNorm in TileLang, as vLLM's ``fused_add_rms_norm``."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T

from lazyops._backends.tilelang._fp8 import dynamic_store, scale_tensor
from lazyops._backends.tilelang._rows import RowPlan, plan_rows, vector_elements
from lazyops._backends.tilelang._runtime import F32, FP8, INDEX, compiled, launch_out_of_place, tl_dtype
from lazyops._backends.tilelang.rmsnorm import inverse_rms, weighted
from lazyops.specs.add_rmsnorm import AddRMSNormConfig, spec


def add_rmsnorm_program(
    n: int,
    dtype: str,
    eps: float,
    plan: RowPlan | None = None,
    weight_dtype: str | None = None,
    offset: float = 0.0,
    out_dtype: str | None = None,
    dynamic: tuple[int, bool] | None = None,
) -> Any:
    """The TileLang program ``main(x[M, n], residual[M, n], weight[n], y[M, n])``; it rewrites ``residual``.

    The norm is taken of the float32 sum, not of the sum rounded to ``dtype`` that goes back into ``residual``.
    With ``out_dtype=FP8`` it is ``main(x, residual, weight, scale[1], y)`` (``add_rmsnorm_fp8_tl``): the norm
    divided by ``scale[0]`` and converted to float8 with the hardware's saturation, as in
    :func:`lazyops._backends.tilelang.rmsnorm.rmsnorm_program`; with ``dynamic=(group_size, ue8m0)`` as well
    (rows held in registers) it is ``main(x, residual, weight, scale[M, n // group_size], y)``, the scales computed
    from the float32 norm in the same pass (:func:`lazyops._backends.tilelang._fp8.dynamic_store`).
    """
    plan = plan or plan_rows(n, dtype)
    weight_dtype = weight_dtype or dtype
    out_dtype = out_dtype or dtype
    rows, cols, chunks = plan.block_rows, plan.block_cols, plan.chunks
    M = T.dynamic("M", INDEX)
    # Row strides: multiples of `vec` elements (the launch copies other layouts), so rows take 16-byte vectors.
    x_stride, residual_stride, y_stride = T.dynamic("x_stride, residual_stride, y_stride", INDEX)
    vec = vector_elements(n, dtype)
    quantized = dynamic is not None
    dynamic_scales: Any = None
    if dynamic is not None:
        if not (plan.resident and out_dtype == FP8):  # the factory's supports= declines the rest before this
            raise ValueError("dynamic scales need rows held in registers and a float8 output")
        dynamic_scales = dynamic_store(M, rows, cols, n, dynamic[0], offset, dynamic[1])

    @T.macro
    def resident(x: T.Tensor, residual: T.Tensor, weight: T.Tensor, scale: Any, y: T.Tensor):
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
                factor[i] = inverse_rms(factor[i], n, eps, None if quantized else scale)
            if quantized:
                dynamic_scales(total, factor, weight, scale, y, block)
            else:
                for i, j in T.Parallel(rows, cols):
                    row = block * rows + i
                    if row < M and j < n:
                        y[row, j] = weighted(total[i, j], factor[i], weight[j], offset, out_dtype)

    # Streamed rows: the sum is formed twice from the inputs, and residual is written only in the second pass,
    # so the norm still sees the float32 sum rather than what was rounded back into residual.
    @T.macro
    def streamed(x: T.Tensor, residual: T.Tensor, weight: T.Tensor, scale: Any, y: T.Tensor):
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
                factor[i] = inverse_rms(factor[i], n, eps, scale)
            for c in T.serial(chunks):
                for i, j in T.Parallel(1, cols):
                    col = c * cols + j
                    if col < n:
                        value = T.cast(x[row, col], F32) + T.cast(residual[row, col], F32)
                        residual[row, col] = T.cast(value, dtype)
                        y[row, col] = weighted(value, factor[i], weight[col], offset, out_dtype)

    body = resident if plan.resident else streamed
    if quantized:

        @T.prim_func
        def main(
            x: T.StridedTensor((M, n), (x_stride, 1), dtype),
            residual: T.StridedTensor((M, n), (residual_stride, 1), dtype),
            weight: T.Tensor((n,), weight_dtype),
            scale: scale_tensor(M, n // dynamic[0]),
            y: T.StridedTensor((M, n), (y_stride, 1), out_dtype),
        ):
            T.assume(x_stride % vec == 0)
            T.assume(residual_stride % vec == 0)
            T.assume(y_stride % vec == 0)
            body(x, residual, weight, scale, y)

        return main

    if out_dtype != FP8:  # the norm in its own dtype, or in float32 (the fp8 norms' dynamic scales)

        @T.prim_func
        def main(
            x: T.StridedTensor((M, n), (x_stride, 1), dtype),
            residual: T.StridedTensor((M, n), (residual_stride, 1), dtype),
            weight: T.Tensor((n,), weight_dtype),
            y: T.StridedTensor((M, n), (y_stride, 1), out_dtype),
        ):
            T.assume(x_stride % vec == 0)
            T.assume(residual_stride % vec == 0)
            T.assume(y_stride % vec == 0)
            body(x, residual, weight, None, y)

        return main

    @T.prim_func
    def main(
        x: T.StridedTensor((M, n), (x_stride, 1), dtype),
        residual: T.StridedTensor((M, n), (residual_stride, 1), dtype),
        weight: T.Tensor((n,), weight_dtype),
        scale: T.Tensor((1,), F32),
        y: T.StridedTensor((M, n), (y_stride, 1), out_dtype),
    ):
        T.assume(x_stride % vec == 0)
        T.assume(residual_stride % vec == 0)
        T.assume(y_stride % vec == 0)
        body(x, residual, weight, scale, y)

    return main


def programs(
    config: AddRMSNormConfig, out_dtype: str | None = None, dynamic: tuple[int, bool] | None = None
) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant; ``out_dtype=FP8`` for the float8 form
    (``dynamic``: its scales computed in the same pass)."""
    return {
        "main": lambda: add_rmsnorm_program(
            config.n,
            tl_dtype(config.dtype),
            config.eps,
            weight_dtype=tl_dtype(config.weight_dtype),
            offset=config.weight_offset,
            out_dtype=out_dtype,
            dynamic=dynamic,
        )
    }


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True)
def add_rmsnorm_tl(config: AddRMSNormConfig) -> Callable[..., None]:
    # launch(x, residual, weight, out): residual is written in place, out written.
    kernel = compiled(config.label, programs(config))["main"]
    return launch_out_of_place(spec, kernel, vector_elements(config.n, tl_dtype(config.dtype)), written=(1,))
