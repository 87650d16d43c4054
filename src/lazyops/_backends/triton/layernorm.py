"""LayerNorm: ``(x - mean(x)) / sqrt(var(x) + eps) * weight + bias`` over the last dimension, math in float32.

The variance is always taken of centred values, never as ``mean(x**2) - mean(x)**2``: activations off zero mean
(a residual stream often is) would lose to that difference the bits a 16-bit output keeps. A row held in
registers is centred exactly, by its mean, and then squared. A wider row is read in ``LOOP_BLOCK`` chunks: each
chunk's mean and centred sum of squares are exact (the chunk is in registers), and they are merged into the row's
running ones with Chan's parallel update (Welford's, a chunk at a time), which is as stable as two passes over the
row while reading it only once for the statistics, once more to write it (a third read, centring by the finished
mean, is what the textbook two-pass form would cost).

Rows are addressed by their stride, for ``x`` and for ``out`` alike, so views of packed buffers are read and written
as they are, and ``out`` may be ``x`` itself: every element of a row is read before that element is written.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import launch_device, program_rows, row_layout
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.layernorm import LayerNormConfig, spec


@triton.jit(do_not_specialize=["M", "eps"])
def _layernorm_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    M,
    x_row_stride,
    y_row_stride,
    eps,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    row_ok = lanes < count
    # Rows past M re-read the last row (never stored), so no row needs a row mask on its loads.
    row = tl.minimum(lanes, count - 1).to(tl.int64)[:, None]
    x_ptr += first * x_row_stride
    y_ptr += first * y_row_stride
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        in_row = cols < N
        x = tl.load(x_row + cols, mask=in_row, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / N
        centred = tl.where(in_row, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(centred * centred, axis=1) / N + eps)[:, None]
        w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
        y = centred * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & in_row)
    else:
        mean = tl.zeros([ROWS], tl.float32)
        m2 = tl.zeros([ROWS], tl.float32)  # the sum of squared deviations from the running mean
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            in_row = cols < N
            x = tl.load(x_row + cols, mask=in_row, other=0.0).to(tl.float32)
            seen = start * 1.0  # every chunk before this one was full
            count = tl.minimum(N - start, BLOCK_N) * 1.0
            chunk_mean = tl.sum(x, axis=1) / count
            deviation = tl.where(in_row, x - chunk_mean[:, None], 0.0)
            chunk_m2 = tl.sum(deviation * deviation, axis=1)
            total = seen + count
            delta = chunk_mean - mean
            mean += delta * (count / total)
            m2 += chunk_m2 + delta * delta * (seen * count / total)
        rstd = tl.rsqrt(m2 / N + eps)[:, None]
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            in_row = cols < N
            x = tl.load(x_row + cols, mask=in_row, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd * w + b
            tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & in_row)


@spec.implementation(device_type=launch_device(_layernorm_kernel), strided_rows=True, writes_out=True)
def layernorm_tl(config: LayerNormConfig) -> Callable[..., None]:
    eps = config.eps
    layout = row_layout(config.n)
    rows = layout.rows
    launch = Launcher(
        _layernorm_kernel,
        {"N": config.n, "BLOCK_N": layout.block_n, "ROWS": rows, "SINGLE_PASS": layout.single_pass},
        num_warps=layout.num_warps,
    )

    def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        launch((-(-m // rows),), x, weight, bias, out, m, x.stride(0), out.stride(0), eps)

    return layernorm
