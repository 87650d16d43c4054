"""The MoE router in TileLang (the spec: ``lazyops.specs.moe_route``): Triton's program, a tile of tokens a block.

A block holds ``rows`` tokens' logits ``[rows, E]`` in a fragment (``E`` padded to a power of two) and their
selection keys: the logit for softmax scoring, ``sigmoid + bias`` for DeepSeek-V3's; NaN as ``-inf``. With groups,
a serial loop over the groups ranks each (its best key, or its two best keys' sum with a bias) into shared memory,
the ``topk_group`` best groups are picked (the lowest group id on ties) and only their experts stay available. Then
the block takes the best available key ``k`` times, each time the lowest column holding it (the spec's tie rule: a
block-wide minimum of the columns that hold the maximum, as float32, exact below 2**24), keeping the chosen weights
in shared memory and their sum in registers, so that the renormalisation needs no second pass. The selection is
the same comparisons as Triton's, so the ids are the same wherever the keys are (the spec's drawn logits make
them so in float32); the weights are a float32 softmax or sigmoid, equal to Triton's within rounding.

The logits and both outputs are dense rows: the engine copies a strided view (its checked route), which Triton's
program takes as it is. The selection loops are serial over ``k`` and the groups, not unrolled, so any ``top_k``
compiles to the same code size. More than :data:`MAX_EXPERTS` experts are declined (to Triton): a token's experts
are held in registers. The program is written against :mod:`._dialect`, so TileLang's C target runs it on a CPU
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
    F32,
    INDEX,
    compiled,
    direct,
    launch_with_copies,
    refuse_unsupported,
    tl_dtype,
)
from lazyops.specs.moe_route import MoeRouteConfig, spec

THREADS = 128
#: A block's ``[rows, experts]`` tile: at most 16 values a thread; at most 16 tokens a block, as Triton's.
TILE = 2048
MAX_ROWS = 16
#: The narrowest padded width of the expert and group tiles, so that a block's tile is no smaller than a warp's.
MIN_WIDTH = 8
#: Experts a token at most: 1024 fill two rows of the tile; more would spill registers.
MAX_EXPERTS = 1024
#: exp(x) = exp2(x * log2(e)), as softmax_tl's program.
LOG2E = 1.4426950408889634


def unsupported(config: MoeRouteConfig) -> str | None:
    """Why these programs do not serve ``config`` (None when they do): the spec's ``supports`` hook."""
    if config.num_experts > MAX_EXPERTS:
        return f"more than {MAX_EXPERTS} experts: a token's experts are held in registers"
    return None


