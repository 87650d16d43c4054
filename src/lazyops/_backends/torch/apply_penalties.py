"""Penalties in plain PyTorch (the spec: ``lazyops.specs.apply_penalties``): the definition in float32, written back."""

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
    ) -> None:
        logits.copy_(penalised(logits.float(), output_counts, prompt_mask, repetition, frequency, presence))

    return apply_penalties
