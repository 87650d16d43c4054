"""Softmax over the last dimension."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from lazyops._backends._checks import canonical_dtype, check_tensor, describe, positive_int
from lazyops._backends.triton._common import check_launch_device, interpreting, row_layout

if TYPE_CHECKING:  # the call's protocol is the reference's; imported for type checkers only
    from lazyops._backends.torch.softmax import SoftmaxKernel


@triton.jit(do_not_specialize=["M"])
def _softmax_kernel(
    x_ptr,
    y_ptr,
    M,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    # Rows past M re-read the last row instead of loading a masked row of -inf (whose softmax is NaN); their
    # results are never stored.
    base = tl.minimum(rows, M - 1).to(tl.int64)[:, None] * N
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)[None, :]
        x = tl.load(x_ptr + base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e / tl.sum(e, axis=1)[:, None]
        tl.store(y_ptr + base + cols, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N))
    else:
        # Online softmax: one pass keeps a running maximum and the sum of exponentials scaled to it, lane by lane.
        # Only rows wider than one block come here, so the first block is full and every lane has a finite
        # maximum before a masked (-inf) lane is met.
        lane_max = tl.full([ROWS, BLOCK_N], -float("inf"), tl.float32)
        lane_sum = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
            new_max = tl.maximum(lane_max, x)
            lane_sum = lane_sum * tl.exp(lane_max - new_max) + tl.exp(x - new_max)
            lane_max = new_max
        row_max = tl.max(lane_max, axis=1)[:, None]
        row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=1)[:, None]
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)[None, :]
            x = tl.load(x_ptr + base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - row_max) / row_sum
            tl.store(y_ptr + base + cols, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N))


def softmax_tl(n: int, dtype: torch.dtype | str) -> SoftmaxKernel:
    """Softmax over the last dimension of ``x[M, n]``.

    Returns ``kernel(x[M, n]) -> y[M, n]`` in ``dtype``; the math runs in float32.
    """
    n = positive_int("softmax_tl", "n", n)
    dtype = canonical_dtype("softmax_tl", dtype)
    name = describe("softmax_tl", n=n, dtype=dtype)
    layout = row_layout(n)
    interpret = interpreting(_softmax_kernel)

    def softmax(x: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x, shape=("M", n), dtype=dtype)
        check_launch_device(name, x, interpret=interpret)
        m = x.shape[0]
        y = torch.empty_like(x)
        if m == 0:
            return y
        _softmax_kernel[(triton.cdiv(m, layout.rows),)](
            x, y, m, N=n, BLOCK_N=layout.block_n, ROWS=layout.rows, SINGLE_PASS=layout.single_pass,
            num_warps=layout.num_warps,
        )
        return y

    return softmax
