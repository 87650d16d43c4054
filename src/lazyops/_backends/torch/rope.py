"""Rotary embedding in plain PyTorch (the spec: ``lazyops.specs.rope``)."""

from __future__ import annotations

from typing import Callable

import torch

from lazyops.specs.rope import RopeConfig, check_positions_in_cache, rope_reference, spec


@spec.implementation
def rope_tl(config: RopeConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    head_dim, is_neox, label = config.head_dim, config.is_neox, config.label

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Both checked before either is written: a refused call leaves query and key as they were.
        check_positions_in_cache(label, positions, cos_sin_cache.shape[0])
        cache = cos_sin_cache.float()
        rotated_query = rope_reference(positions, query.float(), cache, head_dim, is_neox)
        rotated_key = rope_reference(positions, key.float(), cache, head_dim, is_neox)
        query.copy_(rotated_query)
        key.copy_(rotated_key)
        return query, key

    return rope
