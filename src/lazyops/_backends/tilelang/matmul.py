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
the same inputs give the same bits). The tiles are data, one table per device in ``configs/matmul.json`` (timed in
CUDA graphs on an H200: docs/decisions/004 and 005); the slice count is :func:`plan_split`'s rule. On a narrow
weight (its 64 x 128 tiles leave half the SMs idle: n = 4096 on an H200) narrower tiles with deeper pipelines beat
splitting ``k``, so there each bucket runs one tiled program, no partials and no second launch (``NARROW_16``,
``NARROW_64``, ``NARROW_128``; :func:`split_plans`).
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends._grid import MAX_GRID_YZ, refuse_rows
from lazyops._backends._tuned import device_table
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


#: The reduce kernel: one row of 4 * 64 float32 columns a block (a float4 a thread per partial).
REDUCE_COLUMNS = 256
REDUCE_THREADS = 64
#: Shared memory a block leaves to TileLang's own use (barriers, the epilogue) when stages are fitted.
EPILOGUE_RESERVE = 8 * 1024
#: The tiles' table (``configs/matmul.json``), one per device.
TABLES = Path(__file__).with_name("configs") / "matmul.json"


@dataclass(frozen=True)
class TileTable:
    """One device's table of ``configs/matmul.json``, each tile named by what it serves (docs/decisions/004 and
    005 say why each won its sweep):

    - ``large``, ``small``: beyond 128 tokens, ``large`` once its tiles give every other SM a block (128 x 256,
      each consumer warpgroup on 64 full rows, the result staged for a TMA store); ``large_low_smem`` where
      ``large`` does not fit a block's shared memory (sm_86, sm_89); ``large_f32``, ``small_f32`` on CUDA cores.
    - ``split_16``, ``split_64``, ``split_128``: the decode tiles up to 16, 64 and 128 tokens, split along ``k`` by
      :func:`plan_split`; ``split_128_low_smem`` where ``split_128`` does not fit.
    - ``narrow_16``, ``narrow_64``, ``narrow_128``: the same buckets on a narrow weight (:func:`split_plans`):
      narrower tiles, deeper pipelines, where splitting ``k`` would cost partials and a reduce.

    And the split-K rule's two tuned numbers: a k-slice of at least ``min_slice_steps`` k-steps (a shorter one
    spends its time filling the pipeline), at most ``max_blocks_per_sm`` blocks counted an SM.
    """

    large: Tile
    large_low_smem: Tile
    small: Tile
    large_f32: Tile
    small_f32: Tile
    split_16: Tile
    narrow_16: Tile
    split_64: Tile
    narrow_64: Tile
    split_128: Tile
    split_128_low_smem: Tile
    narrow_128: Tile
    min_slice_steps: int
    max_blocks_per_sm: int


@functools.cache
def tile_table(device: str | None = None) -> TileTable:
    """The tiles for the GPU named ``device`` (``torch.cuda.get_device_name()``), or the default table."""
    table = device_table(TABLES, device)
    tiles: dict[str, Any] = {name: Tile(**fields) for name, fields in table["tiles"].items()}
    return TileTable(**tiles, **table["split_k"])


#: The default table (the H200's), and its tiles under the names docs/decisions/ gives them.
DEFAULT_TABLE = tile_table()
LARGE, LARGE_LOW_SMEM, SMALL = DEFAULT_TABLE.large, DEFAULT_TABLE.large_low_smem, DEFAULT_TABLE.small
SPLIT_16, SPLIT_64, SPLIT_128 = DEFAULT_TABLE.split_16, DEFAULT_TABLE.split_64, DEFAULT_TABLE.split_128
NARROW_16, NARROW_64, NARROW_128 = DEFAULT_TABLE.narrow_16, DEFAULT_TABLE.narrow_64, DEFAULT_TABLE.narrow_128


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


