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

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device
from lazyops._backends.triton._launch import Launcher
from lazyops._backends.triton.moe_align import Aligner
from lazyops.specs.fused_moe import FusedMoeConfig, spec
from lazyops.specs.moe_align import sizes

#: Rows a block (one expert's tokens), columns and reduction depth a program: tl.dot's smallest tiles (16) serve
#: the interpreter and decode; tuned tiles per device are for the GPU sweep.
BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 32


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
    hidden, inter, experts, top_k = config.hidden, config.intermediate, config.num_experts, config.top_k
    upcast = config.dtype == torch.bfloat16 and interpreting(_gate_up_kernel)
    # float32 inputs as float32, not TF32; 16-bit ones ignore it
    precision = "ieee" if config.dtype == torch.float32 or upcast else "tf32"
    # the interpreter runs programs one at a time: one wide tile a block (the conformance run 52 s -> under 30)
    wide = 128 if interpreting(_gate_up_kernel) else BLOCK_N
    tiles = {"PRECISION": precision, "UPCAST": upcast, "BLOCK_M": BLOCK_M, "BLOCK_N": wide, "BLOCK_K": wide}
    shapes = {"H": hidden, "INTER": inter}
    gate_up = Launcher(
        _gate_up_kernel,
        {**shapes, "TOP_K": top_k, "GELU": config.activation == "gelu", **tiles},
    )
    down = Launcher(_down_kernel, {**shapes, **tiles})
    inter_tiles, hidden_tiles = cdiv(inter, wide), cdiv(hidden, wide)
    aligner = Aligner(experts, top_k, BLOCK_M)

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
        padded_len, blocks = sizes(tokens, top_k, experts, BLOCK_M)
        sorted_ids = torch.empty(padded_len, dtype=torch.int32, device=x.device)
        expert_ids = torch.empty(blocks, dtype=torch.int32, device=x.device)
        post_padded = torch.empty(1, dtype=torch.int32, device=x.device)
        mapped = expert_map is not None and expert_map.numel() > 0
        if mapped:
            topk_ids = expert_map[topk_ids.reshape(-1).long()]  # type: ignore[index]
        aligner(topk_ids, sorted_ids, expert_ids, post_padded)
        activated = x.new_empty(assignments, inter)
        partial = (torch.zeros if mapped else torch.empty)(assignments, hidden, dtype=torch.float32, device=x.device)
        gate_up((blocks, inter_tiles), x, w13, activated, sorted_ids, expert_ids, assignments)
        down((blocks, hidden_tiles), activated, w2, topk_weights, partial, sorted_ids, expert_ids, assignments)
        return partial.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)

    return fused_moe
