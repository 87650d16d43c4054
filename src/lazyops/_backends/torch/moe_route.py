"""The MoE router in plain PyTorch (the spec: ``lazyops.specs.moe_route``): the spec's selection in float32.

A stable sort of the logits rather than ``torch.topk``, whose order among equal values is unspecified: ties go to
the lower expert id, as every backend's. The softmax (or sigmoid) runs in float32 whatever the logits' dtype; the
DeepSeek-V3 groups are a view ``[..., n_group, E / n_group]`` of the selection scores.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.moe_route import MoeRouteConfig, select, spec


@spec.implementation
def moe_route_tl(config: MoeRouteConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def moe_route(
        logits: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        correction_bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights, ids = select(config, logits.float(), correction_bias)
        topk_weights.copy_(weights)
        topk_ids.copy_(ids)
        return topk_weights, topk_ids

    return moe_route
