"""Residual add fused with RMSNorm, as in vLLM's ``fused_add_rms_norm``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import launch_device, row_layout
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.add_rmsnorm import AddRMSNormConfig, spec


@triton.jit(do_not_specialize=["M", "eps", "offset"])
def _add_rmsnorm_kernel(
    x_ptr,
    residual_ptr,
    w_ptr,
    y_ptr,
    M,
    x_row_stride,
    residual_row_stride,
    y_row_stride,
    eps,
    offset,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    # Rows past M re-read the last row; neither the residual nor y is stored for them.
    row = tl.minimum(rows, M - 1).to(tl.int64)[:, None]
    x_base = row * x_row_stride
    residual_base = row * residual_row_stride
    y_base = row * y_row_stride
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
        r = tl.load(residual_ptr + residual_base + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
        total = x + r
        keep = row_ok[:, None] & (cols < N)
        tl.store(residual_ptr + residual_base + cols, total.to(residual_ptr.dtype.element_ty), mask=keep)
        rstd = tl.rsqrt(tl.sum(total * total, axis=1) / N + eps)[:, None]
        tl.store(y_ptr + y_base + cols, (total * rstd * w).to(y_ptr.dtype.element_ty), mask=keep)
    else:
        # The norm is of the float32 sum, not of the rounded residual, so the second pass recomputes the sum from
        # x and the residual as it was; the residual is written only then, after its last read. So is y, which may
        # be x itself (out=x): each block is read before it is written.
        squares = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
            r = tl.load(residual_ptr + residual_base + cols, mask=cols < N, other=0.0).to(tl.float32)
            squares += (x + r) * (x + r)
        rstd = tl.rsqrt(tl.sum(squares, axis=1) / N + eps)[:, None]
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
            r = tl.load(residual_ptr + residual_base + cols, mask=cols < N, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
            total = x + r
            keep = row_ok[:, None] & (cols < N)
            tl.store(residual_ptr + residual_base + cols, total.to(residual_ptr.dtype.element_ty), mask=keep)
            tl.store(y_ptr + y_base + cols, (total * rstd * w).to(y_ptr.dtype.element_ty), mask=keep)


@spec.implementation(device_type=launch_device(_add_rmsnorm_kernel), strided_rows=True, writes_out=True)
def add_rmsnorm_tl(config: AddRMSNormConfig) -> Callable[..., None]:
    n, eps, offset = config.n, config.eps, config.weight_offset
    layout = row_layout(n)
    launch = Launcher(
        _add_rmsnorm_kernel,
        {"N": n, "BLOCK_N": layout.block_n, "ROWS": layout.rows, "SINGLE_PASS": layout.single_pass},
        num_warps=layout.num_warps,
    )

    def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        strides = (x.stride(0), residual.stride(0), out.stride(0))
        launch((triton.cdiv(m, layout.rows),), x, residual, weight, out, m, *strides, eps, offset)

    return add_rmsnorm
