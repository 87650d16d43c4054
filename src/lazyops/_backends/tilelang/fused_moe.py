"""The experts of a sparse MoE layer in TileLang (the spec: ``lazyops.specs.fused_moe``): Triton's five launches.

The ``T·k`` assignments are sorted by expert into blocks of :data:`BLOCK_M` rows by ``moe_align_tl``'s three
programs (sizes and grids from ``T``, ``k`` and ``E`` alone, nothing read on the host); an ``expert_map`` turns the
global ids into local ones first (a gather on the device), and the assignments it marks absent are in no block,
their rows of the float32 partial sums zero. Then two grouped GEMMs over the blocks, a block one block of rows by
one tile of columns, each on ``matmul_tl``'s pattern (a software-pipelined loop over the depth, the weight's tiles
copied into shared memory, ``T.gemm`` into float32 fragments; float32 operands on CUDA cores, as ``matmul_tl``, since
tensor cores would round them to TF32). The rows are read through the sorted ids instead of a gathered copy: each
block stages its ``BLOCK_M`` ids in shared memory and loads its activation rows from them. A block whose expert is
-1 (past the last used block) runs no step of its loop.

1. ``gate_up``: the gate and up tiles of ``w13[e]`` (rows ``n`` and ``I + n``) into two accumulators, each rounded
   to the dtype, the activation (SiLU, or tanh GELU) in float32, times up, rounded, stored in the assignment's row
   of an ``[T·k, I]`` buffer;
2. ``down``: that buffer's rows times ``w2[e]``, scaled by the assignment's routing weight, stored as float32 in an
   ``[T·k, H]`` buffer; the sum over each token's ``k`` rows and the cast are one torch reduction, as Triton's.

One tile set for every token count (64-row blocks, ``wgmma`` in half precision), where Triton picks among four by
the rows an expert gets: each set is two more programs to compile on a GPU, and none has been timed. Declined (to
Triton): more than ``moe_align``'s 1024 experts. The programs are written against :mod:`._dialect`, so TileLang's C
target runs them on a CPU (tests/kernels/test_tilelang_moe.py); nothing here has run on a GPU yet
(``make gpu-moe-check``).
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func.

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang import moe_align
from lazyops._backends.tilelang._dialect import CUDA, Dialect
from lazyops._backends.tilelang._rows import ITEMSIZE, VECTOR_BYTES
from lazyops._backends.tilelang._runtime import (
    ALIGNMENT,
    F32,
    INDEX,
    aligned,
    compiled,
    direct,
    refuse_unsupported,
    tl_dtype,
)
from lazyops.specs._params import describe
from lazyops.specs.fused_moe import FusedMoeConfig, spec
from lazyops.specs.moe_align import MoeAlignConfig, sizes


@dataclass(frozen=True)
class Tiles:
    """A grouped GEMM's tile: rows (the alignment's block size), columns, depth, pipeline stages, threads."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int


#: Rows a block: the alignment's block size, and a ``wgmma``'s 64 rows.
BLOCK_M = 64
#: The gate/up GEMM holds two ``[64, 128]`` float32 accumulators (64 values a thread over two warpgroups).
GATE_UP = Tiles(BLOCK_M, 128, 64, 3, 256)
DOWN = Tiles(BLOCK_M, 128, 64, 3, 128)
#: float32 operands on CUDA cores: a shallower depth, as ``matmul_tl``'s float32 tiles.
GATE_UP_F32 = Tiles(BLOCK_M, 64, 32, 2, 256)
DOWN_F32 = Tiles(BLOCK_M, 64, 32, 2, 128)
#: The programs, in launch order: the alignment's three, then the two GEMMs.
VARIANTS = (*moe_align.VARIANTS, "gate_up", "down")
#: tanh(u) = 2 * sigmoid(2u) - 1, so 0.5 * g * (1 + tanh(u)) = g * sigmoid(2u): GELU's tanh form, as Triton's.
GELU_C, GELU_A = 0.7978845608028654, 0.044715


