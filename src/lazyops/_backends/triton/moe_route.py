"""The MoE router in Triton (the spec: ``lazyops.specs.moe_route``): scores and top-k of a tile of tokens a program.

A program holds ``ROWS`` tokens' logits ``[ROWS, E]`` in registers (E is at most a few hundred) and their selection
keys (the logit for softmax scoring, ``sigmoid + bias`` for DeepSeek-V3's; NaN as ``-inf``). With groups, a loop
over the groups ranks each (its best key, or its two best keys' sum) into a ``[ROWS, G]`` tile, picks the
``topk_group`` best (lowest group id on ties) and leaves only their experts available. Then it takes the best
available key ``k`` times, each time the lowest column holding it (the spec's tie rule), and keeps the selected
weights in a ``[ROWS, K]`` tile so that the renormalisation needs no second pass. Several tokens a program rather
than one: one token a program is a grid of thousands of tiny programs, which Triton's interpreter runs one at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops._backends.triton.fused_moe import _sigmoid
from lazyops.specs.moe_route import MoeRouteConfig, spec

#: Tokens a program: enough that the interpreter runs few programs, few enough that ``[ROWS, E]`` fits registers.
ROWS = 16


@triton.jit(do_not_specialize=["M"])
def _moe_route_kernel(
    logits_ptr,
    weights_ptr,
    ids_ptr,
    bias_ptr,
    M,
    logits_stride,
    weights_stride,
    ids_stride,
    scaling,
    E: tl.constexpr,
    K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ROWS: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    SIGMOID: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    GROUPS: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < M
    rows64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_E)[None, :]
    in_row = live[:, None] & (cols < E)
    logits = tl.load(logits_ptr + rows64 * logits_stride + cols, mask=in_row, other=-float("inf")).to(tl.float32)
    nan = logits != logits  # noqa: PLR0124 - NaN, the one value unequal to itself
    row_nan = tl.max(nan.to(tl.int32), axis=1) > 0
    if SIGMOID:
        scores = _sigmoid(logits)
        keys = scores
        if HAS_BIAS:
            keys = keys + tl.load(bias_ptr + cols, mask=cols < E, other=0.0)
        keys = tl.where(nan | (cols >= E), -float("inf"), keys)
    else:
        keys = tl.where(nan, -float("inf"), logits)
        # finite for a row past the end or all NaN (whose weights are NaN anyway): no -inf - -inf, no 0 / 0
        largest = tl.max(tl.where(live[:, None], keys, 0.0), axis=1)
        largest = tl.where(largest == -float("inf"), 0.0, largest)
        scores = tl.exp(keys - largest[:, None])
        total = tl.sum(scores, axis=1)
        scores = scores / tl.where(total == 0.0, 1.0, total)[:, None]
    available = cols < E
    if GROUPS > 1:
        SIZE: tl.constexpr = E // GROUPS
        group_cols = tl.arange(0, BLOCK_G)[None, :]
        ranks = tl.zeros((ROWS, BLOCK_G), dtype=tl.float32) - float("inf")
        for group in range(GROUPS):
            member = (cols >= group * SIZE) & (cols < group * SIZE + SIZE)
            best = tl.max(tl.where(member, keys, -float("inf")), axis=1)
            if HAS_BIAS and SIZE > 1:  # the two best keys' sum: the second from the group less the first's column
                first = tl.min(tl.where(member & (keys == best[:, None]), cols, BLOCK_E), axis=1)
                second = tl.max(tl.where(member & (cols != first[:, None]), keys, -float("inf")), axis=1)
                best = best + second
            ranks = tl.where(group_cols == group, best[:, None], ranks)
        open_groups = group_cols < GROUPS
        chosen = group_cols < 0
        for _ in tl.static_range(TOPK_GROUP):
            best = tl.max(tl.where(open_groups, ranks, -float("inf")), axis=1)
            pick = tl.min(tl.where(open_groups & (ranks == best[:, None]), group_cols, BLOCK_G), axis=1)
            chosen = chosen | (group_cols == pick[:, None])
            open_groups = open_groups & (group_cols != pick[:, None])
        # [ROWS, BLOCK_E] from the start: a loop-carried value keeps its shape in compiled Triton (the interpreter
        # broadcasts silently)
        allowed = in_row & (cols < 0)
        for group in range(GROUPS):
            picked = tl.max((chosen & (group_cols == group)).to(tl.int32), axis=1) > 0
            member = (cols >= group * SIZE) & (cols < group * SIZE + SIZE)
            allowed = allowed | (member & picked[:, None])
        available = available & allowed
    slots = tl.arange(0, BLOCK_K)[None, :]
    chosen_weights = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
    chosen_ids = tl.zeros((ROWS, BLOCK_K), dtype=tl.int32)
    for slot in tl.static_range(K):
        best = tl.max(tl.where(available, keys, -float("inf")), axis=1)
        expert = tl.min(tl.where(available & (keys == best[:, None]), cols, BLOCK_E), axis=1)
        weight = tl.sum(tl.where(cols == expert[:, None], scores, 0.0), axis=1)
        chosen_weights = tl.where(slots == slot, weight[:, None], chosen_weights)
        chosen_ids = tl.where(slots == slot, expert[:, None], chosen_ids)
        available = available & (cols != expert[:, None])
    if RENORMALIZE:  # a zero sum only past the end or in a NaN row
        total = tl.sum(tl.where(slots < K, chosen_weights, 0.0), axis=1)
        chosen_weights = chosen_weights / tl.where(total == 0.0, 1.0, total)[:, None]
    chosen_weights = tl.where(row_nan[:, None], float("nan"), chosen_weights * scaling)
    keep = live[:, None] & (slots < K)
    tl.store(weights_ptr + rows64 * weights_stride + slots, chosen_weights, mask=keep)
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
            "SIGMOID": config.scoring == "sigmoid",
            "HAS_BIAS": config.correction_bias,
            "GROUPS": config.n_group,
            "TOPK_GROUP": config.topk_group,
            "BLOCK_G": next_power_of_2(config.n_group),
        },
    )
    scaling = config.routed_scaling_factor

    def moe_route(
        logits: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        correction_bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = logits.shape[0]
        strides = (logits.stride(0), topk_weights.stride(0), topk_ids.stride(0))
        bias = correction_bias if config.correction_bias else logits  # never read without the bias
        launch((cdiv(tokens, ROWS),), logits, topk_weights, topk_ids, bias, tokens, *strides, scaling)
        return topk_weights, topk_ids

    return moe_route