def plan_split(
    tile: Tile,
    max_m: int,
    n: int,
    k: int,
    sm_count: int = 132,
    shared_memory: int = 227 * 1024,
    table: TileTable = DEFAULT_TABLE,
) -> SplitK:
    """Split ``k`` so that the tiles times the slices fill every SM's block slots once: ``split = slots //
    tiles``, tiles counted at ``max_m`` tokens, slots the SMs times the blocks their shared memory holds (at most
    ``table.max_blocks_per_sm``), slices of at least ``table.min_slice_steps`` k-steps. A second wave of slices,
    or none where one wave would fill the slots, measured slower on an H200 (docs/decisions/004-gemm-decode-tiles.md).
    """
    tile = fitted(tile, shared_memory)
    k_steps = -(-k // tile.block_k)
    slots = sm_count * max(1, min(table.max_blocks_per_sm, shared_memory // tile.shared_bytes(2, 4)))
    wanted = max(1, min(slots // tile.tiles(max_m, n), k_steps // table.min_slice_steps))
    steps = -(-k_steps // wanted)
    return SplitK(tile, steps, -(-k_steps // steps), max_m)


def tiles_for(dtype: str, shared_memory: int = 227 * 1024, table: TileTable = DEFAULT_TABLE) -> tuple[Tile, Tile]:
    """The (small, large) tile shapes for ``dtype`` on a GPU with ``shared_memory`` bytes per block."""
    if dtype == F32:
        return table.small_f32, table.large_f32
    large = table.large if table.large.shared_bytes(2) <= shared_memory else table.large_low_smem
    return table.small, large


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


def split_plans(
    config: MatmulConfig, sm_count: int = 132, shared_memory: int = 227 * 1024, table: TileTable = DEFAULT_TABLE
) -> tuple[SplitK, ...]:
    """The split-K variants for ``config``, by the largest M each serves; none for float32 (FFMA path)."""
    if config.dtype == torch.float32:
        return ()
    n, k = config.n, config.k
    split_128, split_64 = table.split_128, table.split_64
    narrow_16, narrow_64, narrow_128 = table.narrow_16, table.narrow_64, table.narrow_128
    rows_128 = split_128 if fits_shared(fitted(split_128, shared_memory), shared_memory) else table.split_128_low_smem
    rows_16 = plan_split(table.split_16, 16, n, k, sm_count, shared_memory, table)
    rows_64 = split_64
    # split_64's 64 x 128 tiles, counted at 128 tokens: half the SMs or fewer means a narrow weight, whose tiles
    # are better made narrower than split along k (no partials, no reduce, one launch)
    if split_64.tiles(128, n) <= sm_count // 2:
        # unsplit only where its tiles give most SMs a block, as at n = 4096 (64 for 132); much narrower weights
        # (not measured) keep the split plan, which fills the SMs
        unsplit_fills = narrow_16.tiles(16, n) * 8 >= sm_count * 3
        if unsplit_fills and fits_shared(narrow_16, shared_memory):
            rows_16 = SplitK(narrow_16, -(-k // narrow_16.block_k), 1, 16)
        if fits_shared(narrow_64, shared_memory):
            rows_64 = narrow_64
        if fits_shared(narrow_128, shared_memory):
            rows_128 = narrow_128
    return (
        rows_16,
        plan_split(rows_64, 64, n, k, sm_count, shared_memory, table),
        plan_split(rows_128, 128, n, k, sm_count, shared_memory, table),
    )


def programs(
    config: MatmulConfig, shared_memory: int | None = None, sm_count: int = 132, table: TileTable = DEFAULT_TABLE
) -> dict[tuple[str, Any], Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant: a small and a large tile, and in half
    precision one per decode size: its plain tiled program, or a split-K pair (product, reduce)."""
    dtype_name = tl_dtype(config.dtype)
    small, large = tiles_for(dtype_name, shared_memory, table) if shared_memory else tiles_for(dtype_name, table=table)
    n, k, dtype = config.n, config.k, config.dtype
    large = large_for(large, n, k, dtype.itemsize)
    built: dict[tuple[str, Any], Callable[[], Any]] = {
        ("small", small): _builder(n, k, dtype, small, sm_count),
        ("large", large): _builder(n, k, dtype, large, sm_count),
    }
    for plan in split_plans(config, sm_count, shared_memory or 227 * 1024, table):
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
    table = tile_table(properties.name)
    large = tiles_for(tl_dtype(dtype), shared_memory, table)[1]
    sm_count = properties.multi_processor_count
    built = compiled(config.label, programs(config, shared_memory, sm_count, table))
    kernel_of = {name: direct(kernel) for (name, _), kernel in built.items()}  # by variant name, as programs() keys
    small_kernel, large_kernel = kernel_of["small"], kernel_of["large"]
    decode = [
        (plan.max_m, plan.split, kernel_of[f"decode{plan.max_m}"], None)
        if plan.split == 1
        else (plan.max_m, plan.split, kernel_of[f"split{plan.max_m}"], kernel_of[f"reduce{plan.max_m}"])
        for plan in split_plans(config, sm_count, shared_memory, table)
    ]

    # The tiled programs' row blocks lie along their grid's second dimension, at most 65535 of them; a product of
    # more than 65535 small tiles' rows has tiles enough for the large one.
    most_rows = MAX_GRID_YZ * large.block_m
    why = f"65535 blocks of {large.block_m} rows along the second dimension of the TileLang kernel's grid"

    def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        m = a.shape[0]
        if m > most_rows:
            refuse_rows(config.label, "a", m, most_rows, why)
        if (a.data_ptr() | b.data_ptr()) % ALIGNMENT:  # a view into its allocation (read only: copied if so)
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