def unsupported(config: FusedMoeConfig) -> str | None:
    """Why these programs do not serve ``config`` (None when they do): the spec's ``supports`` hook."""
    if config.num_experts > moe_align.MAX_EXPERTS:
        return f"more than {moe_align.MAX_EXPERTS} experts: the alignment holds a count an expert in a block"
    return None


def align_config(config: FusedMoeConfig) -> MoeAlignConfig:
    """The alignment of this layer's local experts into the GEMMs' row blocks. Made here, not by ``moe_align_tl``'s
    ``bind``: under expert parallelism a rank may hold fewer experts than a token's ``top_k`` (the ids of other
    ranks' experts fall in no block), which the standalone kernel's ``bind`` refuses as a routing error."""
    experts, top_k = config.num_experts, config.top_k
    label = describe(moe_align.spec.name, num_experts=experts, top_k=top_k, block_size=BLOCK_M)
    return MoeAlignConfig(experts, top_k, BLOCK_M, label)


def aligned_rows(width: int, dtype: str) -> bool:
    """Whether a weight's rows of ``width`` elements are whole 16-byte vectors, what TileLang's TMA and ``cp.async``
    copies take; other widths are loaded element by element (TileLang 0.1.15 would emit a 2-byte ``cp.async``, which
    PTX lacks)."""
    return (width * ITEMSIZE[dtype]) % VECTOR_BYTES == 0


def sigmoid(x: Any) -> Any:
    """``1 / (1 + exp(-x))`` with ``exp`` of a non-positive argument only (``-|x|`` as a min: the C target has no
    fabs): no overflow at any ``x``."""
    small = T.exp(T.min(x, -x))
    return T.if_then_else(x >= 0, 1 / (1 + small), small / (1 + small))


