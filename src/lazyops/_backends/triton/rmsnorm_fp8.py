"""RMSNorm quantized to float8 (``lazyops.specs.rmsnorm_fp8``): the norm in float32, divided by the per-tensor
scale, saturated to ±448 and converted once, as vLLM's ``rms_norm_static_fp8_quant``.

Rows are indexed by their strides (views of packed buffers reach the kernel as they are) and the result goes
into the ``out`` the kernel is handed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import interpreting, launch_device, row_layout
from lazyops._backends.triton._fp8 import to_fp8
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.rmsnorm_fp8 import RMSNormFP8Config, spec


@triton.jit(do_not_specialize=["M", "eps", "offset"])
def _rmsnorm_fp8_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    y_ptr,
    M,
    x_stride,
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
    # Rows past M re-read the last row (never stored), so no row needs a row mask on its loads.
    row = tl.minimum(rows, M - 1).to(tl.int64)[:, None]
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    # Read from memory at every launch, never baked in: a CUDA graph replays with the scale as it is then.
    inverse_scale = 1.0 / tl.load(scale_ptr)
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)[:, None]
        y = to_fp8(x * rstd * w, inverse_scale, EXACT_ROUNDING)
        tl.store(y_row + cols, y, mask=row_ok[:, None] & (cols < N))
    else:
        squares = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            squares += x * x
        rstd = tl.rsqrt(tl.sum(squares, axis=1) / N + eps)[:, None]
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
            y = to_fp8(x * rstd * w, inverse_scale, EXACT_ROUNDING)
            tl.store(y_row + cols, y, mask=row_ok[:, None] & (cols < N))


@spec.implementation(device_type=launch_device(_rmsnorm_fp8_kernel), strided_rows=True, writes_out=True)
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., None]:
    n, eps, offset = config.n, config.eps, config.weight_offset
    layout = row_layout(n)
    launch = Launcher(
        _rmsnorm_fp8_kernel,
        {
            "N": n,
            "BLOCK_N": layout.block_n,
            "ROWS": layout.rows,
            "SINGLE_PASS": layout.single_pass,
            "EXACT_ROUNDING": interpreting(_rmsnorm_fp8_kernel),
        },
        num_warps=layout.num_warps,
    )

    def rmsnorm_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        launch((triton.cdiv(m, layout.rows),), x, weight, scale, out, m, x.stride(0), out.stride(0), eps, offset)

    return rmsnorm_fp8
