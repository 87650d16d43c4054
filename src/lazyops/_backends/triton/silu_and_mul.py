"""SiLU-and-mul, the gated activation of SwiGLU MLPs: ``silu(x[:, :n]) * x[:, n:]``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import MIN_PROGRAM_ELEMENTS, launch_device, warps_for
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.silu_and_mul import SiluAndMulConfig, spec

#: An elementwise kernel needs no whole row in one program: the columns are split into blocks of at most this.
MAX_BLOCK_N = 4096


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


@spec.implementation(device_type=launch_device(_silu_and_mul_kernel))
def silu_and_mul_tl(config: SiluAndMulConfig) -> Callable[..., torch.Tensor]:
    n = config.n
    block_n = min(triton.next_power_of_2(n), MAX_BLOCK_N)
    rows = max(1, MIN_PROGRAM_ELEMENTS // block_n)
    num_warps = warps_for(rows * block_n)
    launch = Launcher(_silu_and_mul_kernel, {"N": n, "BLOCK_N": block_n, "ROWS": rows}, num_warps=num_warps)

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]
        y = spec.output(config, x)
        launch((triton.cdiv(m, rows), triton.cdiv(n, block_n)), x, y, m)
        return y

    return silu_and_mul
