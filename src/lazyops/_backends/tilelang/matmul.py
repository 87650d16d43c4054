"""Matrix product ``a[M, k] @ b[k, n]`` in TileLang: a tiled, software-pipelined GEMM with float32 accumulation.

On Hopper the half-precision kernel lowers to TMA loads into shared memory (zero-filled past the matrix edges),
a producer warpgroup feeding ``wgmma`` consumers through mbarriers, and predicated stores for the ragged edges;
where a row stride is not a multiple of 16 bytes (TMA's requirement), TileLang falls back to predicated copies
by itself. Float32 inputs take a CUDA-core (FFMA) path instead: TileLang's tensor-core GEMM would round float32
operands to TF32 (10-bit mantissa, unit roundoff 2**-11 against float32's 2**-24), far coarser than the float32
product the reference computes and that ``torch.matmul`` gives by default. The FFMA path runs at about 35
TFLOP/s on an H200 (cuBLAS's float32: 51).

At decode sizes (``M <= 128``) in half precision the product is a stream over the weight ``b`` (``k*n*2``
bytes), and a tile per output block leaves most SMs idle or waiting on too few loads: [1, 4096] x [4096, 14336]
makes 224 blocks of 64 columns, each walking all of ``k``. So small ``M`` takes decode tiles, and where their
tiles alone do not fill the GPU a split-K pair (:func:`split_k_program`, :func:`reduce_program`): each block
multiplies a ``[bm, bn]`` tile over one slice of ``k`` (TMA loads, ``mma``/``wgmma``) and stores its float32
partial sum into ``partial[split, M, n]``; a second kernel adds the ``split`` partials in slice order and casts.
Exact to float32 accumulation (the partials are float32, no 16-bit intermediate) and deterministic (no atomics:
the same inputs give the same bits). The tiles and the slice count (:func:`plan_split`) come from
``benchmarks/gemm_decode_sweep.py --backend tilelang``, which times tilings in CUDA graphs on an H200. On a narrow
weight (its 64 x 128 tiles leave half the SMs idle: n = 4096 on an H200) narrower tiles with deeper pipelines beat
splitting ``k``, so there each bucket runs one tiled program, no partials and no second launch (``NARROW_16``,
``NARROW_64``, ``NARROW_128``; :func:`split_plans`).
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends._grid import MAX_GRID_YZ, refuse_rows
from lazyops._backends.tilelang._runtime import ALIGNMENT, F32, aligned, compiled, direct, require_gpu, tl_dtype
from lazyops.specs.matmul import MatmulConfig, spec


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int
    #: How the consumer warpgroups share the tile: "square" (TileLang's default; a 128 x 256 tile gives each of
    #: two warpgroups 128 x 128, two m64n128 ``wgmma`` a k-step) or "full_row" (each warpgroup 64 rows by the
    #: whole width, one m64n256 ``wgmma``, as CUTLASS's cooperative Hopper kernels split it).
    warp_policy: str = "square"
    #: The result written from the accumulators straight to global memory (False: 4-byte predicated stores) or
    #: staged in shared memory and written by a TMA store (True: ``block_m * block_n`` more shared memory).
    shared_epilogue: bool = False
    #: Blocks an SM when persistent (each walks the tiles ``sm_count * persistent`` apart); 0: a block a tile.
    persistent: int = 0

    def tiles(self, m: int, n: int) -> int:
        return -(-m // self.block_m) * -(-n // self.block_n)

    def shared_bytes(self, itemsize: int, out_itemsize: int | None = None) -> int:
        """The block's shared memory: the pipeline's stages of a and b (``itemsize`` bytes an element), and the
        staged result (``out_itemsize``, by default ``itemsize``; 4 for split-K's float32 partials)."""
        pipeline = (self.block_m + self.block_n) * self.block_k * itemsize * self.stages
        staged = self.block_m * self.block_n * (out_itemsize or itemsize) if self.shared_epilogue else 0
        return pipeline + staged


# Measured on an H200 (bf16, [M, 4096] x [4096, 4096]; benchmarks/tilelang_tune.py): 128x256 tiles reach
# 625-636 TFLOP/s from M = 1024 (128x128: 477-497); for M <= 128 the 64x64x128 tile is fastest (180 TFLOP/s at
# M = 128, 24 us at M = 1), since it spreads a decode-sized problem over more SMs. Then
# benchmarks/gemm_large_sweep.py (gemm_large_sweep_tilelang.md, H200, M = 1024 and 8192 and 8192^3): the 128x256
# tile with each warpgroup on 64 full rows (one m64n256 wgmma) and its result staged in shared memory for a TMA
# store ran at 0.95-1.01x cuBLAS (geometric mean 0.976) where the square split with direct stores ran at
# 0.86-0.96x (0.906): the stores from the accumulators, four bytes a thread at a time, were most of the gap.
LARGE = Tile(128, 256, 64, 3, 256, warp_policy="full_row", shared_epilogue=True)
#: For GPUs with less than LARGE's 208 KiB of shared memory per block (sm_86, sm_89: 99 KiB).
LARGE_LOW_SMEM = Tile(128, 128, 64, 3, 256)
SMALL = Tile(64, 64, 128, 3, 128)
#: Float32 on CUDA cores: a 128x128 tile gives each of 256 threads a 16x4 block of accumulators.
LARGE_F32 = Tile(128, 128, 16, 3, 256)
SMALL_F32 = Tile(64, 64, 16, 3, 128)


#: Decode tiles, the fastest of ``benchmarks/results/gemm_decode_sweep_tilelang.md`` (H200, in CUDA graphs). M <= 16:
#: a 16-row tile (``mma.sync`` m16n8k16, no 64-row wgmma waste) over 128 columns, 128-deep k-steps, 4 stages (144
#: KiB of shared memory: one block an SM). (M <= 128 was a 64-row wgmma tile over 256 columns, 64-deep k-steps, 4
#: stages: now SPLIT_128_LOW_SMEM, below.)
SPLIT_16 = Tile(16, 128, 128, 4, 128)
#: M <= 16 for narrow weights (SPLIT_64's tiles, counted at 128 tokens, leave half the SMs idle; as NARROW_64 and
#: NARROW_128 below) whose tiles still give 3/8 of the SMs a block: 16 x 64 x 128, 6 stages (120 KiB), never split:
#: one launch, no partials. At n = 4096 that is 64 blocks for 132 SMs, and still faster than filling them by
#: splitting k, whose partials and reduce cost more.
#: ``gemm_decode_sweep_tilelang_narrow16.md`` (H200, in CUDA graphs): 10.74 / 10.95 µs at M = 1 / 16 on 4096 x 4096
#: against SPLIT_16's 11.47 / 12.05 (split 4) and cuBLAS's 12.42 / 13.15; 30.06 / 30.04 at k = 14336 against 29.67 /
#: 30.71 and 31.24 / 31.70. At (14336, 4096) SPLIT_16 unsplit stayed faster (29.11 / 29.56 against 31.46 / 31.31).
NARROW_16 = Tile(16, 64, 128, 6, 128)
#: M <= 64 (``gemm_decode_sweep_tilelang_tma.md``, the 64-row tilings with their results staged in shared memory
#: for a TMA store): 64 x 128 x 64, 4 stages, the float32 partials stored through shared memory (128 KiB: one block
#: an SM). At M = 64 it took 13.4 / 33.6 / 30.4 µs against the M <= 128 plan's 16.5 / 36.6 / 33.5 and cuBLAS's
#: 11.2 / 35.1 / 31.1 for (n, k) = (4096, 4096) / (4096, 14336) / (14336, 4096). At M = 128 the same tile was
#: slower than the 64 x 256 plan of then at two of the three shapes (41.3 against 39.1 µs, 44.2 against 34.9).
SPLIT_64 = Tile(64, 128, 64, 4, 128, shared_epilogue=True)
#: M <= 64 for narrow weights (as NARROW_128 below: SPLIT_64's tiles, counted at 128 tokens, leave half the SMs
#: idle): 64 x 32 x 128, 6 stages (144 KiB: one block an SM), storing from its accumulators, split by the slot rule
#: (at n = 4096 its 128 tiles fill the SMs alone: no split, no reduce, one launch).
#: ``gemm_decode_sweep_tilelang_narrow32.md`` (H200, in CUDA graphs, M = 64): 11.63 / 32.35 µs at (n, k) = (4096,
#: 4096) / (4096, 14336) against SPLIT_64's 13.41 / 33.47 and cuBLAS's 11.19 / 34.91, the fastest candidate at 4096
#: x 4096 and within 0.7 % of it at k = 14336 (64 x 32 x 256, 4 stages: 32.12). At (14336, 4096) SPLIT_64 stayed
#: faster than every 32-column tiling (30.35 against 41.40 µs: 448 tiles are 3.4 waves).
NARROW_64 = Tile(64, 32, 128, 6, 128)
#: M <= 128 (``gemm_decode_sweep_tilelang_rows128.md``, 128-row tilings at M = 128): one 128-row block holds the
#: whole batch, so each slice of the weight is read once (two 64-row blocks read it twice, the second time from
#: L2); 128 x 128 x 64, 4 stages, two consumer warpgroups, the float32 partials stored through shared memory, split
#: by the slot rule (4 / 4 / 1). 16.1 / 37.6 / 34.5 µs against the 64 x 256 plan's 17.6 / 39.1 / 34.8 and cuBLAS's
#: 13.4 / 36.3 / 33.4 ((n, k) = (4096, 4096) / (4096, 14336) / (14336, 4096)); the fastest candidate of each cell.
SPLIT_128 = Tile(128, 128, 64, 4, 256, shared_epilogue=True)
#: ... where it does not fit (two stages and its staged partial take 128 KiB: a 99 KiB sm_86 / sm_89 block): the
#: 64 x 256 tile storing from its accumulators, the M <= 128 plan before it.
SPLIT_128_LOW_SMEM = Tile(64, 256, 64, 4, 128)
#: M <= 128 where two 64-row blocks of 64 x 128 tiles leave half the SMs idle (a weight of n <= 4224 on an H200):
#: 64 x 64 x 128, 5 stages (160 KiB: one block an SM), storing from its accumulators, split by the slot rule (at
#: n = 4096 its 128 tiles fill the SMs alone: no split, so no reduce and no second launch).
#: ``gemm_decode_sweep_tilelang_narrow.md`` (H200, in CUDA graphs, M = 128): 12.60 / 35.27 µs at (n, k) = (4096,
#: 4096) / (4096, 14336) against the plan of then's 15.35 / 36.09 (64 x 128 x 128, 4 stages, split 2, which had
#: replaced SPLIT_128 there after ``gemm_decode_sweep_tilelang_mid.md``) and cuBLAS's 13.63 / 36.75: the fastest
#: candidate of both cells. At (14336, 4096), 224 tiles, SPLIT_128 stayed faster than every 64-wide tiling (33.46
#: against 43.56 µs). (At M = 64 this tile, split 2 by the slot rule, took 13.38 / 33.37 µs: NARROW_64 serves there.)
NARROW_128 = Tile(64, 64, 128, 5, 128)
#: The reduce kernel: one row of 4 * 64 float32 columns a block (a float4 a thread per partial).
REDUCE_COLUMNS = 256
REDUCE_THREADS = 64
MAX_BLOCKS_PER_SM = 4
#: A k-slice is at least this many k-steps (a shorter one spends its time filling the pipeline).
MIN_SLICE_STEPS = 2
#: Shared memory a block leaves to TileLang's own use (barriers, the epilogue) when stages are fitted.
EPILOGUE_RESERVE = 8 * 1024


@dataclass(frozen=True)
class SplitK:
    """A decode variant: ``tile`` over ``split`` slices of ``steps`` k-steps each, for up to ``max_m`` tokens
    (``split == 1``: the plain tiled program, no partials and no reduce)."""

    tile: Tile
    steps: int
    split: int
    max_m: int


def fits_shared(tile: Tile, shared_memory: int) -> bool:
    """Whether ``tile``'s pipeline (16-bit operands, float32 staging) fits ``shared_memory`` less
    :data:`EPILOGUE_RESERVE`."""
    return tile.shared_bytes(2, 4) <= shared_memory - EPILOGUE_RESERVE


def fitted(tile: Tile, shared_memory: int) -> Tile:
    """``tile`` with its stages dropped (to two at least) until its pipeline fits ``shared_memory`` less
    :data:`EPILOGUE_RESERVE` (a 99 KiB sm_86/sm_89 GPU takes the decode tiles with 2 stages)."""
    stages = tile.stages
    while stages > 2 and not fits_shared(replace(tile, stages=stages), shared_memory):
        stages -= 1
    return replace(tile, stages=stages)


def plan_split(tile: Tile, max_m: int, n: int, k: int, sm_count: int = 132, shared_memory: int = 227 * 1024) -> SplitK:
    """Split ``k`` so that the tiles times the slices fill every SM's block slots once: ``split = slots //
    tiles``, tiles counted at ``max_m`` tokens, slots the SMs times the blocks their shared memory holds.

    Measured on an H200 (``gemm_decode_sweep_tilelang.md``, µs in CUDA graphs, cuBLAS in brackets): [1, 4096] x
    [4096, 4096] in 32 tiles, split 4: 11.5 (12.5), split 8 (a second wave) 13.7, no split 13.8; [16, 4096] x
    [4096, 14336] split 4: 30.4 (31.7); [1, 4096] x [4096, 14336] in 112 tiles, no split: 29.1 (30.6), split 2:
    31.9. At M = 128 the 64 x 256 tile with that rule: 17.4 (13.6), 34.6 (32.5), 38.8 (36.3), each the fastest
    tiling measured there but one within 1.5 %.
    """
    tile = fitted(tile, shared_memory)
    k_steps = -(-k // tile.block_k)
    slots = sm_count * max(1, min(MAX_BLOCKS_PER_SM, shared_memory // tile.shared_bytes(2, 4)))
    wanted = max(1, min(slots // tile.tiles(max_m, n), k_steps // MIN_SLICE_STEPS))
    steps = -(-k_steps // wanted)
    return SplitK(tile, steps, -(-k_steps // steps), max_m)


def tiles_for(dtype: str, shared_memory: int = 227 * 1024) -> tuple[Tile, Tile]:
    """The (small, large) tile shapes for ``dtype`` on a GPU with ``shared_memory`` bytes per block."""
    if dtype == F32:
        return SMALL_F32, LARGE_F32
    large = LARGE if LARGE.shared_bytes(2) <= shared_memory else LARGE_LOW_SMEM
    return SMALL, large


def large_for(large: Tile, n: int, k: int, itemsize: int) -> Tile:
    """``large`` as a ``[k, n]`` weight can take it: its full-row warpgroups and TMA-store epilogue only where a's
    and b's rows are 16-byte multiples. Elsewhere TMA cannot load them, TileLang drops its producer warpgroup and
    launches 512 threads (128 registers each), and one m64n256 ``wgmma`` needs more than that (ptxas refused
    ``matmul_tl(n=1, k=16, dtype=torch.float16)`` on an H200): such weights keep the square split and direct stores.
    """
    if (n * itemsize) % 16 == 0 and (k * itemsize) % 16 == 0:
        return large
    return replace(large, warp_policy="square", shared_epilogue=False)


def use_large(large: Tile, m: int, n: int, sm_count: int) -> bool:
    """Large tiles once they alone give every other SM a block: below that, small tiles spread the work wider."""
    return large.tiles(m, n) >= sm_count // 2


def matmul_program(n: int, k: int, dtype: str, tile: Tile, sm_count: int = 132) -> Any:
    """The TileLang program ``main(a[M, k], b[k, n], c[M, n])`` for a dynamic ``M``, one ``tile`` shape: a block
    a tile, or with ``tile.persistent`` ``sm_count * tile.persistent`` blocks walking the tiles (``T.Persistent``:
    groups of 8 column blocks, TileLang's own rasterisation), the producer loading the next tile's first k-steps
    while the consumers store this one's result."""
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    M = T.dynamic("M")
    tensor_cores = dtype != F32
    policy = T.GemmWarpPolicy.FullRow if tile.warp_policy == "full_row" else T.GemmWarpPolicy.Square
    shared_epilogue = tile.shared_epilogue

    @T.macro
    def product(a, b, c, a_tile, b_tile, acc, c_tile, by, bx):
        # One output tile: its row block by, its column block bx.
        T.clear(acc)
        for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=tile.stages):
            T.copy(a[by * bm, ko * bk], a_tile)
            T.copy(b[ko * bk, bx * bn], b_tile)
            if tensor_cores:
                T.gemm(a_tile, b_tile, acc, policy=policy)
            else:
                for kk in T.serial(bk):
                    for i, j in T.Parallel(bm, bn):
                        acc[i, j] += a_tile[i, kk] * b_tile[kk, j]
        if shared_epilogue:
            T.copy(acc, c_tile)
            T.copy(c_tile, c[by * bm, bx * bn])
        else:
            T.copy(acc, c[by * bm, bx * bn])

    # Without a shared epilogue the staged tile is never touched and TileLang allocates nothing for it.
    staged = (bm, bn) if shared_epilogue else (1, 1)
    if tile.persistent:
        programs = sm_count * tile.persistent

        @T.prim_func
        def persistent(a: T.Tensor((M, k), dtype), b: T.Tensor((k, n), dtype), c: T.Tensor((M, n), dtype)):
            with T.Kernel(programs, threads=tile.threads) as block:
                a_tile = T.alloc_shared((bm, bk), dtype)
                b_tile = T.alloc_shared((bk, bn), dtype)
                acc = T.alloc_fragment((bm, bn), F32)
                c_tile = T.alloc_shared(staged, dtype)
                for by, bx in T.Persistent([T.ceildiv(M, bm), T.ceildiv(n, bn)], programs, block):
                    product(a, b, c, a_tile, b_tile, acc, c_tile, by, bx)

        return persistent

    @T.prim_func
    def main(a: T.Tensor((M, k), dtype), b: T.Tensor((k, n), dtype), c: T.Tensor((M, n), dtype)):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(M, bm), threads=tile.threads) as (bx, by):
            a_tile = T.alloc_shared((bm, bk), dtype)
            b_tile = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), F32)
            c_tile = T.alloc_shared(staged, dtype)
            # Neighbouring blocks share panels of a and b, so more of them hit in L2.
            T.use_swizzle(panel_size=8)
            product(a, b, c, a_tile, b_tile, acc, c_tile, by, bx)

    return main


def split_k_program(n: int, k: int, dtype: str, plan: SplitK) -> Any:
    """``main(a[M, k], b[k, n], partial[split, M, n])``: block ``(i, s, j)`` stores the float32 product of a's
    row block ``i`` and b's column block ``j`` over k-slice ``s`` in ``partial[s]``.

    The last slice may run past ``k``: TMA fills those rows of b and columns of a with zeros, which add nothing.
    """
    tile, steps = plan.tile, plan.steps
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    M = T.dynamic("M")
    shared_epilogue = tile.shared_epilogue

    @T.prim_func
    def main(a: T.Tensor((M, k), dtype), b: T.Tensor((k, n), dtype), partial: T.Tensor((plan.split, M, n), F32)):
        # The row block varies fastest, so the blocks sharing a tile of b run together and it is read from DRAM
        # once.
        with T.Kernel(T.ceildiv(M, bm), plan.split, T.ceildiv(n, bn), threads=tile.threads) as (bx, bs, by):
            a_tile = T.alloc_shared((bm, bk), dtype)
            b_tile = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), F32)
            T.clear(acc)
            for ko in T.Pipelined(steps, num_stages=tile.stages):
                T.copy(a[bx * bm, (bs * steps + ko) * bk], a_tile)
                T.copy(b[(bs * steps + ko) * bk, by * bn], b_tile)
                T.gemm(a_tile, b_tile, acc)
            if shared_epilogue:
                partial_tile = T.alloc_shared((bm, bn), F32)
                T.copy(acc, partial_tile)
                T.copy(partial_tile, partial[bs, bx * bm, by * bn])
            else:
                T.copy(acc, partial[bs, bx * bm, by * bn])

    return main


def reduce_program(n: int, dtype: str, split: int) -> Any:
    """``main(partial[split, M, n], c[M, n])``: the partials added in slice order (deterministic), cast."""
    M = T.dynamic("M")
    bn = REDUCE_COLUMNS

    @T.prim_func
    def main(partial: T.Tensor((split, M, n), F32), c: T.Tensor((M, n), dtype)):
        with T.Kernel(T.ceildiv(n, bn), M, threads=REDUCE_THREADS) as (bx, by):
            part = T.alloc_fragment((1, bn), F32)
            acc = T.alloc_fragment((1, bn), F32)
            T.clear(acc)
            for s in T.unroll(split):
                T.copy(partial[s, by, bx * bn], part)
                for i, j in T.Parallel(1, bn):
                    acc[i, j] += part[i, j]
            T.copy(acc, c[by, bx * bn])

    return main


def split_plans(config: MatmulConfig, sm_count: int = 132, shared_memory: int = 227 * 1024) -> tuple[SplitK, ...]:
    """The split-K variants for ``config``, by the largest M each serves; none for float32 (FFMA path)."""
    if config.dtype == torch.float32:
        return ()
    n, k = config.n, config.k
    rows_128 = SPLIT_128 if fits_shared(fitted(SPLIT_128, shared_memory), shared_memory) else SPLIT_128_LOW_SMEM
    rows_16 = plan_split(SPLIT_16, 16, n, k, sm_count, shared_memory)
    rows_64 = SPLIT_64
    # SPLIT_64's 64 x 128 tiles, counted at 128 tokens: half the SMs or fewer means a narrow weight, whose tiles
    # are better made narrower than split along k (no partials, no reduce, one launch)
    if SPLIT_64.tiles(128, n) <= sm_count // 2:
        # unsplit only where its tiles give most SMs a block, as at n = 4096 (64 for 132); much narrower weights
        # (not measured) keep the split plan, which fills the SMs
        unsplit_fills = NARROW_16.tiles(16, n) * 8 >= sm_count * 3
        if unsplit_fills and fits_shared(NARROW_16, shared_memory):
            rows_16 = SplitK(NARROW_16, -(-k // NARROW_16.block_k), 1, 16)
        if fits_shared(NARROW_64, shared_memory):
            rows_64 = NARROW_64
        if fits_shared(NARROW_128, shared_memory):
            rows_128 = NARROW_128
    return (
        rows_16,
        plan_split(rows_64, 64, n, k, sm_count, shared_memory),
        plan_split(rows_128, 128, n, k, sm_count, shared_memory),
    )


def programs(
    config: MatmulConfig, shared_memory: int | None = None, sm_count: int = 132
) -> dict[tuple[str, Any], Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant: a small and a large tile, and in half
    precision one per decode size: its plain tiled program, or a split-K pair (product, reduce)."""
    small, large = (
        tiles_for(tl_dtype(config.dtype), shared_memory) if shared_memory else tiles_for(tl_dtype(config.dtype))
    )
    n, k, dtype = config.n, config.k, config.dtype
    large = large_for(large, n, k, dtype.itemsize)
    built: dict[tuple[str, Any], Callable[[], Any]] = {
        ("small", small): _builder(n, k, dtype, small, sm_count),
        ("large", large): _builder(n, k, dtype, large, sm_count),
    }
    for plan in split_plans(config, sm_count, shared_memory or 227 * 1024):
        if plan.split == 1:
            built[(f"decode{plan.max_m}", plan.tile)] = _builder(n, k, dtype, plan.tile, sm_count)
            continue
        built[(f"split{plan.max_m}", plan)] = _split_builder(n, k, dtype, plan)
        built[(f"reduce{plan.max_m}", plan.split)] = _reduce_builder(n, dtype, plan.split)
    return built


@spec.implementation(device_type="cuda", writes_out=True)
def matmul_tl(config: MatmulConfig) -> Callable[..., None]:
    # launch(a, b, out): the wrapper hands a contiguous out, and a contiguous copy of a row-strided a (not
    # strided_rows: the programs declare contiguous a for their TMA descriptors). Two tile shapes are compiled,
    # sized for the current GPU; each call takes the large one when it yields enough tiles to keep the GPU busy.
    # In half precision, up to 128 tokens, the decode variant of the first plan (16, 64, 128 tokens) whose max_m
    # covers the call: its tiled program, or its split-K pair.
    n, dtype = config.n, config.dtype
    require_gpu(config.label)
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    shared_memory = getattr(properties, "shared_memory_per_block_optin", 0) or 99 * 1024
    large = tiles_for(tl_dtype(dtype), shared_memory)[1]
    sm_count = properties.multi_processor_count
    built = compiled(config.label, programs(config, shared_memory, sm_count))
    kernel_of = {name: direct(kernel) for (name, _), kernel in built.items()}  # by variant name, as programs() keys
    small_kernel, large_kernel = kernel_of["small"], kernel_of["large"]
    decode = [
        (plan.max_m, plan.split, kernel_of[f"decode{plan.max_m}"], None)
        if plan.split == 1
        else (plan.max_m, plan.split, kernel_of[f"split{plan.max_m}"], kernel_of[f"reduce{plan.max_m}"])
        for plan in split_plans(config, sm_count, shared_memory)
    ]

    # The tiled programs' row blocks lie along their grid's second dimension, at most 65535 of them; a product of
    # more than 65535 small tiles' rows has tiles enough for the large one.
    most_rows = MAX_GRID_YZ * large.block_m
    why = f"65535 blocks of {large.block_m} rows along the second dimension of the TileLang kernel's grid"

    def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        m = a.shape[0]
        if m > most_rows:
            refuse_rows(config.label, "a", m, most_rows, why)
        a, b = aligned(a), aligned(b)
        # A caller's out may be a view at a misaligned address: the kernel writes an aligned temporary instead.
        c = out if out.data_ptr() % ALIGNMENT == 0 else torch.empty_like(out, memory_format=torch.contiguous_format)
        for max_m, split, product, reduce in decode:
            if m <= max_m:
                if reduce is None:
                    product(a, b, c)
                else:
                    partial = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
                    product(a, b, partial)
                    reduce(partial, c)
                break
        else:
            kernel = large_kernel if use_large(large, m, n, sm_count) else small_kernel
            kernel(a, b, c)
        if c is not out:
            out.copy_(c)

    return matmul


def _builder(n: int, k: int, dtype: torch.dtype, tile: Tile, sm_count: int) -> Callable[[], Any]:
    return lambda: matmul_program(n, k, tl_dtype(dtype), tile, sm_count)


def _split_builder(n: int, k: int, dtype: torch.dtype, plan: SplitK) -> Callable[[], Any]:
    return lambda: split_k_program(n, k, tl_dtype(dtype), plan)


def _reduce_builder(n: int, dtype: torch.dtype, split: int) -> Callable[[], Any]:
    return lambda: reduce_program(n, tl_dtype(dtype), split)
