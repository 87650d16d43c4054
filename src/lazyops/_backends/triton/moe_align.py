"""The MoE token alignment in Triton (the spec: ``lazyops.specs.moe_align``), as vLLM's ``moe_align_block_size``.

Three launches over chunks of ``CHUNK`` assignments, every grid and size from ``T``, ``k``, ``E`` and the block
size alone (nothing read on the host: a CUDA graph captures the call):

1. each chunk counts its assignments per expert (one ``[CHUNK, E]`` comparison) into ``counts[chunk, E]``, and
   fills its share of ``sorted_token_ids`` with the padding id ``T·k``;
2. each tile of experts turns its column of counts into the exclusive prefix over chunks (``tl.cumsum`` over
   tiles of chunks) and writes the expert's total;
3. each chunk places its assignments: the expert's first row (from the padded totals' cumulative sum, which every
   program recomputes: ``E`` is at most a few hundred), plus the earlier chunks' count, plus the earlier
   assignments of the same expert within the chunk (a ``[CHUNK, CHUNK]`` comparison): ascending within an expert,
   as the spec says, without atomics. Each chunk also writes its share of ``expert_ids`` (a search of the block's
   first row among the experts' ends) and the first writes ``num_tokens_post_padded``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.moe_align import MoeAlignConfig, sizes, spec

#: Assignments a program: ``[CHUNK, E]`` and ``[CHUNK, CHUNK]`` comparisons stay a few thousand values a warp.
#: Triton's interpreter runs programs one at a time (about 5 ms each): 256 there, the conformance run 33 s -> ~10.
CHUNK, INTERPRETER_CHUNK = 64, 256
#: Chunks a step of the prefix pass, and experts a program of it.
PREFIX_CHUNKS, PREFIX_EXPERTS = 64, 32
#: Ids a step of the padding fill, and blocks a step of the expert-id search.
FILL_TILE, BLOCK_TILE = 256, 64


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
    """``aligner(ids, sorted_token_ids, expert_ids, num_tokens_post_padded)``: the three launches for ``E`` experts
    and blocks of ``block`` rows, on flat int32 ``ids``; outputs sized by :func:`lazyops.specs.moe_align.sizes`."""

    def __init__(self, num_experts: int, top_k: int, block: int) -> None:
        self.num_experts, self.top_k, self.block = num_experts, top_k, block
        block_e = next_power_of_2(num_experts)
        self.chunk = chunk = INTERPRETER_CHUNK if interpreting(_count_kernel) else CHUNK
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

    def __call__(
        self, ids: torch.Tensor, sorted_ids: torch.Tensor, expert_ids: torch.Tensor, post_padded: torch.Tensor
    ) -> None:
        assignments = ids.numel()
        padded_len, blocks = sizes(assignments // self.top_k, self.top_k, self.num_experts, self.block)
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
