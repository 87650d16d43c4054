"""SiLU-and-mul, the gated activation of SwiGLU MLPs: ``silu(x[:, :n]) * x[:, n:]``."""

from __future__ import annotations

from collections.abc import Callable

import triton
import triton.language as tl

from lazyops._backends.triton._common import gated_launch, launch_device, program_rows
from lazyops.specs.silu_and_mul import SiluAndMulConfig, spec


@triton.jit(do_not_specialize=["M"])
def _silu_and_mul_kernel(
    x_ptr,
    y_ptr,
    M,
    x_row_stride,
    y_row_stride,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
):
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    keep = (lanes < count)[:, None] & (cols < N)
    x_ptr += first * x_row_stride
    y_ptr += first * y_row_stride
    rows = lanes.to(tl.int64)[:, None]
    gate = tl.load(x_ptr + rows * x_row_stride + cols, mask=keep, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + rows * x_row_stride + N + cols, mask=keep, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + rows * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=keep)


@spec.implementation(device_type=launch_device(_silu_and_mul_kernel), strided_rows=True, writes_out=True)
def silu_and_mul_tl(config: SiluAndMulConfig) -> Callable[..., None]:
    return gated_launch(_silu_and_mul_kernel, config)