def tile_shape(num_experts: int) -> tuple[int, int]:
    """``(rows, width)``: tokens a block and the experts padded to a power of two."""
    width = max(MIN_WIDTH, next_power_of_two(num_experts))
    return max(1, min(MAX_ROWS, TILE // width)), width


def moe_route_program(config: MoeRouteConfig, dialect: Dialect = CUDA) -> Any:
    """The program ``main(logits[M, E], topk_weights[M, k], topk_ids[M, k], bias[B])`` for a dynamic token count
    ``M``; ``bias`` is the correction bias (``B = E``) where the configuration takes one, else one unread element."""
    d = dialect
    E, K, dtype = config.num_experts, config.top_k, tl_dtype(config.dtype)
    rows, width = tile_shape(E)
    width_k = next_power_of_two(K)
    sigmoid, has_bias, renormalize = config.scoring == "sigmoid", config.correction_bias, config.renormalize
    groups, topk_group, size = config.n_group, config.topk_group, config.group_size
    width_g = max(MIN_WIDTH, next_power_of_two(groups))
    scaling = config.routed_scaling_factor
    M = T.dynamic("M", INDEX)
    neg_inf = -T.infinity(F32)
    none = T.float32(width)  # a column (or group) no expert has: the minimum where nothing qualifies

    @T.prim_func
    def main(
        logits: T.Tensor((M, E), dtype),
        topk_weights: T.Tensor((M, K), F32),
        topk_ids: T.Tensor((M, K), "int32"),
        bias: T.Tensor((E if has_bias else 1,), F32),
    ):
        with T.Kernel(T.ceildiv(M, rows), threads=THREADS) as block:
            keys = d.tile((rows, width), F32)
            scores = d.tile((rows, width), F32)
            available = d.tile((rows, width), F32)  # 1 where the expert may still be picked
            work = d.tile((rows, width), F32)
            best = d.tile((rows,), F32)
            pick = d.tile((rows,), F32)
            second = d.tile((rows,), F32)
            total = d.tile((rows,), F32)
            has_nan = d.tile((rows,), F32)
            chosen_weights = d.shared((rows, width_k), F32)
            chosen_ids = d.shared((rows, width_k), "int32")
            row_total = d.shared((rows,), F32)
            row_nan = d.shared((rows,), F32)

            for i, j in d.parallel(rows, width):
                row = block * rows + i
                logit = T.if_then_else(row < M and j < E, T.cast(logits[row, j], F32), neg_inf)
                nan = T.isnan(logit)
                work[i, j] = T.if_then_else(nan, T.float32(1), T.float32(0))
                available[i, j] = T.if_then_else(j < E, T.float32(1), T.float32(0))
                if sigmoid:  # exp of a non-positive argument only (-|x|, as a min: C has no fabs here): no overflow
                    small = T.exp(T.min(logit, -logit))
                    score = T.if_then_else(logit >= 0, 1 / (1 + small), small / (1 + small))
                    key = score + bias[T.min(j, E - 1)] if has_bias else score
                    scores[i, j] = score
                    keys[i, j] = T.if_then_else(nan or j >= E, neg_inf, key)
                else:
                    keys[i, j] = T.if_then_else(nan, neg_inf, logit)
            T.reduce_max(work, has_nan, dim=1)
            if not sigmoid:
                # the largest key is finite for a row past the end or all NaN (whose weights are NaN anyway): no
                # -inf - -inf, and a zero sum is divided by 1
                T.reduce_max(keys, best, dim=1)
                for i in d.parallel(rows):
                    best[i] = T.if_then_else(best[i] == neg_inf, T.float32(0), best[i])
                for i, j in d.parallel(rows, width):
                    scores[i, j] = T.exp2((keys[i, j] - best[i]) * LOG2E)
                T.reduce_sum(scores, total, dim=1)
                for i, j in d.parallel(rows, width):
                    scores[i, j] = scores[i, j] / T.if_then_else(total[i] == 0, T.float32(1), total[i])

            if groups > 1:
                group_ranks = d.shared((rows, width_g), F32)
                chosen_groups = d.shared((rows, width_g), F32)
                ranks = d.tile((rows, width_g), F32)
                open_groups = d.tile((rows, width_g), F32)
                group_work = d.tile((rows, width_g), F32)
                for g in T.serial(groups):
                    for i, j in d.parallel(rows, width):
                        member = j >= g * size and j < g * size + size
                        work[i, j] = T.if_then_else(member, keys[i, j], neg_inf)
                    T.reduce_max(work, best, dim=1)
                    if has_bias and size > 1:  # the two best keys' sum: the second from the group less the first
                        for i, j in d.parallel(rows, width):
                            member = j >= g * size and j < g * size + size
                            work[i, j] = T.if_then_else(member and keys[i, j] == best[i], T.cast(j, F32), none)
                        T.reduce_min(work, pick, dim=1)
                        for i, j in d.parallel(rows, width):
                            member = j >= g * size and j < g * size + size
                            work[i, j] = T.if_then_else(member and T.cast(j, F32) != pick[i], keys[i, j], neg_inf)
                        T.reduce_max(work, second, dim=1)
                        for i in d.parallel(rows):
                            best[i] = best[i] + second[i]
                    for i in d.parallel(rows):
                        group_ranks[i, g] = best[i]
                for i, c in d.parallel(rows, width_g):
                    ranks[i, c] = T.if_then_else(c < groups, group_ranks[i, T.min(c, groups - 1)], neg_inf)
                    open_groups[i, c] = T.if_then_else(c < groups, T.float32(1), T.float32(0))
                for _ in T.serial(topk_group):
                    for i, c in d.parallel(rows, width_g):
                        group_work[i, c] = T.if_then_else(open_groups[i, c] > 0, ranks[i, c], neg_inf)
                    T.reduce_max(group_work, best, dim=1)
                    for i, c in d.parallel(rows, width_g):
                        top = open_groups[i, c] > 0 and ranks[i, c] == best[i]
                        group_work[i, c] = T.if_then_else(top, T.cast(c, F32), none)
                    T.reduce_min(group_work, pick, dim=1)
                    for i, c in d.parallel(rows, width_g):
                        open_groups[i, c] = T.if_then_else(T.cast(c, F32) == pick[i], T.float32(0), open_groups[i, c])
                for i, c in d.parallel(rows, width_g):  # a real group no longer open was picked
                    chosen_groups[i, c] = T.if_then_else(c < groups and open_groups[i, c] == 0, T.float32(1), 0)
                for i, j in d.parallel(rows, width):
                    group = T.min(j // size, groups - 1)
                    available[i, j] = T.if_then_else(j < E, chosen_groups[i, group], T.float32(0))

            T.fill(total, 0)
            for slot in T.serial(K):
                for i, j in d.parallel(rows, width):
                    work[i, j] = T.if_then_else(available[i, j] > 0, keys[i, j], neg_inf)
                T.reduce_max(work, best, dim=1)
                for i, j in d.parallel(rows, width):
                    top = available[i, j] > 0 and keys[i, j] == best[i]
                    work[i, j] = T.if_then_else(top, T.cast(j, F32), none)
                T.reduce_min(work, pick, dim=1)
                for i, j in d.parallel(rows, width):
                    hit = T.cast(j, F32) == pick[i]
                    work[i, j] = T.if_then_else(hit, scores[i, j], T.float32(0))
                    available[i, j] = T.if_then_else(hit, T.float32(0), available[i, j])
                T.reduce_sum(work, best, dim=1)  # the chosen expert's weight: one term, exact
                for i in d.parallel(rows):
                    chosen_weights[i, slot] = best[i]
                    chosen_ids[i, slot] = T.cast(pick[i], "int32")
                    total[i] = total[i] + best[i]
            for i in d.parallel(rows):
                row_total[i] = T.if_then_else(total[i] == 0, T.float32(1), total[i])  # zero only past the end
                row_nan[i] = has_nan[i]
            for i, s in d.parallel(rows, width_k):
                row = block * rows + i
                if row < M and s < K:
                    weight = chosen_weights[i, s] / row_total[i] if renormalize else chosen_weights[i, s]
                    nan_weight = T.float32(float("nan"))
                    topk_weights[row, s] = T.if_then_else(row_nan[i] > 0, nan_weight, weight * T.float32(scaling))
                    topk_ids[row, s] = chosen_ids[i, s]

    return main


def programs(config: MoeRouteConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    refuse_unsupported(spec.name, config, unsupported(config))
    return {"main": lambda: moe_route_program(config)}


def route_launch(config: MoeRouteConfig, kernel: Any) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The launch of a compiled (or CPU-built) program: a placeholder bias where the configuration takes none,
    and contiguous copies of a misaligned view (the program assumes :data:`ALIGNMENT`), the outputs copied back."""
    kernel = direct(kernel)
    placeholders: dict[torch.device, torch.Tensor] = {}

    def moe_route(
        logits: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        correction_bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bias = correction_bias if config.correction_bias else placeholders.get(logits.device)
        if bias is None:  # never read: one element, made once a device
            bias = placeholders[logits.device] = torch.zeros(1, dtype=torch.float32, device=logits.device)
        if (
            logits.data_ptr() % ALIGNMENT
            or topk_weights.data_ptr() % ALIGNMENT
            or topk_ids.data_ptr() % ALIGNMENT
            or bias.data_ptr() % ALIGNMENT
        ):
            launch_with_copies(kernel, (logits, topk_weights, topk_ids, bias), written=(1, 2))
        else:
            kernel(logits, topk_weights, topk_ids, bias)
        return topk_weights, topk_ids

    return moe_route


@spec.implementation(device_type="cuda", supports=unsupported)
def moe_route_tl(config: MoeRouteConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return route_launch(config, compiled(config.label, programs(config))["main"])
