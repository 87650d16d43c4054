"""``sample_tl``'s examples: the sampler's logits kinds and parameter mixes (``lazyops.testing._draws``, beside the
judge of many draws), and the log-probability buffers, filled so that an element the call does not write shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.sample import LOGPROB_BUFFERS, spec
from lazyops.testing._draws import sampler_cases, sampler_inputs
from lazyops.testing.cases._base import Examples


class SampleExamples(Examples):
    """The geometry beyond the configuration: ``logits`` (the kind of row, ``_draws.LOGITS``) and ``params`` (the
    requests' parameters, ``_draws.PARAMS``)."""

    def cases(self) -> Any:
        return sampler_cases(self.spec.name)

    def example_inputs(self, config: Any, tokens: int, draw: Any, geometry: Mapping[str, Any]) -> tuple[Any, ...]:
        drawn = sampler_inputs(config, tokens, draw, geometry)
        n, device = config.top_n if config.logprobs else 0, draw.device
        if not config.logprobs:
            return (*drawn, *(torch.empty(0, dtype=dtype, device=device) for _, dtype in LOGPROB_BUFFERS))
        logprob = torch.full((tokens,), float("nan"), device=device)  # an element not written stays NaN
        top = torch.full((tokens, n), float("nan"), device=device)
        return (*drawn, logprob, top, torch.full((tokens, n), -1, dtype=torch.int64, device=device))

    def token_elements(self, config: Any, geometry: Mapping[str, Any]) -> int:
        return int(config.vocab)

    def traffic(self, config: Any, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        """One read of the logits (the goal's yardstick), the parameters, the tokens and log-probabilities
        written."""
        written = 8 + (4 + 12 * config.top_n if config.logprobs else 0)
        return Traffic(bytes=tokens * (config.vocab * config.dtype.itemsize + 6 * 8 + written))

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((128256, dtype), geometry={"params": "mixed"})


examples = SampleExamples(spec)
