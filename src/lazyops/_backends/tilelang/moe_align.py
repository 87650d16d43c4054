"""The MoE token alignment in TileLang (the spec: ``lazyops.specs.moe_align``): Triton's three launches.

Every grid and size comes from ``T``, ``k``, ``E`` and the block size alone (nothing read on the host: a CUDA graph
captures the call), over chunks of :data:`CHUNK` assignments (``topk_ids`` read as one flat list):

1. ``count``: each chunk counts its assignments per expert into ``counts[chunk, E]`` (a serial pass over the
   chunk's ids in shared memory, the experts spread over the threads) and fills its share of
   ``sorted_token_ids`` with the padding id ``T·k``;
2. ``prefix``: one block turns each expert's column of counts into the exclusive prefix over chunks, in place (a
   serial pass over the chunks, a thread an expert), rounds each expert's total up to whole blocks and writes every
   expert's first and last padded row (``bounds[2, E]``, an inclusive sum over the experts) and
   ``num_tokens_post_padded``;
3. ``place``: each chunk places its assignments at the expert's first row, plus the earlier chunks' count, plus the
   earlier assignments of the same expert within the chunk (a serial pass over the chunk's ids): ascending within an
   expert, as the spec says, without atomics; and writes its share of ``expert_ids`` (each block's owner: the
   number of experts that end at or before its first row, -1 past the last).

Triton's program makes the same three passes (its prefix spread over programs of 32 experts, the padded totals'
sum recomputed by every placing program), so the outputs are the same, exactly. Triton compares ``[CHUNK, E]`` and
``[CHUNK, CHUNK]`` tiles at once; here a block walks the chunk's ids one at a time with every thread comparing its
own experts or assignments, which keeps a block's registers small for any ``E`` up to :data:`MAX_EXPERTS` (more are
declined, to Triton). The scratch (``counts``, ``bounds``) is allocated by each call, sized from the shapes.

The programs are written against :mod:`._dialect`, so TileLang's C target runs them on a CPU
(tests/kernels/test_tilelang_moe.py); nothing here has run on a GPU yet (``make gpu-moe-check``).
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._dialect import CUDA, Dialect
from lazyops._backends.tilelang._rows import next_power_of_two
from lazyops._backends.tilelang._runtime import (
    ALIGNMENT,
    INDEX,
    compiled,
    direct,
    launch_with_copies,
    refuse_unsupported,
)
from lazyops.specs.moe_align import MoeAlignConfig, spec

#: Assignments a block, one a thread.
CHUNK = 128
THREADS = 128
#: Padding ids a block stores a step, and blocks of ``expert_ids`` it searches a step.
FILL_TILE, BLOCK_TILE = 512, 128
#: Experts at most: a block holds a count a expert (8 a thread at 1024).
MAX_EXPERTS = 1024
#: The programs, in launch order.
VARIANTS = ("count", "prefix", "place")
I32 = "int32"


def unsupported(config: MoeAlignConfig) -> str | None:
    """Why these programs do not serve ``config`` (None when they do): the spec's ``supports`` hook."""
    if config.num_experts > MAX_EXPERTS:
        return f"more than {MAX_EXPERTS} experts: a block holds a count an expert"
    return None


def expert_width(num_experts: int) -> int:
    """The experts padded to a power of two, at least a warp's worth."""
    return max(32, next_power_of_two(num_experts))


def chunks_of(assignments: Any) -> Any:
    """Chunks of :data:`CHUNK` assignments (an int, or a TileLang expression inside a program)."""
    return (assignments + CHUNK - 1) // CHUNK


