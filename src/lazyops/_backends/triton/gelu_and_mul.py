"""GELU-and-mul, the gate of GeGLU MLPs: ``gelu(x[:, :n]) * x[:, n:]``, exact (erf) or tanh-approximated."""

from __future__ import annotations

from collections.abc import Callable

import triton
import triton.language as tl

from lazyops._backends.triton._common import gated_launch, launch_device
from lazyops.specs.gelu_and_mul import GeluAndMulConfig, spec

#: Triton kernels read module globals only when they are constexpr.
SQRT_HALF = tl.constexpr(0.7071067811865476)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)


@triton.jit(do_not_specialize=["M"])
def _gelu_and_mul_kernel(
    x_ptr,
    y_ptr,
    M,
    x_row_stride,
    y_row_stride,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    TANH: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    keep = (rows < M)[:, None] & (cols < N)
    rows = rows.to(tl.int64)[:, None]
    gate = tl.load(x_ptr + rows * x_row_stride + cols, mask=keep, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + rows * x_row_stride + N + cols, mask=keep, other=0.0).to(tl.float32)
    if TANH:
        inner = SQRT_2_OVER_PI * (gate + 0.044715 * gate * gate * gate)
        # tanh(u) = 1 - 2 / (exp(2u) + 1), with u capped at 20, past which tanh is 1 in float32: no overflow.
        gelu = 0.5 * gate * (2.0 - 2.0 / (tl.exp(2.0 * tl.minimum(inner, 20.0)) + 1.0))
    else:
        gelu = 0.5 * gate * (1.0 + tl.math.erf(gate * SQRT_HALF))
    tl.store(y_ptr + rows * y_row_stride + cols, (gelu * up).to(y_ptr.dtype.element_ty), mask=keep)


@spec.implementation(device_type=launch_device(_gelu_and_mul_kernel), strided_rows=True, writes_out=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., None]:
    return gated_launch(_gelu_and_mul_kernel, config, TANH=config.approximate == "tanh")
