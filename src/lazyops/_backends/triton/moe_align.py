"""The MoE token alignment in Triton (the spec: ``lazyops.specs.moe_align``), as vLLM's ``moe_align_block_size``.

Two paths, picked from ``T·k`` (the assignments, from ``topk_ids``' shape) and the factory's ``E`` alone, every
grid and size from ``T``, ``k``, ``E`` and the block size (nothing read on the host: a CUDA graph captures the call,
whichever path runs).

Up to :data:`SINGLE_ASSIGNMENTS` assignments (and fewer than :data:`SINGLE_KEYS` experts), one launch of
programs that share nothing, each taking ``TILE`` assignments (one program up to ``TILE``):

- each counts all the assignments itself, and those before its tile: two ``tl.histogram`` calls over at most 2048
  ids, cheaper than a launch. So each knows every expert's padded first row;
- each places its own assignments: the expert's first row, plus the earlier tiles' count, plus the earlier
  assignments of the same expert within the tile (a ``[TILE, TILE]`` comparison). Ascending within an expert, as
  the spec says, without atomics;
- each takes a share of the blocks: the block's expert (a search of its first row among the experts' ends) into
  ``expert_ids``, and the padding id ``T·k`` into the block's rows that no assignment takes. Every row of
  ``sorted_token_ids`` is written once, by one program: no program waits for another. The first program writes
  ``num_tokens_post_padded``.

Past that, three launches over chunks of ``CHUNK`` assignments:

1. each chunk counts its assignments per expert (one ``[CHUNK, E]`` comparison) into ``counts[chunk, E]``, and
   fills its share of ``sorted_token_ids`` with the padding id ``T·k``;
2. each tile of experts turns its column of counts into the exclusive prefix over chunks (``tl.cumsum`` over
   tiles of chunks) and writes the expert's total;
3. each chunk places its assignments: the expert's first row (from the padded totals' cumulative sum, which every
   program recomputes: ``E`` is at most a few hundred), plus the earlier chunks' count, plus the earlier
   assignments of the same expert within the chunk (a ``[CHUNK, CHUNK]`` comparison): ascending within an expert,
   as the spec says, without atomics. Each chunk also writes its share of ``expert_ids`` (a search of the block's
   first row among the experts' ends) and the first writes ``num_tokens_post_padded``.

Why two: on an H100 in a CUDA graph the three launches took 7.3-7.7 µs at decode sizes, where a tiny copy takes
1.1-1.5 µs; issue 36 asks ``moe_route_tl`` (4.5 µs, one launch) and ``moe_align_tl`` together for 10 µs or less at
``T`` up to 256. At those sizes the three dependent launches, not the work, are the cost. Nor would one program
doing everything answer at ``T = 256``: comparing 2048 assignments with 256 experts, or ranking them with
``tl.sort``, is about a million integer operations on one SM, 5-10 µs (estimated from the sm_90 code, not
measured); a histogram costs a few instructions an id, and the tiles spread the placement over the SMs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.moe_align import MoeAlignConfig, sizes, spec

#: The single launch's bound: up to ``T = 256`` tokens of top-8 (issue 36's sizes). Each of its programs loads and
#: counts all the assignments, 8 ids a thread at 2048; past that the three launches share the count out.
SINGLE_ASSIGNMENTS = 2048
#: ... and its histograms' bins: the experts and the absent ones' bin, so fewer than this many experts (DeepSeek-V3's
#: 256, Kimi K2's 384). A program's search of a block's expert compares ``[SINGLE_BLOCKS, bins]``.
SINGLE_KEYS = 512
#: Assignments a program of the single launch places: its ``[TILE, TILE]`` comparison is 16 values a thread, and 2048
#: assignments are 32 programs side by side. The interpreter runs programs one at a time: 256 there.
TILE, INTERPRETER_TILE = 64, 256
#: Blocks a step of the single launch's expert search and padding fill: ``[16, bins]`` comparisons, ``[16, rows]``
#: padding (fewer blocks a step past 128 rows a block, so that a step stays 2048 rows).
SINGLE_BLOCKS, SINGLE_ROWS = 16, 2048
#: Warps of a single-launch program: its ids, bins and comparisons spread over 256 threads.
SINGLE_WARPS = 8
#: ``tl.gather`` (Triton 3.3) looks an expert's first row up; an older Triton takes the three launches at every size.
HAS_GATHER = hasattr(tl, "gather")

#: Assignments a program: ``[CHUNK, E]`` and ``[CHUNK, CHUNK]`` comparisons stay a few thousand values a warp.
#: Triton's interpreter runs programs one at a time (about 5 ms each): 256 there, the conformance run 33 s -> ~10.
CHUNK, INTERPRETER_CHUNK = 64, 256
#: Chunks a step of the prefix pass, and experts a program of it.
PREFIX_CHUNKS, PREFIX_EXPERTS = 64, 32
#: Ids a step of the padding fill, and blocks a step of the expert-id search.
FILL_TILE, BLOCK_TILE = 256, 64


@triton.jit(do_not_specialize=["assignments", "blocks", "blocks_per"])
def _single_kernel(
    ids_ptr,
    sorted_ptr,
    expert_ids_ptr,
    post_padded_ptr,
    assignments,
    blocks,
    blocks_per,
    E: tl.constexpr,
    KEYS: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    WIDTH: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_STEP: tl.constexpr,
):
    program = tl.program_id(0)
    first = program * TILE
    # every program counts every assignment, and those before its tile. Bin E takes what an expert's bin must not:
    # the absent ones (outside [0, E)) as in the spec's reference, the lanes past the end, and (in ``earlier``) the
    # assignments from this tile on; so every value is a bin, whatever Triton does with one out of range
    index = tl.arange(0, WIDTH)
    ids = tl.load(ids_ptr + index, mask=index < assignments, other=-1)
    valid = (ids >= 0) & (ids < E)
    counts = tl.histogram(tl.where(valid, ids, E), KEYS)
    earlier = tl.histogram(tl.where(valid & (index < first), ids, E), KEYS)
    experts = tl.arange(0, KEYS)
    used = experts < E
    padded = tl.where(used, (counts + BLOCK - 1) // BLOCK * BLOCK, 0)
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    if program == 0:
        tl.store(post_padded_ptr, tl.sum(padded, axis=0))
    # this tile's assignments: the expert's first row, the earlier tiles' count, the earlier ones within the tile
    mine = first + tl.arange(0, TILE)
    tile_ids = tl.load(ids_ptr + mine, mask=mine < assignments, other=-1)
    placed = (tile_ids >= 0) & (tile_ids < E)
    same = tile_ids[:, None] == tile_ids[None, :]
    before = tl.arange(0, TILE)[None, :] < tl.arange(0, TILE)[:, None]
    within = tl.sum((same & before).to(tl.int32), axis=1)
    row = tl.gather(starts + earlier, tl.where(placed, tile_ids, E), axis=0) + within
    tl.store(sorted_ptr + row, mine, mask=placed)
    # this program's share of the blocks: the expert of each (-1 past the last used), and the padding in the rows
    # past the expert's assignments, which no program places anything into (all of a block past the last used)
    taken = tl.where(used, starts + counts, 0)
    lanes = tl.arange(0, BLOCK_ROWS)[None, :]
    block_first = program * blocks_per
    block_last = tl.minimum(block_first + blocks_per, blocks)
    for block_start in range(block_first, block_last, BLOCK_STEP):
        block = block_start + tl.arange(0, BLOCK_STEP)
        mine_blocks = block < block_last
        owner = tl.sum(((ends[None, :] <= block[:, None] * BLOCK) & used[None, :]).to(tl.int32), axis=1)
        tl.store(expert_ids_ptr + block, tl.where(owner < E, owner, -1), mask=mine_blocks)
        slots = block[:, None] * BLOCK + lanes
        padding = mine_blocks[:, None] & (lanes < BLOCK) & (slots >= tl.gather(taken, owner, axis=0)[:, None])
        tl.store(sorted_ptr + slots, tl.full((BLOCK_STEP, BLOCK_ROWS), 0, tl.int32) + assignments, mask=padding)


@triton.jit(do_not_specialize=["assignments", "padded_len", "fill_per"])
def _count_kernel(
    ids_ptr,
    sorted_ptr,
    counts_ptr,
    assignments,
    padded_len,
    fill_per,
    E: tl.constexpr,
    BLOCK_E: tl.constexpr,
    CHUNK: tl.constexpr,
    FILL_TILE: tl.constexpr,
):
    chunk = tl.program_id(0)
    index = chunk * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + index, mask=index < assignments, other=-1)
    experts = tl.arange(0, BLOCK_E)
    counts = tl.sum((ids[:, None] == experts[None, :]).to(tl.int32), axis=0)
    tl.store(counts_ptr + chunk * E + experts, counts, mask=experts < E)
    first = chunk * fill_per
    last = tl.minimum(first + fill_per, padded_len)
    for start in range(first, last, FILL_TILE):
        slots = start + tl.arange(0, FILL_TILE)
        tl.store(sorted_ptr + slots, tl.full((FILL_TILE,), 0, tl.int32) + assignments, mask=slots < last)


@triton.jit(do_not_specialize=["chunks"])
def _prefix_kernel(
    counts_ptr,
    totals_ptr,
    chunks,
    E: tl.constexpr,
    PREFIX_CHUNKS: tl.constexpr,
    PREFIX_EXPERTS: tl.constexpr,
):
    experts = tl.program_id(0) * PREFIX_EXPERTS + tl.arange(0, PREFIX_EXPERTS)
    carry = tl.zeros((PREFIX_EXPERTS,), dtype=tl.int32)
    for start in range(0, chunks, PREFIX_CHUNKS):
        rows = start + tl.arange(0, PREFIX_CHUNKS)
        where = counts_ptr + rows[:, None] * E + experts[None, :]
        keep = (rows[:, None] < chunks) & (experts[None, :] < E)
        tile = tl.load(where, mask=keep, other=0)
        tl.store(where, tl.cumsum(tile, axis=0) - tile + carry[None, :], mask=keep)
        carry += tl.sum(tile, axis=0)
    tl.store(totals_ptr + experts, carry, mask=experts < E)


@triton.jit(do_not_specialize=["assignments", "blocks", "blocks_per"])
def _place_kernel(
    ids_ptr,
    counts_ptr,
    totals_ptr,
    sorted_ptr,
    expert_ids_ptr,
    post_padded_ptr,
    assignments,
    blocks,
    blocks_per,
    E: tl.constexpr,
    BLOCK_E: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_TILE: tl.constexpr,
):
    chunk = tl.program_id(0)
    experts = tl.arange(0, BLOCK_E)
    used = experts < E
    padded = (tl.load(totals_ptr + experts, mask=used, other=0) + BLOCK - 1) // BLOCK * BLOCK
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    if chunk == 0:
        tl.store(post_padded_ptr, tl.sum(padded, axis=0))
    index = chunk * CHUNK + tl.arange(0, CHUNK)
    live = index < assignments
    ids = tl.load(ids_ptr + index, mask=live, other=-1)
    valid = live & (ids >= 0) & (ids < E)
    same = ids[:, None] == ids[None, :]
    earlier = tl.arange(0, CHUNK)[None, :] < tl.arange(0, CHUNK)[:, None]
    within = tl.sum((same & earlier).to(tl.int32), axis=1)
    before = tl.load(counts_ptr + chunk * E + ids, mask=valid, other=0)
    start = tl.sum(tl.where(ids[:, None] == experts[None, :], starts[None, :], 0), axis=1)
    tl.store(sorted_ptr + start + before + within, index, mask=valid)
    first = chunk * blocks_per
    last = tl.minimum(first + blocks_per, blocks)
    for block_start in range(first, last, BLOCK_TILE):
        block = block_start + tl.arange(0, BLOCK_TILE)
        row = block * BLOCK
        owner = tl.sum(((ends[None, :] <= row[:, None]) & used[None, :]).to(tl.int32), axis=1)
        tl.store(expert_ids_ptr + block, tl.where(owner < E, owner, -1), mask=block < last)


class Aligner:
    """``aligner(ids, sorted_token_ids, expert_ids, num_tokens_post_padded)``: the alignment for ``E`` experts and
    blocks of ``block`` rows of flat int32 ``ids``, in one launch or three (the module's docstring says which);
    outputs sized by :func:`lazyops.specs.moe_align.sizes`."""

    def __init__(self, num_experts: int, top_k: int, block: int) -> None:
        self.num_experts, self.top_k, self.block = num_experts, top_k, block
        block_e = next_power_of_2(num_experts)
        interpreted = interpreting(_count_kernel)
        self.chunk = chunk = INTERPRETER_CHUNK if interpreted else CHUNK
        self.count = Launcher(
            _count_kernel, {"E": num_experts, "BLOCK_E": block_e, "CHUNK": chunk, "FILL_TILE": FILL_TILE}
        )
        self.prefix = Launcher(
            _prefix_kernel, {"E": num_experts, "PREFIX_CHUNKS": PREFIX_CHUNKS, "PREFIX_EXPERTS": PREFIX_EXPERTS}
        )
        self.place = Launcher(
            _place_kernel,
            {"E": num_experts, "BLOCK_E": block_e, "CHUNK": chunk, "BLOCK": block, "BLOCK_TILE": BLOCK_TILE},
        )
        # The single launch: the most assignments it takes (none with too many experts, or without tl.gather), and
        # its launchers, one a power of two of the assignments (the ids a program counts: 64 to 2048, six binaries
        # at most), built on first use.
        self.single_most = SINGLE_ASSIGNMENTS if HAS_GATHER and num_experts < SINGLE_KEYS else 0
        self.tile = tile = INTERPRETER_TILE if interpreted else TILE
        rows = next_power_of_2(block)
        self.single_constexprs = {
            "E": num_experts,
            # the experts and the absent ones' bin; at least a warp's 32 lanes, among which Triton's histogram may
            # share the bins out
            "KEYS": max(32, next_power_of_2(num_experts + 1)),
            "BLOCK": block,
            "BLOCK_ROWS": rows,
            "TILE": tile,
            "BLOCK_STEP": max(1, min(SINGLE_BLOCKS, SINGLE_ROWS // rows)),
        }
        self.single_options = {} if interpreted else {"num_warps": SINGLE_WARPS}
        self.single: dict[int, Launcher] = {}

    def __call__(
        self, ids: torch.Tensor, sorted_ids: torch.Tensor, expert_ids: torch.Tensor, post_padded: torch.Tensor
    ) -> None:
        assignments = ids.numel()
        padded_len, blocks = sizes(assignments // self.top_k, self.top_k, self.num_experts, self.block)
        if assignments <= self.single_most:
            # inline arithmetic, not _common's helpers: at one token a Python frame is the host's cost of the call
            width = max(self.tile, 1 << (assignments - 1).bit_length())
            launch = self.single.get(width)
            if launch is None:
                constexprs = {**self.single_constexprs, "WIDTH": width}
                launch = self.single[width] = Launcher(_single_kernel, constexprs, **self.single_options)
            programs = -(-assignments // self.tile)
            launch((programs,), ids, sorted_ids, expert_ids, post_padded, assignments, blocks, -(-blocks // programs))
            return
        chunks = cdiv(assignments, self.chunk)
        counts = torch.empty(chunks * self.num_experts, dtype=torch.int32, device=ids.device)
        totals = torch.empty(self.num_experts, dtype=torch.int32, device=ids.device)
        self.count((chunks,), ids, sorted_ids, counts, assignments, padded_len, cdiv(padded_len, chunks))
        self.prefix((cdiv(self.num_experts, PREFIX_EXPERTS),), counts, totals, chunks)
        place_args = (sorted_ids, expert_ids, post_padded, assignments, blocks, cdiv(blocks, chunks))
        self.place((chunks,), ids, counts, totals, *place_args)


@spec.implementation(device_type=launch_device(_count_kernel))
def moe_align_tl(config: MoeAlignConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    aligner = Aligner(config.num_experts, config.top_k, config.block_size)

    def moe_align(
        topk_ids: torch.Tensor,
        sorted_token_ids: torch.Tensor,
        expert_ids: torch.Tensor,
        num_tokens_post_padded: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        aligner(topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded)
        return sorted_token_ids, expert_ids, num_tokens_post_padded

    return moe_align
