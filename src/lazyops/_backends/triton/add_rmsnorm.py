"""Residual add fused with RMSNorm, as in vLLM's ``fused_add_rms_norm``, and its float8 form.

One kernel serves ``add_rmsnorm_tl`` and ``add_rmsnorm_fp8_tl`` (``lazyops.specs.add_rmsnorm_fp8``, vLLM's
``fused_add_rms_norm_static_fp8_quant``): ``residual += x`` in its dtype, then the norm of the float32 sum, stored
rounded to the activation dtype or (``QUANTIZE``) divided by the per-tensor scale, saturated to ±448 and converted
to float8 once (``_fp8.to_output``). Rows are indexed by their strides and the result goes into the ``out`` the
kernel is handed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import interpreting, launch_device, program_rows, row_layout
from lazyops._backends.triton._fp8 import to_output
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.add_rmsnorm import AddRMSNormConfig, spec


@triton.jit(do_not_specialize=["M", "eps", "offset"])
def _add_rmsnorm_kernel(
    x_ptr,
    residual_ptr,
    w_ptr,
    scale_ptr,
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
    QUANTIZE: tl.constexpr,
    EXACT_ROUNDING: tl.constexpr,
):
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    row_ok = lanes < count
    # Rows past M re-read the last row; neither the residual nor y is stored for them.
    row = tl.minimum(lanes, count - 1).to(tl.int64)[:, None]
    x_ptr += first * x_row_stride
    residual_ptr += first * residual_row_stride
    y_ptr += first * y_row_stride
    x_base = row * x_row_stride
    residual_base = row * residual_row_stride
    y_base = row * y_row_stride
    inverse_scale = 1.0
    if QUANTIZE:
        # Read from memory at every launch, never baked in: a CUDA graph replays with the scale as it is then.
        inverse_scale = 1.0 / tl.load(scale_ptr)
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
        r = tl.load(residual_ptr + residual_base + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
        total = x + r
        keep = row_ok[:, None] & (cols < N)
        tl.store(residual_ptr + residual_base + cols, total.to(residual_ptr.dtype.element_ty), mask=keep)
        rstd = tl.rsqrt(tl.sum(total * total, axis=1) / N + eps)[:, None]
        y = to_output(total * rstd * w, y_ptr, inverse_scale, QUANTIZE, EXACT_ROUNDING)
        tl.store(y_ptr + y_base + cols, y, mask=keep)
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
            y = to_output(total * rstd * w, y_ptr, inverse_scale, QUANTIZE, EXACT_ROUNDING)
            tl.store(y_ptr + y_base + cols, y, mask=keep)


def add_norm_launch(config: Any, *, quantize: bool) -> Callable[..., None]:
    """The launch for ``config`` (an add_rmsnorm or add_rmsnorm_fp8 configuration): ``launch(x, residual, weight,
    scale, out)`` when quantizing, else ``launch(x, residual, weight, out)``. Each is the closure the kernel calls,
    one frame deep."""
    n, eps, offset = config.n, config.eps, config.weight_offset
    layout = row_layout(n)
    rows = layout.rows
    launch = Launcher(
        _add_rmsnorm_kernel,
        {
            "N": n,
            "BLOCK_N": layout.block_n,
            "ROWS": rows,
            "SINGLE_PASS": layout.single_pass,
            "QUANTIZE": quantize,
            "EXACT_ROUNDING": quantize and interpreting(_add_rmsnorm_kernel),
        },
        num_warps=layout.num_warps,
    )

    def add_rmsnorm_fp8(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, out: torch.Tensor
    ) -> None:
        m = x.shape[0]
        strides = (x.stride(0), residual.stride(0), out.stride(0))
        launch((-(-m // rows),), x, residual, weight, scale, out, m, *strides, eps, offset)

    def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        strides = (x.stride(0), residual.stride(0), out.stride(0))
        # no scale: the weight stands in for the pointer, never read
        launch((-(-m // rows),), x, residual, weight, weight, out, m, *strides, eps, offset)

    return add_rmsnorm_fp8 if quantize else add_rmsnorm


@spec.implementation(device_type=launch_device(_add_rmsnorm_kernel), strided_rows=True, writes_out=True)
def add_rmsnorm_tl(config: AddRMSNormConfig) -> Callable[..., None]:
    return add_norm_launch(config, quantize=False)  # launch(x, residual, weight, out)
