"""RMSNorm quantized to float8 in TileLang (``lazyops.specs.rmsnorm_fp8``): the norm in float32, divided by the
per-tensor scale, saturated to ±448 and converted once, as vLLM's ``rms_norm_static_fp8_quant``."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import RowPlan, plan_rows
from lazyops._backends.tilelang._runtime import F32, aligned, compiled, tl_dtype
from lazyops.specs.rmsnorm_fp8 import FP8_MAX, RMSNormFP8Config, spec

#: TileLang's name for ``torch.float8_e4m3fn`` (its ``float8_e4m3`` is the same format on NVIDIA, but says less).
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


def programs(config: RMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    return {
        "main": lambda: rmsnorm_fp8_program(
            config.n,
            tl_dtype(config.dtype),
            config.eps,
            weight_dtype=tl_dtype(config.weight_dtype),
            offset=config.weight_offset,
        )
    }


@spec.implementation(device_type="cuda")
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., torch.Tensor]:
    kernel = compiled(config.label, programs(config))["main"]

    def rmsnorm_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        y = spec.output(config, x, weight, scale)
        kernel(aligned(x), aligned(weight), aligned(scale), y)
        return y

    return rmsnorm_fp8
