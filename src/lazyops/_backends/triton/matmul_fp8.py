"""Scaled float8 GEMM in Triton (the spec: ``lazyops.specs.matmul_fp8``).

One program a ``[BLOCK_M, BLOCK_N]`` tile of ``c``: float8 tiles of ``a`` and of the weight ``b[n, k]`` (read as
``[BLOCK_K, BLOCK_N]`` columns, K contiguous) into ``tl.dot``, whose float32 result is added to a float32
accumulator once per ``BLOCK_K`` (128) slice of ``k``: the promotion that keeps Hopper's fp8 tensor cores, which
accumulate in about 14 bits inside one ``dot``, from drifting over a long ``k`` (the spec's tolerance refuses that).
Per-tensor and rowwise scales multiply the accumulator once, in the epilogue; block scales multiply each slice's
product by its 1x128 activation scale and its 128x128 weight block's scale. Then the bias, one rounding, one store.

Triton's interpreter multiplies float8 tiles correctly (checked: ``tl.dot`` of e4m3 tiles equals the float32
product of their values exactly), so, unlike bfloat16 in triton/fused_moe.py, no upcast is needed under it.

The tiles are data, one table per device in ``configs/matmul_fp8.json`` (rows and columns a tile, warps and stages,
by token count; the slice of ``k`` is always the 128 block), seeded from vLLM's tuned block-fp8 tables
(docs/decisions/014-fp8-client-and-gemm-tiles.md); :func:`tiling` picks a row from the call's token count alone, so a
CUDA graph captured at one count replays the same launch.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from lazyops._backends._tuned import device_table
from lazyops._backends.triton._common import cdiv, interpreting, launch_device
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.matmul_fp8 import BLOCK, MatmulFP8Config, spec

#: scale kinds as the kernel's constexpr
KINDS = {"tensor": 0, "rowwise": 1, "block": 2}
#: The tiles' table (``configs/matmul_fp8.json``), one per device.
TABLES = Path(__file__).with_name("configs") / "matmul_fp8.json"


@dataclass(frozen=True)
class FP8Tile:
    """A row of ``configs/matmul_fp8.json``: the tile for calls of up to ``max_m`` tokens (None: any count)."""

    max_m: int | None
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


@functools.cache
def tile_table(device: str | None = None) -> tuple[FP8Tile, ...]:
    """The tiles for the GPU named ``device`` (``torch.cuda.get_device_name()``), or the default table's (None: no
    device, as in Triton's interpreter), in the file's order; the last serves any token count."""
    tiles = tuple(FP8Tile(**row) for row in device_table(TABLES, device)["tiles"])
    if not tiles or [tile.max_m is None for tile in tiles] != [False] * (len(tiles) - 1) + [True]:
        raise ValueError(f"{TABLES} ({device or 'default'}): only the last tile serves any token count (max_m null)")
    return tiles


def tiling(tokens: int, table: tuple[FP8Tile, ...]) -> FP8Tile:
    """The first tile of ``table`` whose ``max_m`` is at least ``tokens`` (the launch inlines it: one frame less)."""
    return table[bisect.bisect_left([tile.max_m for tile in table if tile.max_m is not None], tokens)]


@triton.jit
def _matmul_fp8_kernel(
    a_ptr,
    b_ptr,
    scale_a_ptr,
    scale_b_ptr,
    bias_ptr,
    c_ptr,
    M,
    stride_am,
    stride_sam,
    stride_sak,
    stride_cm,
    N: tl.constexpr,
    K: tl.constexpr,
    K_BLOCKS: tl.constexpr,
    SCALES: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok, col_ok = rows < M, cols < N
    rows64, cols64 = rows.to(tl.int64), cols.to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        a = tl.load(
            a_ptr + rows64[:, None] * stride_am + depth[None, :], mask=row_ok[:, None] & (depth[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + cols64[None, :] * K + depth[:, None], mask=col_ok[None, :] & (depth[:, None] < K), other=0.0
        )
        part = tl.dot(a, b, out_dtype=tl.float32)
        if SCALES == 2:  # BLOCK_K is the 128 block: one group of a, one block column of b
            group = start // BLOCK_K
            sa = tl.load(scale_a_ptr + rows64 * stride_sam + group * stride_sak, mask=row_ok, other=0.0)
            sb = tl.load(scale_b_ptr + (cols // BLOCK_K) * K_BLOCKS + group, mask=col_ok, other=0.0)
            acc += part * sa[:, None] * sb[None, :]
        else:
            acc += part
    if SCALES == 0:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    elif SCALES == 1:
        sa = tl.load(scale_a_ptr + rows64 * stride_sam, mask=row_ok, other=0.0)
        sb = tl.load(scale_b_ptr + cols64, mask=col_ok, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols64, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    out = c_ptr + rows64[:, None] * stride_cm + cols64[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@spec.implementation(device_type=launch_device(_matmul_fp8_kernel), strided_rows=True, writes_out=True)
def matmul_fp8_tl(config: MatmulFP8Config) -> Callable[..., torch.Tensor]:
    return build_matmul_fp8(
        config, tile_table(None if interpreting(_matmul_fp8_kernel) else torch.cuda.get_device_name())
    )


def build_matmul_fp8(config: MatmulFP8Config, table: tuple[FP8Tile, ...]) -> Callable[..., torch.Tensor]:
    """The launch ``matmul_fp8(a, b, scale_a, scale_b, bias, out)`` over ``table``'s tiles: the device's, or a
    one-row table of a candidate (``benchmarks/bench_gemm.py --fp8 ... --sweep triton`` times them)."""
    n, k = config.n, config.k
    shapes = {"N": n, "K": k, "K_BLOCKS": config.k_blocks, "SCALES": KINDS[config.scales]}
    bounds, bisect_left = [tile.max_m for tile in table if tile.max_m is not None], bisect.bisect_left
    column_tiles = {tile: cdiv(n, tile.block_n) for tile in table}
    launchers = {
        (tile, bias): Launcher(
            _matmul_fp8_kernel,
            {**shapes, "HAS_BIAS": bias, "BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": BLOCK},
            num_warps=tile.num_warps,
            num_stages=tile.num_stages,
        )
        for tile in table
        for bias in (False, True)
    }

    def matmul_fp8(
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor,
    ) -> torch.Tensor:
        tokens = a.shape[0]
        tile = table[bisect_left(bounds, tokens)]  # tiling(tokens, table), without its frame
        has_bias = bias is not None and bias.numel() > 0
        strides = scale_a.stride() if scale_a.dim() == 2 else (0, 0)
        launch = launchers[tile, has_bias]
        launch(
            (cdiv(tokens, tile.block_m), column_tiles[tile]),
            a,
            b,
            scale_a,
            scale_b,
            bias if has_bias else scale_b,
            out,
            tokens,
            a.stride(0),
            *strides,
            out.stride(0),
        )
        return out

    return matmul_fp8
