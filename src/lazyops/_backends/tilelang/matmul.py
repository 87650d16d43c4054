"""Matrix product ``a[M, k] @ b[k, n]`` in TileLang: a tiled, software-pipelined GEMM with float32 accumulation.

On Hopper the half-precision kernel lowers to TMA loads into shared memory (zero-filled past the matrix edges),
a producer warpgroup feeding ``wgmma`` consumers through mbarriers, and predicated stores for the ragged edges;
where a row stride is not a multiple of 16 bytes (TMA's requirement), TileLang falls back to predicated copies
by itself. Float32 inputs take a CUDA-core (FFMA) path instead: TileLang's tensor-core GEMM would round float32
operands to TF32 (10-bit mantissa, unit roundoff 2**-11 against float32's 2**-24), far coarser than the float32
product the reference computes and that ``torch.matmul`` gives by default. The FFMA path runs at about 35
TFLOP/s on an H200 (cuBLAS's float32: 51).
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._runtime import F32, aligned, compiled, require_gpu, tl_dtype
from lazyops.specs.matmul import MatmulConfig, spec


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int

    def tiles(self, m: int, n: int) -> int:
        return -(-m // self.block_m) * -(-n // self.block_n)

    def shared_bytes(self, itemsize: int) -> int:
        return (self.block_m + self.block_n) * self.block_k * itemsize * self.stages


# Measured on an H200 (bf16, [M, 4096] x [4096, 4096]; benchmarks/tilelang_tune.py): 128x256 tiles reach
# 625-636 TFLOP/s from M = 1024 (128x128: 477-497); for M <= 128 the 64x64x128 tile is fastest (180 TFLOP/s at
# M = 128, 24 us at M = 1), since it spreads a decode-sized problem over more SMs.
LARGE = Tile(128, 256, 64, 3, 256)
#: For GPUs with less than LARGE's 144 KiB of shared memory per block (sm_86, sm_89).
LARGE_LOW_SMEM = Tile(128, 128, 64, 3, 256)
SMALL = Tile(64, 64, 128, 3, 128)
#: Float32 on CUDA cores: a 128x128 tile gives each of 256 threads a 16x4 block of accumulators.
LARGE_F32 = Tile(128, 128, 16, 3, 256)
SMALL_F32 = Tile(64, 64, 16, 3, 128)


def tiles_for(dtype: str, shared_memory: int = 227 * 1024) -> tuple[Tile, Tile]:
    """The (small, large) tile shapes for ``dtype`` on a GPU with ``shared_memory`` bytes per block."""
    if dtype == F32:
        return SMALL_F32, LARGE_F32
    large = LARGE if LARGE.shared_bytes(2) <= shared_memory else LARGE_LOW_SMEM
    return SMALL, large


def use_large(large: Tile, m: int, n: int, sm_count: int) -> bool:
    """Large tiles once they alone give every other SM a block: below that, small tiles spread the work wider."""
    return large.tiles(m, n) >= sm_count // 2


def matmul_program(n: int, k: int, dtype: str, tile: Tile) -> Any:
    """The TileLang program ``main(a[M, k], b[k, n], c[M, n])`` for a dynamic ``M``, one ``tile`` shape."""
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    M = T.dynamic("M")
    tensor_cores = dtype != F32

    @T.prim_func
    def main(a: T.Tensor((M, k), dtype), b: T.Tensor((k, n), dtype), c: T.Tensor((M, n), dtype)):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(M, bm), threads=tile.threads) as (bx, by):
            a_tile = T.alloc_shared((bm, bk), dtype)
            b_tile = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), F32)
            # Neighbouring blocks share panels of a and b, so more of them hit in L2.
            T.use_swizzle(panel_size=8)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=tile.stages):
                T.copy(a[by * bm, ko * bk], a_tile)
                T.copy(b[ko * bk, bx * bn], b_tile)
                if tensor_cores:
                    T.gemm(a_tile, b_tile, acc)
                else:
                    for kk in T.serial(bk):
                        for i, j in T.Parallel(bm, bn):
                            acc[i, j] += a_tile[i, kk] * b_tile[kk, j]
            T.copy(acc, c[by * bm, bx * bn])

    return main


def programs(config: MatmulConfig, shared_memory: int | None = None) -> dict[tuple[str, Tile], Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant: a small and a large tile."""
    small, large = (
        tiles_for(tl_dtype(config.dtype), shared_memory) if shared_memory else tiles_for(tl_dtype(config.dtype))
    )
    n, k, dtype = config.n, config.k, config.dtype
    return {("small", small): _builder(n, k, dtype, small), ("large", large): _builder(n, k, dtype, large)}


@spec.implementation(device_type="cuda")
def matmul_tl(config: MatmulConfig) -> Callable[..., torch.Tensor]:
    # Two tile shapes are compiled, sized for the current GPU; each call takes the large one when it yields
    # enough tiles to keep the GPU busy.
    n, dtype = config.n, config.dtype
    require_gpu(config.label)
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    shared_memory = getattr(properties, "shared_memory_per_block_optin", 0) or 99 * 1024
    large = tiles_for(tl_dtype(dtype), shared_memory)[1]
    sm_count = properties.multi_processor_count
    kernels = compiled(config.label, programs(config, shared_memory))
    small_kernel, large_kernel = kernels.values()

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = spec.output(config, a, b)
        kernel = large_kernel if use_large(large, a.shape[0], n, sm_count) else small_kernel
        kernel(aligned(a), aligned(b), c)
        return c

    return matmul


def _builder(n: int, k: int, dtype: torch.dtype, tile: Tile) -> Callable[[], Any]:
    return lambda: matmul_program(n, k, tl_dtype(dtype), tile)
