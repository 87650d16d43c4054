"""Scaled float8 GEMM in TileLang (the spec: ``lazyops.specs.matmul_fp8``): ``c = (a * scale_a) @ (b * scale_b).T
+ bias``, ``a[M, k]`` and the weight ``b[n, k]`` (K contiguous, as engines store it) in float8 e4m3.

One thread block a ``[block_m, 128]`` tile of ``c``, DeepGEMM's structure (TileLang's ``deepseek_deepgemm``
example): TMA loads of 128-deep slices of ``a`` and ``b`` into shared memory, pipelined, feeding ``wgmma`` (both
operands K-major, fp8's only layout) into a float32 fragment that is cleared every slice; each slice's product is
then added to a second float32 accumulator (the promotion that keeps Hopper's fp8 tensor cores, about 14 bits of
accumulation inside one ``wgmma`` chain, from drifting over a long ``k``: the spec's tolerance refuses that drift).
Block scales multiply each slice's product by its rows' 1x128 activation scales and its 128x128 weight block's
scale (the column tile is the weight block, so that scale is one number a slice); per-tensor and rowwise scales
multiply the accumulator once, in the epilogue, in the order Triton's kernel multiplies them. Then the bias (a
zero vector stands for a left-out one: ``v + 0`` is ``v``), one rounding to the output dtype, predicated stores.

The tiles come from the shapes only, not from a tuned table: ``block_m`` 64 up to 64 tokens (one warpgroup,
``m64n128k32`` ``wgmma``), else 128 (two warpgroups); 128 columns, 128 deep, 4 stages (96 and 128 KiB of shared
memory). The grid is ``(ceil(n / 128), ceil(M / block_m))``: from the shapes alone, so a call is captured in a CUDA
graph as it is; no split-K at decode sizes (left to be measured against Triton's on a GPU).

What a GPU must still confirm (nothing here has run on one; CI lowers the programs for sm_90a and checks for TMA
and fp8 ``wgmma``): the kit's cases on the device for every scale kind and output dtype (``make gpu-tlfp8``), ragged
``k`` (the slices past ``k`` are zero-filled by TMA; a ``k`` that is not a multiple of 16 bytes takes TileLang's
predicated copies), and the speed against ``torch._scaled_mm`` and Triton's kernel (``bench_gemm.py --fp8``).
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends._grid import MAX_GRID_YZ, refuse_rows
from lazyops._backends.tilelang._runtime import ALIGNMENT, F32, FP8, aligned, compiled, direct, tl_dtype
from lazyops.specs.matmul_fp8 import BLOCK, MatmulFP8Config, spec


@dataclass(frozen=True)
class FP8Tile:
    block_m: int
    threads: int
    block_n: int = BLOCK  #: the weight block's width: one block scale a tile and a slice
    block_k: int = BLOCK  #: the promotion's slice, and the activation group's width
    stages: int = 4

    def shared_bytes(self) -> int:
        return (self.block_m + self.block_n) * self.block_k * self.stages


#: up to :data:`SMALL_MAX_M` tokens: one warpgroup on 64 rows; beyond, two on 128
SMALL = FP8Tile(block_m=64, threads=128)
LARGE = FP8Tile(block_m=128, threads=256)
SMALL_MAX_M = 64
#: the variants a factory compiles, by name
TILES = {"small": SMALL, "large": LARGE}


def matmul_fp8_program(n: int, k: int, out_dtype: str, scales: str, tile: FP8Tile) -> Any:
    """The program ``main(a[M, k], b[n, k], scale_a, scale_b, bias[n], c[M, n])`` for a dynamic ``M``.

    ``scale_a``: ``[1]`` (tensor), ``[M, 1]`` (rowwise) or ``[M, ceil(k / 128)]`` with run-time strides (block:
    row- or column-major); ``scale_b``: ``[1]``, ``[n, 1]`` or ``[ceil(n / 128), ceil(k / 128)]``.
    """
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    k_blocks, n_blocks = -(-k // BLOCK), -(-n // BLOCK)
    M = T.dynamic("M")
    sa_row, sa_col = T.dynamic("sa_row, sa_col")
    blockwise = scales == "block"
    if scales == "tensor":
        a_scales: Any = T.Tensor((1,), F32)
        b_scales: Any = T.Tensor((1,), F32)
    elif scales == "rowwise":
        a_scales, b_scales = T.Tensor((M, 1), F32), T.Tensor((n, 1), F32)
    else:
        a_scales = T.StridedTensor((M, k_blocks), (sa_row, sa_col), F32)
        b_scales = T.Tensor((n_blocks, k_blocks), F32)

    @T.prim_func
    def main(
        a: T.Tensor((M, k), FP8),
        b: T.Tensor((n, k), FP8),
        scale_a: a_scales,
        scale_b: b_scales,
        bias: T.Tensor((n,), out_dtype),
        c: T.Tensor((M, n), out_dtype),
    ):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(M, bm), threads=tile.threads) as (bx, by):
            a_tile = T.alloc_shared((bm, bk), FP8)
            b_tile = T.alloc_shared((bn, bk), FP8)
            row_scales = T.alloc_shared((bm,), F32)
            part = T.alloc_fragment((bm, bn), F32)
            acc = T.alloc_fragment((bm, bn), F32)
            # Neighbouring blocks share panels of a and b, so more of them hit in L2.
            T.use_swizzle(panel_size=8)
            T.clear(part)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=tile.stages):
                T.copy(a[by * bm, ko * bk], a_tile)
                T.copy(b[bx * bn, ko * bk], b_tile)
                if blockwise:
                    for i in T.Parallel(bm):
                        row_scales[i] = T.if_then_else(by * bm + i < M, scale_a[by * bm + i, ko], T.float32(0))
                T.gemm(a_tile, b_tile, part, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                if blockwise:
                    for i, j in T.Parallel(bm, bn):
                        acc[i, j] += part[i, j] * row_scales[i] * scale_b[bx, ko]
                else:
                    for i, j in T.Parallel(bm, bn):
                        acc[i, j] += part[i, j]
                T.clear(part)
            for i, j in T.Parallel(bm, bn):
                row = by * bm + i
                col = bx * bn + j
                if row < M and col < n:
                    value = acc[i, j]
                    if scales == "tensor":
                        value = value * (scale_a[0] * scale_b[0])
                    elif scales == "rowwise":
                        value = value * scale_a[row, 0] * scale_b[col, 0]
                    c[row, col] = T.cast(value + T.cast(bias[col], F32), out_dtype)

    return main


def programs(config: MatmulFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant: the small and the large tile."""
    return {name: _builder(config, tile) for name, tile in TILES.items()}


