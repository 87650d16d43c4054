"""Softmax over the last dimension."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import launch_device, program_rows, row_layout
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.softmax import SoftmaxConfig, spec


@triton.jit
def _nan_if_all_masked(row_max):
    # A row that is all -inf has the softmax NaN (as torch.softmax gives). Taking NaN as its maximum gives it
    # quietly: x - max would otherwise be -inf - -inf, an invalid operation, which Triton's interpreter (numpy)
    # reports as a RuntimeWarning in the caller's test run. One select per row.
    return tl.where(row_max == -float("inf"), float("nan"), row_max)


@triton.jit(do_not_specialize=["M"])
def _softmax_kernel(
    x_ptr,
    y_ptr,
    M,
    x_row_stride,
    y_row_stride,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    row_ok = lanes < count
    # Rows past M re-read the last row instead of loading a masked row of -inf (whose softmax is NaN); their
    # results are never stored.
    row = tl.minimum(lanes, count - 1).to(tl.int64)[:, None]
    x_ptr += first * x_row_stride
    y_ptr += first * y_row_stride
    x_base = row * x_row_stride
    y_base = row * y_row_stride
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - _nan_if_all_masked(tl.max(x, axis=1)[:, None]))
        y = e / tl.sum(e, axis=1)[:, None]
        tl.store(y_ptr + y_base + cols, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N))
    else:
        # Online softmax: one pass keeps a running maximum and the sum of exponentials scaled to it, lane by lane.
        # A lane may see only -inf so far (a masked logit, or the padding past N): its maximum is then -inf, and
        # rescaling against it would compute exp(-inf - -inf) = NaN. Such a lane holds a sum of 0, so it rescales
        # against 0 instead, which keeps that 0. A row that is all -inf still ends as NaN, as torch.softmax gives.
        lane_max = tl.full([ROWS, BLOCK_N], -float("inf"), tl.float32)
        lane_sum = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
            new_max = tl.maximum(lane_max, x)
            pivot = tl.where(new_max == -float("inf"), 0.0, new_max)
            lane_sum = lane_sum * tl.exp(lane_max - pivot) + tl.exp(x - pivot)
            lane_max = new_max
        row_max = _nan_if_all_masked(tl.max(lane_max, axis=1)[:, None])
        row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=1)[:, None]
        # y may be x itself (out=x): the first pass only read; this one reads each block before writing it.
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + x_base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - row_max) / row_sum
            tl.store(y_ptr + y_base + cols, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N))


@spec.implementation(device_type=launch_device(_softmax_kernel), strided_rows=True, writes_out=True)
def softmax_tl(config: SoftmaxConfig) -> Callable[..., None]:
    n = config.n
    layout = row_layout(n)
    rows = layout.rows
    launch = Launcher(
        _softmax_kernel,
        {"N": n, "BLOCK_N": layout.block_n, "ROWS": rows, "SINGLE_PASS": layout.single_pass},
        num_warps=layout.num_warps,
    )

    def softmax(x: torch.Tensor, out: torch.Tensor) -> None:
        m = x.shape[0]
        launch((-(-m // rows),), x, out, m, x.stride(0), out.stride(0))

    return softmax
