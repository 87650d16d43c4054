"""``moe_align_tl``'s examples: a skewed routing (a few experts take most tokens, some none), every token to one
expert, assignments to another rank's experts (-1), block sizes of vLLM's tiles and small odd ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.moe_align import MoeAlignConfig, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Draw, Examples

#: Block sizes the kit draws besides any small one: the GEMM tiles vLLM's configurations use.
BLOCK_SIZES = (16, 32, 64, 128)
#: Expert counts from one to DeepSeek-V3's 256, with odd ones between.
EXPERTS = (1, 2, 3, 8, 16, 60, 64, 128, 256)


def draw_ids(inputs: Any, config: Any, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """``k`` distinct experts a token, from a skewed preference: a few experts take most tokens and some none;
    ``geometry["one_expert"]`` sends every token to expert 0 first, ``geometry["absent"]`` marks about a quarter of
    the assignments -1 (experts of another rank)."""
    generator = inputs.generator
    popularity = torch.empty(config.num_experts).exponential_(generator=generator) * 4
    scores = torch.rand(tokens, config.num_experts, generator=generator) + popularity
    if geometry.get("one_expert"):
        scores[:, 0] = float("inf")
    ids = scores.argsort(dim=-1, descending=True, stable=True)[:, : config.top_k].to(torch.int32)
    if geometry.get("absent"):
        ids[torch.rand(ids.shape, generator=generator) < 0.25] = -1
    return ids.to(inputs.device)


class MoeAlignExamples(Examples):
    """The geometry beyond the configuration: ``one_expert`` and ``absent`` (:func:`draw_ids`)."""

    draws: ClassVar[Mapping[str, Draw]] = {"topk_ids": draw_ids}

    def cases(self) -> Any:

        @st.composite
        def draw_case(draw: st.DrawFn) -> Case:
            experts = draw(st.sampled_from(EXPERTS) | st.integers(1, 40))
            top_k = draw(st.integers(1, min(8, experts)))
            block = draw(st.sampled_from(BLOCK_SIZES) | st.integers(1, 130))
            geometry = {"one_expert": draw(st.booleans()), "absent": draw(st.booleans())}
            tokens = draw(strategies.token_sequences(max_tokens=3000))
            return Case(self.spec.name, (experts, top_k, block), {}, tokens, draw(strategies.seeds()), geometry)

        return draw_case()

    def draw_other(self, config: MoeAlignConfig, param: Any, tokens: int, draw: Any, geometry: Any) -> Any:
        """Each output full of -7 (no valid value): an element the kernel forgets stays visibly wrong."""
        padded, blocks = config.sizes(tokens)
        size = {"sorted_token_ids": padded, "expert_ids": blocks, "num_tokens_post_padded": 1}[param.name]
        return torch.full((size,), -7, dtype=torch.int32, device=draw.device)

    def other_bytes(self, config: MoeAlignConfig, param: Any, tokens: int) -> int:
        padded, blocks = config.sizes(tokens)
        return 4 * {"sorted_token_ids": padded, "expert_ids": blocks, "num_tokens_post_padded": 1}[param.name]

    def token_elements(self, config: MoeAlignConfig, geometry: Mapping[str, Any]) -> int:
        """An assignment is compared with every expert (the Triton count): charged ``k * E / 4``
        (Triton's interpreter: under 30 s for the conformance run)."""
        return max(config.top_k, config.top_k * config.num_experts // 4)

    def traffic(self, config: MoeAlignConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        padded, blocks = config.sizes(tokens)
        return Traffic(bytes=4 * (tokens * config.top_k + padded + blocks + 1))

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Qwen3-30B-A3B's routing: 8 of 128 experts, vLLM's 64-row blocks."""
        return Example((128, 8, 64))


examples = MoeAlignExamples(spec)