def count_program(config: MoeAlignConfig, dialect: Dialect = CUDA) -> Any:
    """``main(topk_ids[M, k], sorted_token_ids[P], counts[C, E])``: a block a chunk of assignments."""
    d = dialect
    E, K, width = config.num_experts, config.top_k, expert_width(config.num_experts)
    M = T.dynamic("M", INDEX)
    P, C = T.dynamic("P, C", INDEX)

    @T.prim_func
    def main(
        topk_ids: T.Tensor((M, K), I32),
        sorted_token_ids: T.Tensor((P,), I32),
        counts: T.Tensor((C, E), I32),
    ):
        assignments = M * K
        with T.Kernel(chunks_of(assignments), threads=THREADS) as chunk:
            ids = d.shared((CHUNK,), I32)
            found = d.tile((width,), I32)
            for i in d.parallel(CHUNK):
                index = chunk * CHUNK + i
                ids[i] = T.if_then_else(index < assignments, topk_ids[index // K, index % K], -1)
            T.clear(found)
            for i in T.serial(CHUNK):
                for e in d.parallel(width):
                    found[e] = found[e] + T.if_then_else(ids[i] == e, 1, 0)
            for e in d.parallel(width):
                if e < E:
                    counts[chunk, e] = found[e]
            share = T.ceildiv(P, chunks_of(assignments))
            end = T.min(chunk * share + share, P)
            for step in T.serial(T.ceildiv(share, FILL_TILE)):
                for f in d.parallel(FILL_TILE):
                    slot = chunk * share + step * FILL_TILE + f
                    if slot < end:
                        sorted_token_ids[slot] = T.cast(assignments, I32)

    return main


def prefix_program(config: MoeAlignConfig, dialect: Dialect = CUDA) -> Any:
    """``main(topk_ids[M, k], counts[C, E], bounds[2, E], num_tokens_post_padded[1])``: one block; ``topk_ids`` is
    read for its token count only."""
    d = dialect
    E, K, block, width = config.num_experts, config.top_k, config.block_size, expert_width(config.num_experts)
    M = T.dynamic("M", INDEX)
    C = T.dynamic("C", INDEX)

    @T.prim_func
    def main(
        topk_ids: T.Tensor((M, K), I32),
        counts: T.Tensor((C, E), I32),
        bounds: T.Tensor((2, E), I32),
        num_tokens_post_padded: T.Tensor((1,), I32),
    ):
        with T.Kernel(1, threads=min(width, 1024)):
            carry = d.tile((width,), I32)
            current = d.tile((width,), I32)
            ends = d.tile((width,), I32)
            padded = d.shared((width,), I32)
            T.clear(carry)
            for c in T.serial(chunks_of(M * K)):
                for e in d.parallel(width):
                    current[e] = T.if_then_else(e < E, counts[c, T.min(e, E - 1)], 0)
                for e in d.parallel(width):  # a separate loop: every count read before its place is written
                    if e < E:
                        counts[c, e] = carry[e]
                    carry[e] = carry[e] + current[e]
            for e in d.parallel(width):
                padded[e] = (carry[e] + block - 1) // block * block
            T.clear(ends)
            for f in T.serial(E):
                for e in d.parallel(width):
                    ends[e] = ends[e] + T.if_then_else(f <= e, padded[f], 0)
            for e in d.parallel(width):
                if e < E:
                    bounds[0, e] = ends[e] - padded[e]
                    bounds[1, e] = ends[e]
                if e == E - 1:
                    num_tokens_post_padded[0] = ends[e]

    return main


def place_program(config: MoeAlignConfig, dialect: Dialect = CUDA) -> Any:
    """``main(topk_ids[M, k], counts[C, E], bounds[2, E], sorted_token_ids[P], expert_ids[B])``: a block a chunk,
    ``counts`` holding the prefix over chunks."""
    d = dialect
    E, K, block = config.num_experts, config.top_k, config.block_size
    width = expert_width(E)
    M = T.dynamic("M", INDEX)
    P, B, C = T.dynamic("P, B, C", INDEX)

    @T.prim_func
    def main(
        topk_ids: T.Tensor((M, K), I32),
        counts: T.Tensor((C, E), I32),
        bounds: T.Tensor((2, E), I32),
        sorted_token_ids: T.Tensor((P,), I32),
        expert_ids: T.Tensor((B,), I32),
    ):
        assignments = M * K
        with T.Kernel(chunks_of(assignments), threads=THREADS) as chunk:
            ids = d.shared((CHUNK,), I32)
            ends = d.shared((width,), I32)
            within = d.tile((CHUNK,), I32)
            owner = d.tile((BLOCK_TILE,), I32)
            for i in d.parallel(CHUNK):
                index = chunk * CHUNK + i
                ids[i] = T.if_then_else(index < assignments, topk_ids[index // K, index % K], -1)
            for e in d.parallel(width):
                ends[e] = T.if_then_else(e < E, bounds[1, T.min(e, E - 1)], 0)
            T.clear(within)
            for j in T.serial(CHUNK):
                for i in d.parallel(CHUNK):
                    within[i] = within[i] + T.if_then_else(j < i and ids[j] == ids[i], 1, 0)
            for i in d.parallel(CHUNK):
                expert = ids[i]
                if expert >= 0 and expert < E:  # past the end the id is -1
                    slot = bounds[0, expert] + counts[chunk, expert] + within[i]
                    sorted_token_ids[slot] = T.cast(chunk * CHUNK + i, I32)
            share = T.ceildiv(B, chunks_of(assignments))
            end = T.min(chunk * share + share, B)
            for step in T.serial(T.ceildiv(share, BLOCK_TILE)):
                T.clear(owner)
                for e in T.serial(E):
                    for b in d.parallel(BLOCK_TILE):
                        first_row = (chunk * share + step * BLOCK_TILE + b) * block
                        owner[b] = owner[b] + T.if_then_else(T.cast(ends[e], INDEX) <= first_row, 1, 0)
                for b in d.parallel(BLOCK_TILE):
                    index = chunk * share + step * BLOCK_TILE + b
                    if index < end:
                        expert_ids[index] = T.if_then_else(owner[b] < E, owner[b], -1)

    return main


BUILDERS = {"count": count_program, "prefix": prefix_program, "place": place_program}


def programs(config: MoeAlignConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant (in launch order)."""
    refuse_unsupported(spec.name, config, unsupported(config))
    return {variant: (lambda build=BUILDERS[variant]: build(config)) for variant in VARIANTS}  # type: ignore[misc]


def align_launch(
    config: MoeAlignConfig, kernels: dict[str, Any]
) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The three launches of compiled (or CPU-built) programs, with the scratch they share; a misaligned output
    (the programs assume :data:`ALIGNMENT`) is written through a contiguous copy."""
    count, prefix, place = (direct(kernels[variant]) for variant in VARIANTS)
    experts = config.num_experts

    def launch(
        topk_ids: torch.Tensor, sorted_ids: torch.Tensor, expert_ids: torch.Tensor, post_padded: torch.Tensor
    ) -> None:
        chunks = (topk_ids.numel() + CHUNK - 1) // CHUNK
        counts = torch.empty(chunks, experts, dtype=torch.int32, device=topk_ids.device)
        bounds = torch.empty(2, experts, dtype=torch.int32, device=topk_ids.device)
        count(topk_ids, sorted_ids, counts)
        prefix(topk_ids, counts, bounds, post_padded)
        place(topk_ids, counts, bounds, sorted_ids, expert_ids)

    def moe_align(
        topk_ids: torch.Tensor,
        sorted_token_ids: torch.Tensor,
        expert_ids: torch.Tensor,
        num_tokens_post_padded: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if (
            topk_ids.data_ptr() % ALIGNMENT
            or sorted_token_ids.data_ptr() % ALIGNMENT
            or expert_ids.data_ptr() % ALIGNMENT
            or num_tokens_post_padded.data_ptr() % ALIGNMENT
        ):
            launch_with_copies(launch, (topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded), (1, 2, 3))
        else:
            launch(topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded)
        return sorted_token_ids, expert_ids, num_tokens_post_padded

    return moe_align


@spec.implementation(device_type="cuda", supports=unsupported)
def moe_align_tl(config: MoeAlignConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    return align_launch(config, compiled(config.label, programs(config)))
