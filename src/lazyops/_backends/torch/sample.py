"""Sampling in plain PyTorch (the spec: ``lazyops.specs.sample``): the spec's definition with a sort, in float32.

vLLM's torch path, with the spec's hashed uniforms in place of a generator's: a sort of each row for top-k and
top-p, then the exponential race. It is the last resort and the CPU's sampler; the GPU backends find the same
thresholds without the sort.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.sample import SampleConfig, greedy, kept_probabilities, log_probabilities, spec

MASK32 = 0xFFFFFFFF


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (lowbias32), in int64 arithmetic masked to 32 bits: the same bits in torch and in
    the GPU backends, which write it the same way."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def request_key(seeds: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 32-bit keys of each request's (seed, offset), as int64."""
    first = _mix((offsets >> 32) & MASK32 ^ 0x2545F491)
    first = _mix((offsets & MASK32) ^ first)
    first = _mix(((seeds >> 32) & MASK32) ^ first)
    first = _mix((seeds & MASK32) ^ first)
    return first, _mix(first ^ 0x85EBCA6B)


def uniforms(seeds: torch.Tensor, offsets: torch.Tensor, vocab: int) -> torch.Tensor:
    """``u[B, V]`` in (0, 1), float32, exact multiples of 2**-24: a hash of each request's (seed, offset) and the
    token id. Counter-based, so a row's numbers need nothing from any other row."""
    first, second = request_key(seeds.reshape(-1, 1), offsets.reshape(-1, 1))
    ids = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    bits = _mix(_mix(ids ^ first) ^ second)
    return ((bits >> 9) * 2 + 1).to(torch.float32) * 2.0**-24


@spec.implementation(strided_rows=True)
def sample_tl(config: SampleConfig) -> Callable[..., torch.Tensor]:
    vocab, n = config.vocab, config.top_n

    def sample(
        logits: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        seeds: torch.Tensor,
        offsets: torch.Tensor,
        logprob: torch.Tensor | None = None,
        top_logprobs: torch.Tensor | None = None,
        top_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        z = logits.float()
        probs = kept_probabilities(z, temperature, top_k, top_p, min_p)
        race = probs / -torch.log(uniforms(seeds, offsets, vocab))
        tokens = torch.where(temperature == 0, greedy(z), race.argmax(dim=-1))
        wanted = [t is not None and t.numel() > 0 for t in (logprob, top_logprobs, top_ids)]
        if any(wanted):  # vLLM's raw logprobs: of the logits as given
            values = log_probabilities(z, tokens, n)
            for buffer, value, write in zip((logprob, top_logprobs, top_ids), values, wanted, strict=True):
                if write and buffer is not None:
                    buffer.copy_(value)
        return tokens

    return sample
