"""Sampling in plain PyTorch (the spec: ``lazyops.specs.sample``): the spec's definition with a sort, in float32.

vLLM's torch path, with the spec's hashed uniforms in place of a generator's: a sort of each row for top-k and
top-p, then the exponential race. It is the last resort and the CPU's sampler; the GPU backends find the same
thresholds without the sort.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.sample import SampleConfig, greedy, kept_probabilities, spec, uniforms


@spec.implementation(strided_rows=True)
def sample_tl(config: SampleConfig) -> Callable[..., torch.Tensor]:
    vocab = config.vocab

    def sample(
        logits: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        seeds: torch.Tensor,
        offsets: torch.Tensor,
    ) -> torch.Tensor:
        z = logits.float()
        probs = kept_probabilities(z, temperature, top_k, top_p, min_p)
        race = probs / -torch.log(uniforms(seeds, offsets, vocab))
        return torch.where(temperature == 0, greedy(z), race.argmax(dim=-1))

    return sample
