"""The experts of a sparse MoE layer in Triton (the spec: ``lazyops.specs.fused_moe``), as vLLM's ``fused_moe``.

The ``T·k`` assignments are sorted by expert into blocks of ``BLOCK_M`` rows (``moe_align_tl``'s launches, sizes
and grids from ``T``, ``k`` and ``E`` alone, nothing read on the host: a CUDA graph captures the whole call), each
block one expert's; an ``expert_map`` turns the global ids into local ones first (a gather on the device), and
the assignments it marks absent are in no block, their rows of the float32 partial sums zero. Then two
grouped GEMMs over the blocks, each program one block by one tile of columns, reading its rows through the sorted
ids instead of a gathered copy: the gate/up GEMM with the activation fused (both halves' tiles in one program,
each rounded to the dtype as the spec says), and the down GEMM scaled by the routing weight into a float32 row per
assignment, summed over the ``k`` assignments of each token last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device
from lazyops._backends.triton._launch import Launcher
from lazyops._backends.triton.moe_align import Aligner
from lazyops.specs.fused_moe import FusedMoeConfig, spec
from lazyops.specs.moe_align import sizes


@dataclass(frozen=True)
class Tiles:
    """One launch configuration: rows a block (one expert's assignments, the alignment's block size), the gate/up
    GEMM's column tile (two accumulators: gate and up), the down GEMM's (one), the reduction depth (halved for
    float32 operands, twice the bytes), warps and pipeline stages."""

    block_m: int
    gate_up_n: int
    down_n: int
    block_k: int
    warps: int
    stages: int


#: Tiles by the rows an expert gets when the routing is even (``T·k / E``), from vLLM's tuned H100 table for
#: Qwen3-30B-A3B's experts (``E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json``, keyed by ``T``): 16-row
#: blocks up to T = 128 (8 rows an expert), 32 at 256, 64 at 512 and 1024, 128 from 1536 on (96 rows an expert),
#: each with 64 to 256 columns and a depth of 64 to 128. vLLM's single accumulator of ``[BLOCK_M, 2·N]`` columns is
#: two of ``[BLOCK_M, N]`` here (gate and up in one program), so the gate/up tile has half its columns: the same
#: registers (128 float32 a thread at 128 x 128 x 2 over 8 warps). Chosen by reasoning, not measured: no GPU here.
TILES = (
    (16, Tiles(16, 64, 128, 128, 4, 3)),  # decode: fewer than 16 rows an expert
    (32, Tiles(32, 128, 256, 64, 8, 3)),
    (96, Tiles(64, 128, 256, 64, 8, 3)),
    (None, Tiles(128, 128, 256, 64, 8, 3)),  # prefill
)
#: The interpreter runs programs one at a time: 16-row blocks, one wide tile a block (the conformance run 52 s ->
#: under 30).
INTERPRETER_TILES = Tiles(16, 128, 128, 128, 4, 1)


def pick_tiles(tokens: int, top_k: int, experts: int, float32: bool = False) -> Tiles:
    """The :data:`TILES` entry for ``tokens`` (a shape: the choice reads nothing on the host)."""
    per_expert = tokens * top_k / experts
    chosen = next(tiles for bound, tiles in TILES if bound is None or per_expert < bound)
    if float32:  # 4-byte operands: half the depth keeps three stages within shared memory
        chosen = Tiles(chosen.block_m, chosen.gate_up_n, chosen.down_n, chosen.block_k // 2, chosen.warps, 3)
    return chosen


@triton.jit
def _sigmoid(x):
    """``1 / (1 + exp(-x))`` with ``exp`` of a non-positive argument only: no overflow at any ``x``."""
    small = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0 / (1.0 + small), small / (1.0 + small))


@triton.jit
def _nearest_bfloat16(x):
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=["assignments"])
def _gate_up_kernel(
    x_ptr,
    w13_ptr,
    h_ptr,
    sorted_ptr,
    expert_ptr,
    assignments,
    H: tl.constexpr,
    INTER: tl.constexpr,
    TOP_K: tl.constexpr,
    GELU: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    block = tl.program_id(0)
    expert = tl.load(expert_ptr + block)
    if expert < 0:
        return
    slot = tl.load(sorted_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = slot < assignments
    token = (slot // TOP_K).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    weight = w13_ptr + expert.to(tl.int64) * (2 * INTER * H)
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, H, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + token[:, None] * H + depth[None, :], mask=valid[:, None] & (depth[None, :] < H), other=0.0)
        keep = (cols[None, :] < INTER) & (depth[:, None] < H)
        b_gate = tl.load(weight + cols[None, :] * H + depth[:, None], mask=keep, other=0.0)
        b_up = tl.load(weight + (INTER + cols[None, :]) * H + depth[:, None], mask=keep, other=0.0)
        if UPCAST:  # Triton's interpreter multiplies bfloat16 tiles as raw bits (see triton/matmul.py)
            a, b_gate, b_up = a.to(tl.float32), b_gate.to(tl.float32), b_up.to(tl.float32)
        gate = tl.dot(a, b_gate, gate, input_precision=PRECISION)
        up = tl.dot(a, b_up, up, input_precision=PRECISION)
    dtype = h_ptr.dtype.element_ty
    if UPCAST:  # the interpreter narrows to bfloat16 by truncation: round to nearest even first, so it is exact
        gate, up = _nearest_bfloat16(gate), _nearest_bfloat16(up)
    gate = gate.to(dtype).to(tl.float32)
    up = up.to(dtype).to(tl.float32)
    if GELU:
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        activated = gate * _sigmoid(2.0 * inner)  # 0.5 * gate * (1 + tanh(inner))
    else:
        activated = gate * _sigmoid(gate)
    activated = activated * up
    if UPCAST:
        activated = _nearest_bfloat16(activated)
    rows = slot.to(tl.int64)[:, None]
    tl.store(h_ptr + rows * INTER + cols[None, :], activated.to(dtype), mask=valid[:, None] & (cols < INTER))


@triton.jit(do_not_specialize=["assignments"])
def _down_kernel(
    h_ptr,
    w2_ptr,
    weights_ptr,
    partial_ptr,
    sorted_ptr,
    expert_ptr,
    assignments,
    H: tl.constexpr,
    INTER: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    block = tl.program_id(0)
    expert = tl.load(expert_ptr + block)
    if expert < 0:
        return
    slot = tl.load(sorted_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = slot < assignments
    rows = slot.to(tl.int64)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    weight = w2_ptr + expert.to(tl.int64) * (H * INTER)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, INTER, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        a = tl.load(h_ptr + rows * INTER + depth[None, :], mask=valid[:, None] & (depth[None, :] < INTER), other=0.0)
        keep = (cols[None, :] < H) & (depth[:, None] < INTER)
        b = tl.load(weight + cols[None, :] * INTER + depth[:, None], mask=keep, other=0.0)
        if UPCAST:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    scale = tl.load(weights_ptr + slot, mask=valid, other=0.0)
    tl.store(partial_ptr + rows * H + cols[None, :], acc * scale[:, None], mask=valid[:, None] & (cols < H))


@spec.implementation(device_type=launch_device(_gate_up_kernel))
def fused_moe_tl(config: FusedMoeConfig) -> Callable[..., torch.Tensor]:
    return build_fused_moe(config)


def build_fused_moe(
    config: FusedMoeConfig, choose: Callable[[int, int, int, bool], Tiles] = pick_tiles
) -> Callable[..., torch.Tensor]:
    """The experts' call, its tiles ``choose(tokens, top_k, experts, float32)`` (the rule :func:`pick_tiles`; a
    benchmark's sweep passes one tile set: ``bench_kernels.py --moe --tiles``)."""
    hidden, inter, experts, top_k = config.hidden, config.intermediate, config.num_experts, config.top_k
    interpreted = interpreting(_gate_up_kernel)
    upcast = config.dtype == torch.bfloat16 and interpreted
    # float32 inputs as float32, not TF32; 16-bit ones ignore it
    precision = "ieee" if config.dtype == torch.float32 or upcast else "tf32"
    shapes = {"H": hidden, "INTER": inter, "PRECISION": precision, "UPCAST": upcast}
    built: dict[Tiles, tuple[Aligner, Launcher, Launcher]] = {}

    def launchers(tiles: Tiles) -> tuple[Aligner, Launcher, Launcher]:
        """The alignment and the two GEMMs for ``tiles``, built on first use (a few tile sets a factory)."""
        if tiles not in built:
            common = {**shapes, "BLOCK_M": tiles.block_m, "BLOCK_K": tiles.block_k}
            options = {} if interpreted else {"num_warps": tiles.warps, "num_stages": tiles.stages}
            gelu = config.activation == "gelu"
            gate_up_constexprs = {**common, "TOP_K": top_k, "GELU": gelu, "BLOCK_N": tiles.gate_up_n}
            built[tiles] = (
                Aligner(experts, top_k, tiles.block_m),
                Launcher(_gate_up_kernel, gate_up_constexprs, **options),
                Launcher(_down_kernel, {**common, "BLOCK_N": tiles.down_n}, **options),
            )
        return built[tiles]

    def fused_moe(
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        expert_map: torch.Tensor | None,
    ) -> torch.Tensor:
        tokens = x.shape[0]
        assignments = tokens * top_k
        tiles = INTERPRETER_TILES if interpreted else choose(tokens, top_k, experts, x.dtype == torch.float32)
        aligner, gate_up, down = launchers(tiles)
        padded_len, blocks = sizes(tokens, top_k, experts, tiles.block_m)
        sorted_ids = torch.empty(padded_len, dtype=torch.int32, device=x.device)
        expert_ids = torch.empty(blocks, dtype=torch.int32, device=x.device)
        post_padded = torch.empty(1, dtype=torch.int32, device=x.device)
        mapped = expert_map is not None and expert_map.numel() > 0
        if mapped:
            topk_ids = expert_map[topk_ids.reshape(-1).long()]  # type: ignore[index]
        aligner(topk_ids, sorted_ids, expert_ids, post_padded)
        activated = x.new_empty(assignments, inter)
        partial = (torch.zeros if mapped else torch.empty)(assignments, hidden, dtype=torch.float32, device=x.device)
        grid = (blocks, cdiv(inter, tiles.gate_up_n))
        gate_up(grid, x, w13, activated, sorted_ids, expert_ids, assignments)
        grid = (blocks, cdiv(hidden, tiles.down_n))
        down(grid, activated, w2, topk_weights, partial, sorted_ids, expert_ids, assignments)
        return partial.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)

    return fused_moe
