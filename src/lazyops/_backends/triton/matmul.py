"""Matrix product ``a[M, k] @ b[k, n]`` with float32 accumulation.

Up to 128 tokens the product is a stream over the weight ``b``, and one program per output tile leaves SMs idle
(``[1, 4096] x [4096, 4096]`` is 32 tiles of 16 x 128 for 132 SMs). There ``k`` is split too (split-K, as the
public Triton split-K GEMMs do with a second program axis): program ``(tile, s)`` stores its float32 partial sum
over k-slice ``s`` into a float32 workspace ``[split, M, n]``, and a second kernel adds the slices in order and
casts. Those public kernels mostly ``tl.atomic_add`` into the output; the workspace keeps the result exact to
float32 accumulation (no 16-bit partial sums) and deterministic (no atomics, a fixed order), for one more launch.

The tiles are data, one table per device in ``configs/matmul.json`` (timed on an H200: docs/decisions/004 and 005);
:func:`tiling` is the rule that picks one for a product and splits ``k``.

A second kernel loads its tiles by the Tensor Memory Accelerator (Hopper's TMA: one instruction a tile, the
addresses and the edges done by the copy engine, no registers spent on pointers or masks) and stores by it too;
it is persistent when launched with fewer programs than tiles (each program walks the tiles ``programs`` apart,
its next tile's loads overlapping this one's epilogue). It takes what TMA can address: 16-bit types, rows of
16-byte multiples starting at 16-byte-aligned addresses; any other call runs the pointer kernel of the same tile.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from lazyops._backends._grid import refuse_rows
from lazyops._backends._tuned import device_table
from lazyops._backends.triton._common import cdiv, interpreting, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.matmul import MatmulConfig, spec

try:  # Triton >= 3.4 describes TMA copies on the host; without it every tiling runs the pointer kernel
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - depends on the installed Triton
    TensorDescriptor = None


@triton.jit
def _grouped(tile, blocks_m, blocks_n, GROUP_M: tl.constexpr):
    """The row and column block of output tile ``tile`` in grouped order: GROUP_M row blocks walked column by
    column, so the programs running together share both their a rows and their b columns in L2."""
    in_group = GROUP_M * blocks_n
    first_m = (tile // in_group) * GROUP_M
    group_m = tl.minimum(blocks_m - first_m, GROUP_M)
    return first_m + (tile % in_group) % group_m, (tile % in_group) // group_m


@triton.jit(do_not_specialize=["M"])
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    a_row_stride,
    c_row_stride,
    N: tl.constexpr,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    K_SLICE: tl.constexpr = 0,
):
    pid_m, pid_n = _grouped(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Edge tiles wrap around to valid rows and columns instead of masking every load; what they compute there is
    # never stored.
    a_rows = (rows % M).to(tl.int64)
    b_cols = cols % N
    # Split-K (K_SLICE > 0): this program takes k in [k_start, k_start + K_SLICE) and stores its float32 partial
    # sum as slice program_id(1) of c (then a contiguous [split, M, N] float32 workspace, c_row_stride N).
    k_start = 0
    k_length = K
    if K_SLICE:
        k_start = tl.program_id(1) * K_SLICE
        k_length = tl.minimum(K_SLICE, K - k_start)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * a_row_stride + (k_start + ks)[None, :]
    b_ptrs = b_ptr + (k_start + ks).to(tl.int64)[:, None] * N + b_cols[None, :]

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for step in range(0, tl.cdiv(k_length, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = k_length - step * BLOCK_K
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

    if K_SLICE:
        c_ptr += tl.program_id(1).to(tl.int64) * M * N
    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * c_row_stride + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows < M)[:, None] & (cols < N)[None, :])


@triton.jit(do_not_specialize=["M", "programs"])
def _matmul_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    programs,
    N: tl.constexpr,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
    K_SLICE: tl.constexpr = 0,
):
    # Tile t of the grouped order for t = program_id, program_id + programs, ...: one iteration when launched with
    # a program per tile, several when persistent. TMA fills what lies past M, N or K with zeros and clips the
    # store at the edges, so no tile needs a mask.
    # Split-K (K_SLICE > 0, one program a tile): this program takes k-slice program_id(1), K_SLICE long (the last
    # slice's steps past K load zeros), and stores its float32 partial sum as slice program_id(1) of c_desc, a
    # [split, M, N] descriptor (so a ragged row block is clipped at M, never written into the next slice).
    blocks_m = tl.cdiv(M, BLOCK_M)
    blocks_n = tl.cdiv(N, BLOCK_N)
    k_start = tl.program_id(1) * K_SLICE
    steps = K_SLICE // BLOCK_K if K_SLICE else tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), blocks_m * blocks_n, programs, flatten=True):
        pid_m, pid_n = _grouped(tile, blocks_m, blocks_n, GROUP_M)
        row = pid_m * BLOCK_M
        col = pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for step in range(0, steps):
            a = a_desc.load([row, k_start + step * BLOCK_K])
            b = b_desc.load([k_start + step * BLOCK_K, col])
            if UPCAST:  # the interpreter's bfloat16 tl.dot (see _matmul_kernel)
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        if K_SLICE:
            c_desc.store([tl.program_id(1), row, col], acc.reshape([1, BLOCK_M, BLOCK_N]))
        else:
            c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit(do_not_specialize=["M"])
def _sum_slices_kernel(partial_ptr, c_ptr, M, c_row_stride, N: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # The float32 partials of split-K, added in slice order (the same bits every run), cast once. The workspace
    # is contiguous, c's rows are c_row_stride apart (a division by the constant N finds an element's row).
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    size = M.to(tl.int64) * N  # one slice's elements, and the slices' offsets, in 64 bits
    mask = offsets < size
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(partial_ptr + s * size + offsets, mask=mask, other=0.0)
    c_offsets = (offsets // N) * c_row_stride + offsets % N
    tl.store(c_ptr + c_offsets, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _never_capturing() -> bool:
    return False


#: Whether this thread's current stream is capturing a CUDA graph (for tilings with ``tma_in_graphs_only``): torch's
#: C function where it has one (a fraction of a microsecond a call), else its public wrapper; without CUDA (the
#: interpreter) nothing is ever captured.
stream_is_capturing: Callable[[], bool] = (
    getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)
    if torch.cuda.is_available()
    else _never_capturing
)


@dataclass(frozen=True)
class Tiling:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    #: k-slices (split-K) and the length of each, a multiple of block_k; 1 and 0 without split-K
    split: int = 1
    k_slice: int = 0
    #: the TMA kernel (16-bit types on sm_90 and later; with split-K, one program a tile and slice), and at most
    #: this many programs an SM (0: one program a tile, none persistent)
    tma: bool = False
    persistent: int = 0
    #: with ``tma``: TMA only for a call captured into a CUDA graph, the pointer kernel of the same tile for one
    #: launched eagerly, where the three host descriptors cost more host time than TMA saves on the GPU
    tma_in_graphs_only: bool = False


#: tl.dot needs every tile side to be at least 16.
MIN_TILE = 16


#: Split-K up to this many tokens: there a 16-bit product is a stream over its weight, and its tiles alone leave SMs
#: idle (docs/decisions/004-gemm-decode-tiles.md); it is also the last token bucket of the decode tiles.
SPLIT_MAX_M = 128
#: Shared memory a Hopper block may use (227 KiB); ``build_matmul`` asks the device for its own figure.
HOPPER_SHARED_MEMORY = 227 * 1024
#: Shared memory left to Triton beyond the pipeline's stages (the epilogue's layout conversion, barriers), so that
#: a tiling fitted to a 99 KiB device (sm_86, sm_89) compiles there.
EPILOGUE_RESERVE = 8 * 1024
#: The most rows one call takes: the pointer kernel's row index (``pid_m * BLOCK_M`` plus a lane) and TMA's tile
#: coordinates are 32-bit, and Triton hands a descriptor's sizes over as 32-bit integers; with tiles of at most 128
#: rows every row index stays below 2**31 up to here. A 64-bit row index took the 128 x 128 bfloat16 tile from 183
#: to 255 registers a thread (ptxas, sm_90a), so a larger call, a thin product of over two billion rows, is refused.
MAX_ROWS = 2**31 - 128
#: The reduce kernel's block: 1024 float32 values, 4 warps, a float4 a thread per slice per pass.
SUM_BLOCK = 1024
#: ``build_matmul`` remembers its launch plan for each token count up to this one (an engine's decode batches and
#: short prefills): choosing costs about 5 µs of Python a call (docs/decisions/004-gemm-decode-tiles.md), and a
#: plan is a few small objects.
PLAN_CACHE_MAX_M = 1024
#: The tiles' table (``configs/matmul.json``), one per device.
TABLES = Path(__file__).with_name("configs") / "matmul.json"


@dataclass(frozen=True)
class TileTable:
    """One device's table of ``configs/matmul.json``: the tiles :func:`tiling` picks among, named by the largest
    token count each serves (``decode_16``: up to 16 tokens; ``wide_large`` and ``large``: beyond 256) and ``_f32``
    for float32, and the shortest k-slice of its split-K rule (so that a slice's pipeline fills)."""

    decode_16: Tiling
    decode_16_f32: Tiling
    decode_128: Tiling
    deep_128: Tiling
    mid_256: Tiling
    mid_256_f32: Tiling
    wide_large: Tiling
    large: Tiling
    large_f32: Tiling
    min_slice_steps: int


@functools.cache
def tile_table(device: str | None = None) -> TileTable:
    """The tiles for the GPU named ``device`` (``torch.cuda.get_device_name()``), or the default table."""
    table = device_table(TABLES, device)
    tiles: dict[str, Any] = {name: Tiling(**fields) for name, fields in table["tiles"].items()}
    return TileTable(**tiles, min_slice_steps=table["split_k"]["min_slice_steps"])


#: The default table (the H200's), and its tiles under the names docs/decisions/ gives them: the prefill tile
#: (16-bit, by TMA, one persistent program an SM), the tile up to 16 tokens (by TMA inside CUDA graphs only), the
#: deep tile from 65 to 128 tokens where 64 x 128 tiles leave half the SMs idle.
DEFAULT_TABLE = tile_table()
WIDE_LARGE, DECODE_16, DEEP_128 = DEFAULT_TABLE.wide_large, DEFAULT_TABLE.decode_16, DEFAULT_TABLE.deep_128


def through_pointers(tiles: Tiling) -> Tiling:
    """``tiles`` on the pointer kernel: the same tile, stages and split, no TMA and no persistent programs."""
    return dataclasses.replace(tiles, tma=False, persistent=0, tma_in_graphs_only=False)


def stage_bytes(block_m: int, block_n: int, block_k: int, dtype: torch.dtype) -> int:
    """The shared memory one pipeline stage takes: an a block and a b block."""
    return (block_m + block_n) * block_k * dtype.itemsize


def epilogue_bytes(tiles: Tiling, itemsize: int) -> int:
    """The shared memory a tiling's result takes on its way out: the whole tile of ``itemsize``-byte elements for
    a TMA store (4 for split-K's float32 partials), none otherwise (the pointer kernel stores from registers; what
    its layout conversion takes is in ``EPILOGUE_RESERVE``)."""
    return tiles.block_m * tiles.block_n * itemsize if tiles.tma else 0


def output_tiles(block_m: int, block_n: int, m: int, n: int) -> int:
    """How many ``block_m x block_n`` tiles an ``[m, n]`` result has."""
    return cdiv(m, block_m) * cdiv(n, block_n)


def tiling(
    m: int,
    n: int,
    k: int,
    dtype: torch.dtype,
    sm_count: int = 132,
    shared_memory: int = HOPPER_SHARED_MEMORY,
    table: TileTable = DEFAULT_TABLE,
) -> Tiling:
    """The tiles for a product of ``[m, k] @ [k, n]``, from ``table`` (the device's, :func:`tile_table`).

    ``m`` is bucketed (at most 16, at most 128, at most 256, more; the last split by how many large tiles it
    makes), so a kernel compiles at most five variants however its token count varies. Up to 128 tokens a 16-bit
    product is a stream over the weight: ``decode_16`` up to 16 tokens; up to 128 ``decode_128``, or ``deep_128``
    past its row block where its tiles would leave half the SMs idle and its stages fit. Then ``k`` is split (see
    the module's docstring) so that the tiles times the slices fill the SMs once, one program an SM in 16-bit types
    (every block slot in float32, not swept): ``split = sm_count // tiles``, never a second program an SM or a
    second wave, which measured slower (docs/decisions/004-gemm-decode-tiles.md). Beyond 128 tokens (float32: 16)
    ``mid_256`` up to 256, then in 16-bit types ``wide_large`` (TMA, persistent) once its tiles number at least
    half the SMs and two of its stages and its staged result fit the device, else ``large``
    (docs/decisions/005-gemm-prefill-tiles.md).
    A TMA tiling runs the pointer kernel where the GPU or the call rules TMA out (``build_matmul``). float32 runs
    on the FMA units (IEEE precision), where the ``_f32`` tiles keep the registers in bounds. Stages are dropped (to
    two at least) until a tile's pipeline and staged result fit the device's ``shared_memory`` per block less
    ``EPILOGUE_RESERVE``.
    """
    wide = dtype != torch.float32
    pipeline_memory = shared_memory - EPILOGUE_RESERVE
    large = table.wide_large  # the prefill tile, when the GPU holds it and the product fills half the SMs with it
    if m <= 16:
        config = table.decode_16 if wide else table.decode_16_f32
    elif m <= SPLIT_MAX_M and wide:
        config = table.decode_128
        deep = table.deep_128
        if (
            m > deep.block_m
            and deep.num_stages * stage_bytes(deep.block_m, deep.block_n, deep.block_k, dtype) <= pipeline_memory
            and output_tiles(deep.block_m, min(deep.block_n, max(MIN_TILE, next_power_of_2(n))), m, n) <= sm_count // 2
        ):
            config = deep
    elif m <= 256:
        config = table.mid_256 if wide else table.mid_256_f32
    elif (
        wide
        and 2 * stage_bytes(large.block_m, large.block_n, large.block_k, dtype) + epilogue_bytes(large, dtype.itemsize)
        <= pipeline_memory
        and output_tiles(large.block_m, large.block_n, m, n) >= sm_count // 2
    ):
        config = large
    elif wide:
        config = table.large
    else:
        config = table.large_f32
    block_n = min(config.block_n, max(MIN_TILE, next_power_of_2(n)))
    block_k = min(config.block_k, max(MIN_TILE, next_power_of_2(k)))
    stage = stage_bytes(config.block_m, block_n, block_k, dtype)
    stages = config.num_stages
    # up to SPLIT_MAX_M tokens the result may be split-K's float32 partials
    epilogue = epilogue_bytes(config, 4 if m <= SPLIT_MAX_M else dtype.itemsize)
    while stages > 2 and stages * stage + epilogue > pipeline_memory:
        stages -= 1
    split, k_slice = 1, 0
    if m <= SPLIT_MAX_M:
        tiles = output_tiles(config.block_m, block_n, m, n)
        slots = sm_count if wide else sm_count * max(1, shared_memory // (stages * stage + epilogue))
        wanted = min(slots // tiles, cdiv(k, block_k) // table.min_slice_steps)
        if wanted > 1:
            k_slice = cdiv(cdiv(k, block_k), wanted) * block_k
            split = cdiv(k, k_slice)
        if split == 1:
            k_slice = 0
    persistent = config.persistent if split == 1 else 0  # split-K: a program a tile and slice
    return Tiling(
        config.block_m,
        block_n,
        block_k,
        config.num_warps,
        stages,
        split,
        k_slice,
        config.tma,
        persistent,
        config.tma_in_graphs_only,
    )


@spec.implementation(device_type=launch_device(_matmul_kernel), strided_rows=True, writes_out=True)
def matmul_tl(config: MatmulConfig) -> Callable[..., None]:
    return build_matmul(config.n, config.k, config.dtype, label=config.label)


def build_matmul(
    n: int,
    k: int,
    dtype: torch.dtype,
    choose: Callable[[int, int, int, torch.dtype, int, int], Tiling] | None = None,
    label: str = "matmul_tl",
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]:
    """The launch ``matmul(a, b, out)`` for a ``[k, n]`` weight, its tiles picked per token count by ``choose``
    (by default :func:`tiling` over the current GPU's table; ``benchmarks/bench_gemm.py --sweep triton`` passes fixed
    tilings to time them); ``label`` names the kernel in a refusal."""
    upcast = interpreting(_matmul_kernel) and dtype != torch.float32
    if interpreting(_matmul_kernel):
        sm_count, shared_memory, device = 132, HOPPER_SHARED_MEMORY, None
    else:
        properties = torch.cuda.get_device_properties()
        sm_count = properties.multi_processor_count
        shared_memory = getattr(properties, "shared_memory_per_block_optin", HOPPER_SHARED_MEMORY)
        device = properties.name
    pick = choose if choose is not None else functools.partial(tiling, table=tile_table(device))
    # TMA needs Hopper or later (the interpreter emulates it) and a Triton that describes it on the host.
    tma_capable = TensorDescriptor is not None and (
        interpreting(_matmul_kernel) or torch.cuda.get_device_capability() >= (9, 0)
    )
    #: one launcher per tiling (a few: the token count is bucketed)
    launchers: dict[Tiling, Callable[..., None]] = {}

    def tile_constexprs(tiles: Tiling) -> dict[str, object]:
        """The compile-time values both kernels take: the weight's shape, the tile's, the interpreter's upcast."""
        return {
            "N": n,
            "K": k,
            "BLOCK_M": tiles.block_m,
            "BLOCK_N": tiles.block_n,
            "BLOCK_K": tiles.block_k,
            "GROUP_M": 8,
            "UPCAST": upcast,
        }

    def launcher(tiles: Tiling) -> Launcher:
        constexprs = {
            **tile_constexprs(tiles),
            "EVEN_K": k % tiles.block_k == 0 and k % max(tiles.k_slice, 1) == 0,
            "IEEE": dtype == torch.float32 or upcast,
            "K_SLICE": tiles.k_slice,
        }
        return Launcher(_matmul_kernel, constexprs, num_warps=tiles.num_warps, num_stages=tiles.num_stages)

    def tma_launcher(tiles: Tiling) -> Callable[..., None]:
        """``launch(grid, a, b, out, m, a_row_stride, out_row_stride)`` as the pointer kernel's launcher takes
        it, by TMA where the call's tensors allow it (16-byte-aligned starts and row strides; the weight's rows
        were checked when the tiling was chosen), else by the pointer kernel with the same tile."""
        tma = Launcher(
            _matmul_tma_kernel,
            {**tile_constexprs(tiles), "K_SLICE": tiles.k_slice if tiles.split > 1 else 0},
            num_warps=tiles.num_warps,
            num_stages=tiles.num_stages,
        )
        pointers = launchers.get(plain := through_pointers(tiles))
        if pointers is None:
            pointers = launchers[plain] = launcher(plain)
        most_programs = sm_count * tiles.persistent
        block_a, block_b, block_c = (
            [tiles.block_m, tiles.block_k],
            [tiles.block_k, tiles.block_n],
            [tiles.block_m, tiles.block_n],
        )
        itemsize = dtype.itemsize
        split = tiles.split

        def launch(
            grid: tuple[int, ...],
            a: torch.Tensor,
            b: torch.Tensor,
            out: torch.Tensor,
            m: int,
            a_row_stride: int,
            out_row_stride: int,
        ) -> None:
            if (
                a.data_ptr() | b.data_ptr() | out.data_ptr() | a_row_stride * itemsize | out_row_stride * itemsize
            ) & 15:
                pointers(grid, a, b, out, m, a_row_stride, out_row_stride)
                return
            a_desc = TensorDescriptor(a, [m, k], [a_row_stride, 1], block_a)
            b_desc = TensorDescriptor(b, [k, n], [n, 1], block_b)
            if split > 1:  # out is the float32 workspace [split, m, n]: a program a tile and slice
                partials = TensorDescriptor(out, [split, m, n], [m * n, n, 1], [1, *block_c])
                tma((grid[0], split), a_desc, b_desc, partials, m, grid[0])
                return
            programs = min(grid[0], most_programs) if most_programs else grid[0]
            c_desc = TensorDescriptor(out, [m, n], [out_row_stride, 1], block_c)
            tma((programs,), a_desc, b_desc, c_desc, m, programs)

        return launch

    #: the reduce of each split count
    sums: dict[int, Launcher] = {}

    def sum_slices(split: int) -> Launcher:
        launch = sums.get(split)
        if launch is None:
            constexprs = {"N": n, "SPLIT": split, "BLOCK": SUM_BLOCK}
            launch = sums[split] = Launcher(_sum_slices_kernel, constexprs, num_warps=4)
        return launch

    def launch_of(tiles: Tiling) -> Callable[..., None]:
        launch = launchers.get(tiles)
        if launch is None:
            launch = launchers[tiles] = tma_launcher(tiles) if tiles.tma else launcher(tiles)
        return launch

    #: what a token count launches: (launch, its grid's first axis, split, the reduce or None, the launch while a
    #: CUDA graph is captured or None for the same), remembered for token counts up to PLAN_CACHE_MAX_M: choosing
    #: costs about 5 µs of Python a call (``tiling``'s arithmetic and its dataclass), a decode step's whole budget
    #: on some hosts; larger products dwarf it.
    plans: dict[int, tuple[Callable[..., None], int, int, Launcher | None, Callable[..., None] | None]] = {}

    def plan(m: int) -> tuple[Callable[..., None], int, int, Launcher | None, Callable[..., None] | None]:
        if m > MAX_ROWS:  # here, not on every call: token counts up to PLAN_CACHE_MAX_M find their plan cached
            refuse_rows(label, "a", m, MAX_ROWS, "the Triton kernels index rows and address tiles in 32 bits")
        tiles = pick(m, n, k, dtype, sm_count, shared_memory)
        if tiles.tma and not (tma_capable and dtype.itemsize == 2 and (n * dtype.itemsize) % 16 == 0):
            tiles = through_pointers(tiles)
        launch, captured = launch_of(tiles), None
        if tiles.tma_in_graphs_only:  # eager calls take the pointer kernel of the same tile
            captured = launch
            launch = launch_of(through_pointers(tiles))
        grid = output_tiles(tiles.block_m, tiles.block_n, m, n)
        chosen = (launch, grid, tiles.split, sum_slices(tiles.split) if tiles.split > 1 else None, captured)
        if m <= PLAN_CACHE_MAX_M:
            plans[m] = chosen
        return chosen

    def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        m = a.shape[0]
        launch, grid, split, reduce, captured = plans.get(m) or plan(m)
        if captured is not None and stream_is_capturing():
            launch = captured
        if reduce is None:
            launch((grid,), a, b, out, m, a.stride(0), out.stride(0))
            return
        partial = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
        launch((grid, split), a, b, partial, m, a.stride(0), n)
        reduce((-(-(m * n) // SUM_BLOCK),), partial, out, m, out.stride(0))

    return matmul
