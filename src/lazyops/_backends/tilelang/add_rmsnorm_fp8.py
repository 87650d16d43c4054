"""Residual add fused with RMSNorm quantized to float8 in TileLang (``lazyops.specs.add_rmsnorm_fp8``), as vLLM's
``fused_add_rms_norm_static_fp8_quant``."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import RowPlan, plan_rows
from lazyops._backends.tilelang._runtime import F32, compiled, launch_with_copies, tl_dtype
from lazyops._backends.tilelang.rmsnorm_fp8 import FP8, saturated
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec


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


def programs(config: AddRMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    return {
        "main": lambda: add_rmsnorm_fp8_program(
            config.n,
            tl_dtype(config.dtype),
            config.eps,
            weight_dtype=tl_dtype(config.weight_dtype),
            offset=config.weight_offset,
        )
    }


@spec.implementation(device_type="cuda")
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., torch.Tensor]:
    kernel = compiled(config.label, programs(config))["main"]

    def add_rmsnorm_fp8(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> torch.Tensor:
        y = spec.output(config, x, residual, weight, scale)
        launch_with_copies(kernel, (x, residual, weight, scale, y), written=(1,))
        return y

    return add_rmsnorm_fp8
