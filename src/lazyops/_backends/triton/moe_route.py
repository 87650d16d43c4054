"""The MoE router in Triton (the spec: ``lazyops.specs.moe_route``): softmax and top-k of a tile of tokens a program.

A program holds ``ROWS`` tokens' logits ``[ROWS, E]`` in registers (E is at most a few hundred), takes the row's
maximum ``k`` times, each time the lowest column holding it (the spec's tie rule) and masks that column out, and
keeps the selected probabilities in a ``[ROWS, K]`` tile so that the renormalisation needs no second pass. Several
tokens a program rather than one: one token a program is a grid of thousands of tiny programs, which Triton's
interpreter runs one at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.moe_route import MoeRouteConfig, spec

#: Tokens a program: enough that the interpreter runs few programs, few enough that ``[ROWS, E]`` fits registers.
ROWS = 16


@triton.jit(do_not_specialize=["M"])
def _moe_route_kernel(
    logits_ptr,
    weights_ptr,
    ids_ptr,
    M,
    logits_stride,
    weights_stride,
    ids_stride,
    E: tl.constexpr,
    K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ROWS: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < M
    rows64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_E)[None, :]
    logits = tl.load(logits_ptr + rows64 * logits_stride + cols, mask=live[:, None] & (cols < E), other=-float("inf"))
    logits = tl.where(live[:, None], logits.to(tl.float32), 0.0)  # a row past the end: finite, never stored
    largest = tl.max(logits, axis=1)
    total = tl.sum(tl.exp(logits - largest[:, None]), axis=1)
    slots = tl.arange(0, BLOCK_K)[None, :]
    chosen = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
    chosen_ids = tl.zeros((ROWS, BLOCK_K), dtype=tl.int32)
    remaining = logits
    for slot in tl.static_range(K):
        best = tl.max(remaining, axis=1)
        expert = tl.min(tl.where(remaining == best[:, None], cols, BLOCK_E), axis=1)
        probability = tl.exp(best - largest) / total
        chosen = tl.where(slots == slot, probability[:, None], chosen)
        chosen_ids = tl.where(slots == slot, expert[:, None], chosen_ids)
        remaining = tl.where(cols == expert[:, None], -float("inf"), remaining)
    if RENORMALIZE:
        chosen = chosen / tl.sum(chosen, axis=1)[:, None]
    keep = live[:, None] & (slots < K)
    tl.store(weights_ptr + rows64 * weights_stride + slots, chosen, mask=keep)
    tl.store(ids_ptr + rows64 * ids_stride + slots, chosen_ids, mask=keep)


@spec.implementation(device_type=launch_device(_moe_route_kernel), strided_rows=True)
def moe_route_tl(config: MoeRouteConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    launch = Launcher(
        _moe_route_kernel,
        {
            "E": config.num_experts,
            "K": config.top_k,
            "BLOCK_E": next_power_of_2(config.num_experts),
            "BLOCK_K": next_power_of_2(config.top_k),
            "ROWS": ROWS,
            "RENORMALIZE": config.renormalize,
        },
    )

    def moe_route(
        logits: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = logits.shape[0]
        strides = (logits.stride(0), topk_weights.stride(0), topk_ids.stride(0))
        launch((cdiv(tokens, ROWS),), logits, topk_weights, topk_ids, tokens, *strides)
        return topk_weights, topk_ids

    return moe_route
