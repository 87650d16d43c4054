"""``moe_route_tl``'s examples: logits on a grid of halves (frequent exact ties, the same in every backend), rows all
tied, NaN, DeepSeek-V3's grouped sigmoid scoring with a correction bias of 0 or -1/2 an expert."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example
from lazyops.specs.moe_route import MoeRouteConfig, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Draw, Examples

#: Expert counts from one to DeepSeek-V3's 256, with the odd ones between.
EXPERTS = (1, 2, 3, 8, 16, 60, 64, 128, 256)


def draw_logits(inputs: Any, config: MoeRouteConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """Halves between -4 and 4: exact in every dtype, so ties are frequent and the same in every backend; a few
    rows all equal (every expert tied); ``geometry["nan"]``: a NaN in some rows.

    Sigmoid scoring takes the halves from 0 to 4 only: there no two pairs of scores that differ as real numbers come
    within 1.2e-4 of each other or of a difference of 1/2 (checked over the grid), so a group's rank never rests on
    float32 rounding, which differs between backends; sigmoid(a) + sigmoid(-a) = 1 would make exact ties of
    different sums."""
    low = 0 if config.scoring == "sigmoid" else -8
    halves = torch.randint(low, 9, (tokens, config.num_experts), generator=inputs.generator) / 2
    halves[:: max(1, tokens // 3)] = 0.5
    if geometry.get("nan") and tokens:
        rows = torch.arange(0, tokens, 2)
        halves[rows, torch.randint(0, config.num_experts, rows.shape, generator=inputs.generator)] = float("nan")
    return halves.to(config.dtype).to(inputs.device)


def draw_bias(config: MoeRouteConfig, generator: torch.Generator) -> torch.Tensor:
    """0 or -1/2 an expert. A score in [1/2, 1) plus either is exact in float32, so two groups whose top two keys
    are the same two scores with the biases swapped tie exactly in every backend (the lower group wins), where
    larger or finer biases would make that tie float32's rounding, which differs between backends (seen: 1 case in
    300 with distinct multiples of 1/2)."""
    return torch.randint(0, 2, (config.num_experts,), generator=generator).float() * -0.5


class MoeRouteExamples(Examples):
    """The geometry beyond the configuration: ``nan`` (a NaN logit in every other row)."""

    draws: ClassVar[Mapping[str, Draw]] = {"logits": draw_logits}

    def cases(self) -> Any:

        @st.composite
        def draw_case(draw: st.DrawFn) -> Case:
            experts = draw(st.sampled_from(EXPERTS) | st.integers(1, 40))
            kwargs: dict[str, Any] = {"renormalize": draw(st.booleans())}
            top_k = draw(st.integers(1, min(8, experts)))
            if draw(st.booleans()):  # DeepSeek-V3's scoring
                groups = [n for n in (1, 2, 4, 8, 16) if experts % n == 0]
                n_group = draw(st.sampled_from(groups))
                topk_group = draw(st.integers(1, n_group))
                top_k = min(top_k, topk_group * (experts // n_group))
                kwargs.update(scoring="sigmoid", n_group=n_group, topk_group=topk_group)
                kwargs.update(correction_bias=draw(st.booleans()))
                kwargs.update(routed_scaling_factor=draw(st.sampled_from([1.0, 2.5])))
            args = (experts, top_k, draw(strategies.dtypes()))
            geometry = {"nan": draw(st.sampled_from([False, False, True]))}
            tokens = draw(strategies.token_sequences(max_tokens=2000))
            return Case(self.spec.name, args, kwargs, tokens, draw(strategies.seeds()), geometry)

        return draw_case()

    def draw_other(self, config: MoeRouteConfig, param: Any, tokens: int, draw: Any, geometry: Any) -> Any:
        if not config.correction_bias:
            return torch.empty(0, dtype=torch.float32, device=draw.device)
        return draw_bias(config, draw.generator).to(draw.device)

    def other_bytes(self, config: MoeRouteConfig, param: Any, tokens: int) -> int:
        return 4 * config.num_experts if config.correction_bias else 0

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Qwen3-30B-A3B's router: 8 of 128 experts."""
        return Example((128, 8, dtype))


examples = MoeRouteExamples(spec)
