"""RMSNorm: ``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension, and its float8 form.

One kernel serves ``rmsnorm_tl`` and ``rmsnorm_fp8_tl`` (``lazyops.specs.rmsnorm_fp8``, vLLM's
``rms_norm_static_fp8_quant``): they differ only in how the float32 result is stored (``QUANTIZE``: divided by the
per-tensor scale, saturated to ±448, converted once; see ``_fp8.to_output``). Rows are indexed by their strides
(views of packed buffers reach the kernel as they are) and the result goes into the ``out`` it is handed.
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
from lazyops.specs.rmsnorm import RMSNormConfig, spec


@triton.jit(do_not_specialize=["M", "eps", "offset"])
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    y_ptr,
    M,
    x_row_stride,
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
    # Rows past M re-read the last row (never stored), so no row needs a row mask on its loads.
    row = tl.minimum(lanes, count - 1).to(tl.int64)[:, None]
    x_ptr += first * x_row_stride
    y_ptr += first * y_row_stride
    x_base = row * x_row_stride
    y_base = row * y_row_stride
    inverse_scale = 1.0
    if QUANTIZE:
        # Read from memory at every launch, never baked in: a CUDA graph replays with the scale as it is then.
        inverse_scale = 1.0 / tl.load(scale_ptr)
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)[:, None]
        y = to_output(x * rstd * w, y_ptr, inverse_scale, QUANTIZE, EXACT_ROUNDING)
        tl.store(y_ptr + y_base + cols, y, mask=row_ok[:, None] & (cols < N))
    else:
        # y may be x itself (out=x): the first pass only reads, the second reads each block before writing it.
        squares = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
            squares += x * x
        rstd = tl.rsqrt(tl.sum(squares, axis=1) / N + eps)[:, None]
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
            y = to_output(x * rstd * w, y_ptr, inverse_scale, QUANTIZE, EXACT_ROUNDING)
            tl.store(y_ptr + y_base + cols, y, mask=row_ok[:, None] & (cols < N))


def norm_launch(config: Any, *, quantize: bool) -> Callable[..., None]:
    """The launch for ``config`` (an rmsnorm or rmsnorm_fp8 configuration): ``launch(x, weight, scale, out)`` when
    quantizing, else ``launch(x, weight, out)``. Each is the closure the kernel calls, one frame deep."""
    n, eps, offset = config.n, config.eps, config.weight_offset
    layout = row_layout(n)
    rows = layout.rows
    # A float8 output takes half the warps (4 for rows of 4096: 32 elements a thread), measured faster on an H200
    # where a 16-bit output's rate barely moves with the warps (docs/decisions/006-row-kernel-layouts.md).
    warps = max(4, layout.num_warps // 2) if quantize else layout.num_warps
    launch = Launcher(
        _rmsnorm_kernel,
        {
            "N": n,
            "BLOCK_N": layout.block_n,
            "ROWS": rows,
            "SINGLE_PASS": layout.single_pass,
            "QUANTIZE": quantize,
            "EXACT_ROUNDING": quantize and interpreting(_rmsnorm_kernel),
        },
        num_warps=warps,
    )

    def rmsnorm_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        launch((-(-m // rows),), x, weight, scale, out, m, x.stride(0), out.stride(0), eps, offset)

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        # no scale: the weight stands in for the pointer, never read
        launch((-(-m // rows),), x, weight, weight, out, m, x.stride(0), out.stride(0), eps, offset)

    return rmsnorm_fp8 if quantize else rmsnorm


@spec.implementation(device_type=launch_device(_rmsnorm_kernel), strided_rows=True, writes_out=True)
def rmsnorm_tl(config: RMSNormConfig) -> Callable[..., None]:
    return norm_launch(config, quantize=False)  # launch(x, weight, out)
