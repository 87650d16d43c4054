"""The MoE token alignment in plain PyTorch (the spec: ``lazyops.specs.moe_align``): the spec's definition.

A scatter count, a stable sort and a search, all on the device with sizes from the shapes alone: nothing is read
on the host, so a CUDA graph can capture it (``bincount`` is not used: on CUDA it reads the largest id back).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.moe_align import MoeAlignConfig, align, spec


@spec.implementation
def moe_align_tl(config: MoeAlignConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    def moe_align(
        topk_ids: torch.Tensor,
        sorted_token_ids: torch.Tensor,
        expert_ids: torch.Tensor,
        num_tokens_post_padded: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        results = align(config, topk_ids)
        for target, result in zip((sorted_token_ids, expert_ids, num_tokens_post_padded), results, strict=True):
            target.copy_(result)
        return sorted_token_ids, expert_ids, num_tokens_post_padded

    return moe_align
