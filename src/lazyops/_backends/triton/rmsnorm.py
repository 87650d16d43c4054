"""RMSNorm: ``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import launch_device, row_layout
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.rmsnorm import RMSNormConfig, spec


@triton.jit(do_not_specialize=["M", "eps", "offset"])
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
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
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    # Rows past M re-read the last row (never stored), so no row needs a row mask on its loads.
    row = tl.minimum(rows, M - 1).to(tl.int64)[:, None]
    x_base = row * x_row_stride
    y_base = row * y_row_stride
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32) + offset
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)[:, None]
        tl.store(y_ptr + y_base + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N))
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
            tl.store(
                y_ptr + y_base + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N)
            )


@spec.implementation(device_type=launch_device(_rmsnorm_kernel), strided_rows=True, writes_out=True)
def rmsnorm_tl(config: RMSNormConfig) -> Callable[..., None]:
    n, eps, offset = config.n, config.eps, config.weight_offset
    layout = row_layout(n)
    launch = Launcher(
        _rmsnorm_kernel,
        {"N": n, "BLOCK_N": layout.block_n, "ROWS": layout.rows, "SINGLE_PASS": layout.single_pass},
        num_warps=layout.num_warps,
    )

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        launch((triton.cdiv(m, layout.rows),), x, weight, out, m, x.stride(0), out.stride(0), eps, offset)

    return rmsnorm
