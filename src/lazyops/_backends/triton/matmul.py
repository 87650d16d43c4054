"""Matrix product ``a[M, k] @ b[k, n]`` with float32 accumulation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import interpreting, launch_device
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.matmul import MatmulConfig, spec


@triton.jit(do_not_specialize=["M"])
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N: tl.constexpr,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    # Grouped ordering: GROUP_M row-blocks of c are walked column by column, so the programs running together
    # share both their a rows and their b columns in L2.
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(M, BLOCK_M)
    blocks_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * blocks_n
    first_m = (pid // in_group) * GROUP_M
    group_m = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Edge tiles wrap around to valid rows and columns instead of masking every load; what they compute there is
    # never stored.
    a_rows = (rows % M).to(tl.int64)
    b_cols = cols % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * K + ks[None, :]
    b_ptrs = b_ptr + ks[:, None] * N + b_cols[None, :]

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - step * BLOCK_K
            a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        if UPCAST:
            # Triton's interpreter multiplies bfloat16 tiles as their raw bits (it stores them as uint16), so
            # there, and only there, the tiles go to tl.dot as float32: the products of 16-bit values are exact
            # in float32, so the result is the same as a GPU's.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE:  # noqa: SIM108 - a constexpr branch, compiled away; statements keep each arm's comment beside it
            # float32 inputs: a GPU's tl.dot would otherwise round them to TF32 (10 mantissa bits).
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N

    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows < M)[:, None] & (cols < N)[None, :])


@dataclass(frozen=True)
class Tiling:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


#: tl.dot needs every tile side to be at least 16.
MIN_TILE = 16


def tiling(m: int, n: int, k: int, dtype: torch.dtype) -> Tiling:
    """The tiles for a product of ``[m, k] @ [k, n]``.

    ``m`` is bucketed (at most 16, at most 256, more), so a kernel compiles at most three variants however its
    token count varies. The buckets keep enough programs to fill the GPU's 132 multiprocessors: at 16 tokens or
    fewer the product is a stream over the weight, cut into narrow column tiles (``mma``, since Hopper's
    ``wgmma`` needs 64 rows); up to 256 tokens 64x64 tiles (``wgmma`` for 16-bit types); beyond, 128x128 tiles.
    float32 runs on the FMA units (IEEE precision), where smaller tiles keep the registers in bounds. Every
    tile, times its pipeline stages, fits a Hopper's shared memory.
    """
    wide = dtype != torch.float32
    if m <= 16:
        config = Tiling(16, 32, 128 if wide else 64, 4, 4)
    elif m <= 256:
        config = Tiling(64, 64, 64 if wide else 32, 4, 4)
    elif wide:
        config = Tiling(128, 128, 64, 8, 4)
    else:
        config = Tiling(128, 64, 32, 8, 3)
    return Tiling(
        block_m=config.block_m,
        block_n=min(config.block_n, max(MIN_TILE, triton.next_power_of_2(n))),
        block_k=min(config.block_k, max(MIN_TILE, triton.next_power_of_2(k))),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )


@spec.implementation(device_type=launch_device(_matmul_kernel))
def matmul_tl(config: MatmulConfig) -> Callable[..., torch.Tensor]:
    n, k, dtype = config.n, config.k, config.dtype
    upcast = interpreting(_matmul_kernel) and dtype != torch.float32
    #: one launcher per tiling (at most three: the token count is bucketed)
    launchers: dict[Tiling, Launcher] = {}

    def launcher(tiles: Tiling) -> Launcher:
        constexprs = {
            "N": n,
            "K": k,
            "BLOCK_M": tiles.block_m,
            "BLOCK_N": tiles.block_n,
            "BLOCK_K": tiles.block_k,
            "GROUP_M": 8,
            "EVEN_K": k % tiles.block_k == 0,
            "UPCAST": upcast,
            "IEEE": dtype == torch.float32 or upcast,
        }
        return Launcher(_matmul_kernel, constexprs, num_warps=tiles.num_warps, num_stages=tiles.num_stages)

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m = a.shape[0]
        c = spec.output(config, a, b)
        tiles = tiling(m, n, k, dtype)
        launch = launchers.get(tiles)
        if launch is None:
            launch = launchers[tiles] = launcher(tiles)
        launch((triton.cdiv(m, tiles.block_m) * triton.cdiv(n, tiles.block_n),), a, b, c, m)
        return c

    return matmul
