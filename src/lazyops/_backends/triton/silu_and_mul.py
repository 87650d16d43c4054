"""SiLU-and-mul, the gated activation of SwiGLU MLPs: ``silu(x[:, :n]) * x[:, n:]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from lazyops._backends._checks import canonical_dtype, check_tensor, describe, positive_int
from lazyops._backends.triton._common import MIN_PROGRAM_ELEMENTS, check_launch_device, interpreting, warps_for

#: An elementwise kernel needs no whole row in one program: the columns are split into blocks of at most this.
MAX_BLOCK_N = 4096

if TYPE_CHECKING:  # the call's protocol is the reference's; imported for type checkers only
    from lazyops._backends.torch.silu_and_mul import SiluAndMulKernel


@triton.jit(do_not_specialize=["M"])
def _silu_and_mul_kernel(
    x_ptr,
    y_ptr,
    M,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    keep = (rows < M)[:, None] & (cols < N)
    rows = rows.to(tl.int64)[:, None]
    gate = tl.load(x_ptr + rows * (2 * N) + cols, mask=keep, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + rows * (2 * N) + N + cols, mask=keep, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + rows * N + cols, y.to(y_ptr.dtype.element_ty), mask=keep)


def silu_and_mul_tl(n: int, dtype: torch.dtype | str) -> SiluAndMulKernel:
    """The gate of a SwiGLU MLP: ``x[M, 2n]`` holds the gate then the up projection.

    Returns ``kernel(x[M, 2n]) -> y[M, n] = silu(x[:, :n]) * x[:, n:]`` in ``dtype``; the math runs in float32.
    """
    n = positive_int("silu_and_mul_tl", "n", n)
    dtype = canonical_dtype("silu_and_mul_tl", dtype)
    name = describe("silu_and_mul_tl", n=n, dtype=dtype)
    block_n = min(triton.next_power_of_2(n), MAX_BLOCK_N)
    rows = max(1, MIN_PROGRAM_ELEMENTS // block_n)
    num_warps = warps_for(rows * block_n)
    interpret = interpreting(_silu_and_mul_kernel)

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x, shape=("M", 2 * n), dtype=dtype)
        check_launch_device(name, x, interpret=interpret)
        m = x.shape[0]
        y = torch.empty((m, n), dtype=dtype, device=x.device)
        if m == 0:
            return y
        grid = (triton.cdiv(m, rows), triton.cdiv(n, block_n))
        _silu_and_mul_kernel[grid](x, y, m, N=n, BLOCK_N=block_n, ROWS=rows, num_warps=num_warps)
        return y

    return silu_and_mul
