"""Penalties in plain PyTorch (the spec: ``lazyops.specs.apply_penalties``): the definition in float32 (logit bias,
penalties, token mask), written back."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.apply_penalties import ApplyPenaltiesConfig, penalised, spec


@spec.implementation(strided_rows=True)
def apply_penalties_tl(config: ApplyPenaltiesConfig) -> Callable[..., None]:
    def apply_penalties(
        logits: torch.Tensor,
        output_counts: torch.Tensor,
        prompt_mask: torch.Tensor,
        repetition: torch.Tensor,
        frequency: torch.Tensor,
        presence: torch.Tensor,
        bias_ids: torch.Tensor | None = None,
        bias_values: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> None:
        x = penalised(
            logits.float(), output_counts, prompt_mask, repetition, frequency, presence, bias_ids, bias_values, allowed
        )
        logits.copy_(x)

    return apply_penalties