def _builder(config: MatmulFP8Config, tile: FP8Tile) -> Callable[[], Any]:
    return lambda: matmul_fp8_program(config.n, config.k, tl_dtype(config.dtype), config.scales, tile)


@spec.implementation(device_type="cuda", writes_out=True)
def matmul_fp8_tl(config: MatmulFP8Config) -> Callable[..., torch.Tensor]:
    # launch(a, b, scale_a, scale_b, bias, out): the wrapper hands a contiguous a (not strided_rows: the programs
    # declare a contiguous a for their TMA descriptors) and a dense out.
    built = {name: direct(kernel) for name, kernel in compiled(config.label, programs(config)).items()}
    small, large = built["small"], built["large"]
    n = config.n
    most_rows = MAX_GRID_YZ * LARGE.block_m
    why = f"65535 blocks of {LARGE.block_m} rows along the second dimension of the TileLang kernel's grid"
    zeros: dict[torch.device, torch.Tensor] = {}  # a left-out bias, one a device, never written

    def matmul_fp8(
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor,
    ) -> torch.Tensor:
        m = a.shape[0]
        if not m:
            return out
        if m > most_rows:
            refuse_rows(config.label, "a", m, most_rows, why)
        if bias is None or not bias.numel():
            bias = zeros.get(a.device)
            if bias is None:
                bias = zeros[a.device] = torch.zeros(n, dtype=config.dtype, device=a.device)
        if (a.data_ptr() | b.data_ptr()) % ALIGNMENT:  # a view into its allocation (read only: copied if so)
            a, b = aligned(a), aligned(b)
        c = out if out.data_ptr() % ALIGNMENT == 0 else torch.empty_like(out, memory_format=torch.contiguous_format)
        (small if m <= SMALL_MAX_M else large)(a, b, scale_a, scale_b, bias, c)
        if c is not out:
            out.copy_(c)
        return out

    return matmul_fp8
