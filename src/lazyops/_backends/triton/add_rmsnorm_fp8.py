"""Residual add fused with RMSNorm quantized to float8 (``lazyops.specs.add_rmsnorm_fp8``), as vLLM's
``fused_add_rms_norm_static_fp8_quant``: ``residual += x`` in its dtype, the norm of the float32 sum divided by
the per-tensor scale, saturated to ±448 and converted once.

Rows are indexed by their strides and the result goes into the ``out`` the kernel is handed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import interpreting, launch_device, row_layout
from lazyops._backends.triton._fp8 import to_fp8
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec


@triton.jit(do_not_specialize=["M", "eps", "offset"])
def _add_rmsnorm_fp8_kernel(
    x_ptr,
    residual_ptr,
    w_ptr,
    scale_ptr,
    y_ptr,
    M,
    x_stride,
    residual_stride,
    y_stride,
    eps,
    offset,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    EXACT_ROUNDING: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    # Rows past M re-read the last row; neither the residual nor y is stored for them.
    row = tl.minimum(rows, M - 1).to(tl.int64)[:, None]
    x_row = x_ptr + row * x_stride
    residual_row = residual_ptr + row * residual_stride
    y_row = y_ptr + row * y_stride
    # Read from memory at every launch, never baked in: a CUDA graph replays with the scale as it is then.
    inverse_scale = 1.0 / tl.load(scale_ptr)
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        r = tl.load(residual_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
        total = x + r
        keep = row_ok[:, None] & (cols < N)
        tl.store(residual_row + cols, total.to(residual_ptr.dtype.element_ty), mask=keep)
        rstd = tl.rsqrt(tl.sum(total * total, axis=1) / N + eps)[:, None]
        tl.store(y_row + cols, to_fp8(total * rstd * w, inverse_scale, EXACT_ROUNDING), mask=keep)
    else:
        # The norm is of the float32 sum, not of the rounded residual, so the second pass recomputes the sum from
        # x and the residual as it was; the residual is written only then, after its last read.
        squares = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            r = tl.load(residual_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            squares += (x + r) * (x + r)
        rstd = tl.rsqrt(tl.sum(squares, axis=1) / N + eps)[:, None]
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            r = tl.load(residual_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
            total = x + r
            keep = row_ok[:, None] & (cols < N)
            tl.store(residual_row + cols, total.to(residual_ptr.dtype.element_ty), mask=keep)
            tl.store(y_row + cols, to_fp8(total * rstd * w, inverse_scale, EXACT_ROUNDING), mask=keep)


@spec.implementation(device_type=launch_device(_add_rmsnorm_fp8_kernel), strided_rows=True, writes_out=True)
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., None]:
    n, eps, offset = config.n, config.eps, config.weight_offset
    layout = row_layout(n)
    launch = Launcher(
        _add_rmsnorm_fp8_kernel,
        {
            "N": n,
            "BLOCK_N": layout.block_n,
            "ROWS": layout.rows,
            "SINGLE_PASS": layout.single_pass,
            "EXACT_ROUNDING": interpreting(_add_rmsnorm_fp8_kernel),
        },
        num_warps=layout.num_warps,
    )

    def add_rmsnorm_fp8(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, out: torch.Tensor
    ) -> None:
        m = x.shape[0]
        launch(
            (triton.cdiv(m, layout.rows),),
            x,
            residual,
            weight,
            scale,
            out,
            m,
            x.stride(0),
            residual.stride(0),
            out.stride(0),
            eps,
            offset,
        )

    return add_rmsnorm_fp8