def gate_up_program(config: FusedMoeConfig, dialect: Dialect = CUDA, tensor_cores: bool | None = None) -> Any:
    """``main(x[M, H], w13[E, 2I, H], sorted_token_ids[P], expert_ids[B], activated[A, I])``: block ``(b, n)``
    writes the activated gate/up product of block ``b``'s assignments and columns ``n``'s tile. ``tensor_cores``:
    ``T.gemm`` (default: for 16-bit dtypes) or float32 multiply-adds."""
    d = dialect
    H, INTER, E, K = config.hidden, config.intermediate, config.num_experts, config.top_k
    dtype = tl_dtype(config.dtype)
    gemm = dtype != F32 if tensor_cores is None else tensor_cores
    tiles = GATE_UP if dtype != F32 else GATE_UP_F32
    bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
    gelu = config.activation == "gelu"
    whole_rows = aligned_rows(H, dtype)
    M = T.dynamic("M", INDEX)
    P, B, A = T.dynamic("P, B, A", INDEX)

    def activate(gate: Any) -> Any:
        if gelu:
            return gate * sigmoid(2 * GELU_C * (gate + GELU_A * gate * gate * gate))
        return gate * sigmoid(gate)

    @T.prim_func
    def main(
        x: T.Tensor((M, H), dtype),
        w13: T.Tensor((E, 2 * INTER, H), dtype),
        sorted_token_ids: T.Tensor((P,), "int32"),
        expert_ids: T.Tensor((B,), "int32"),
        activated: T.Tensor((A, INTER), dtype),
    ):
        assignments = M * K
        with T.Kernel(B, T.ceildiv(INTER, bn), threads=tiles.threads) as (block, column):
            slots = d.shared((bm,), "int32")
            a_tile = d.shared((bm, bk), dtype)
            gate_tile = d.shared((bn, bk), dtype)
            up_tile = d.shared((bn, bk), dtype)
            gate = d.tile((bm, bn), F32)
            up = d.tile((bm, bn), F32)
            found = expert_ids[block]
            expert = T.max(found, 0)  # a block past the last used one (-1) runs no step
            for i in d.parallel(bm):
                slots[i] = sorted_token_ids[block * bm + i]
            T.clear(gate)
            T.clear(up)
            steps = T.if_then_else(found >= 0, T.ceildiv(H, bk), 0)
            for step in T.Pipelined(steps, num_stages=tiles.stages):
                for i, kk in d.parallel(bm, bk):
                    depth = step * bk + kk
                    token = T.min(slots[i] // K, M - 1)
                    a_tile[i, kk] = T.if_then_else(
                        slots[i] < assignments and depth < H, x[token, T.min(depth, H - 1)], T.cast(0, dtype)
                    )
                if whole_rows:
                    T.copy(w13[expert, column * bn : column * bn + bn, step * bk : step * bk + bk], gate_tile)
                    T.copy(
                        w13[expert, INTER + column * bn : INTER + column * bn + bn, step * bk : step * bk + bk], up_tile
                    )
                else:
                    for j, kk in d.parallel(bn, bk):
                        row, depth = T.min(column * bn + j, INTER - 1), T.min(step * bk + kk, H - 1)
                        inside = column * bn + j < INTER and step * bk + kk < H
                        gate_tile[j, kk] = T.if_then_else(inside, w13[expert, row, depth], T.cast(0, dtype))
                        up_tile[j, kk] = T.if_then_else(inside, w13[expert, INTER + row, depth], T.cast(0, dtype))
                if gemm:
                    T.gemm(a_tile, gate_tile, gate, transpose_B=True)
                    T.gemm(a_tile, up_tile, up, transpose_B=True)
                else:
                    for kk in T.serial(bk):
                        for i, j in d.parallel(bm, bn):
                            gate[i, j] += T.cast(a_tile[i, kk], F32) * T.cast(gate_tile[j, kk], F32)
                            up[i, j] += T.cast(a_tile[i, kk], F32) * T.cast(up_tile[j, kk], F32)
            for i, j in d.parallel(bm, bn):
                col = column * bn + j
                if slots[i] < assignments and col < INTER:
                    g = T.cast(T.cast(gate[i, j], dtype), F32)
                    u = T.cast(T.cast(up[i, j], dtype), F32)
                    activated[slots[i], col] = T.cast(activate(g) * u, dtype)

    return main


def down_program(config: FusedMoeConfig, dialect: Dialect = CUDA, tensor_cores: bool | None = None) -> Any:
    """``main(activated[A, I], w2[E, H, I], topk_weights[M, k], sorted_token_ids[P], expert_ids[B],
    partial[A, H])``: block ``(b, n)`` writes block ``b``'s assignments' rows of columns ``n``'s tile, scaled by
    their routing weights, in float32."""
    d = dialect
    H, INTER, E, K = config.hidden, config.intermediate, config.num_experts, config.top_k
    dtype = tl_dtype(config.dtype)
    gemm = dtype != F32 if tensor_cores is None else tensor_cores
    tiles = DOWN if dtype != F32 else DOWN_F32
    bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
    whole_rows = aligned_rows(INTER, dtype)
    M = T.dynamic("M", INDEX)
    P, B, A = T.dynamic("P, B, A", INDEX)

    @T.prim_func
    def main(
        activated: T.Tensor((A, INTER), dtype),
        w2: T.Tensor((E, H, INTER), dtype),
        topk_weights: T.Tensor((M, K), F32),
        sorted_token_ids: T.Tensor((P,), "int32"),
        expert_ids: T.Tensor((B,), "int32"),
        partial: T.Tensor((A, H), F32),
    ):
        assignments = M * K
        with T.Kernel(B, T.ceildiv(H, bn), threads=tiles.threads) as (block, column):
            slots = d.shared((bm,), "int32")
            a_tile = d.shared((bm, bk), dtype)
            b_tile = d.shared((bn, bk), dtype)
            acc = d.tile((bm, bn), F32)
            found = expert_ids[block]
            expert = T.max(found, 0)
            for i in d.parallel(bm):
                slots[i] = sorted_token_ids[block * bm + i]
            T.clear(acc)
            steps = T.if_then_else(found >= 0, T.ceildiv(INTER, bk), 0)
            for step in T.Pipelined(steps, num_stages=tiles.stages):
                for i, kk in d.parallel(bm, bk):
                    depth = step * bk + kk
                    row = T.min(slots[i], A - 1)
                    a_tile[i, kk] = T.if_then_else(
                        slots[i] < assignments and depth < INTER,
                        activated[row, T.min(depth, INTER - 1)],
                        T.cast(0, dtype),
                    )
                if whole_rows:
                    T.copy(w2[expert, column * bn : column * bn + bn, step * bk : step * bk + bk], b_tile)
                else:
                    for j, kk in d.parallel(bn, bk):
                        row, depth = T.min(column * bn + j, H - 1), T.min(step * bk + kk, INTER - 1)
                        inside = column * bn + j < H and step * bk + kk < INTER
                        b_tile[j, kk] = T.if_then_else(inside, w2[expert, row, depth], T.cast(0, dtype))
                if gemm:
                    T.gemm(a_tile, b_tile, acc, transpose_B=True)
                else:
                    for kk in T.serial(bk):
                        for i, j in d.parallel(bm, bn):
                            acc[i, j] += T.cast(a_tile[i, kk], F32) * T.cast(b_tile[j, kk], F32)
            for i, j in d.parallel(bm, bn):
                col = column * bn + j
                slot = slots[i]
                if slot < assignments and col < H:
                    partial[slot, col] = acc[i, j] * topk_weights[slot // K, slot % K]

    return main


def programs(config: FusedMoeConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant (in launch order)."""
    refuse_unsupported(spec.name, config, unsupported(config))
    aligned = moe_align.programs(align_config(config))
    return {
        **aligned,
        "gate_up": lambda: gate_up_program(config),
        "down": lambda: down_program(config),
    }


def fused_moe_launch(config: FusedMoeConfig, kernels: dict[str, Any]) -> Callable[..., torch.Tensor]:
    """The five launches of compiled (or CPU-built) programs and the buffers between them, sized from the shapes."""
    hidden, inter, top_k = config.hidden, config.intermediate, config.top_k
    alignment = align_config(config)
    align = moe_align.align_launch(alignment, {variant: kernels[variant] for variant in moe_align.VARIANTS})
    gate_up, down = direct(kernels["gate_up"]), direct(kernels["down"])

    def fused_moe(
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        expert_map: torch.Tensor | None,
    ) -> torch.Tensor:
        if (
            x.data_ptr() % ALIGNMENT
            or w13.data_ptr() % ALIGNMENT
            or w2.data_ptr() % ALIGNMENT
            or topk_weights.data_ptr() % ALIGNMENT
        ):  # a view that starts mid-allocation: the programs' vector and TMA loads assume ALIGNMENT
            x, w13, w2, topk_weights = aligned(x), aligned(w13), aligned(w2), aligned(topk_weights)
        tokens = x.shape[0]
        assignments = tokens * top_k
        padded, blocks = sizes(tokens, top_k, alignment.num_experts, BLOCK_M)
        sorted_ids = torch.empty(padded, dtype=torch.int32, device=x.device)
        expert_ids = torch.empty(blocks, dtype=torch.int32, device=x.device)
        post_padded = torch.empty(1, dtype=torch.int32, device=x.device)
        mapped = expert_map is not None and expert_map.numel() > 0
        if mapped:  # a gather on the device: global ids to local ones, -1 for the absent
            topk_ids = expert_map[topk_ids.long()]  # type: ignore[index]
        align(topk_ids, sorted_ids, expert_ids, post_padded)
        activated = x.new_empty(assignments, inter)
        # an absent expert's assignments are in no block: their rows must add nothing
        partial = (torch.zeros if mapped else torch.empty)(assignments, hidden, dtype=torch.float32, device=x.device)
        gate_up(x, w13, sorted_ids, expert_ids, activated)
        down(activated, w2, topk_weights, sorted_ids, expert_ids, partial)
        return partial.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)

    return fused_moe


@spec.implementation(device_type="cuda", supports=unsupported)
def fused_moe_tl(config: FusedMoeConfig) -> Callable[..., torch.Tensor]:
    return fused_moe_launch(config, compiled(config.label, programs(config)))
