"""``fused_moe_tl``'s examples: a skewed routing (the imbalance that breaks per-expert blocks), every token to one
expert, both activations, expert parallelism (an expert map with absent experts); its cost is counted in products."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.fused_moe import ACTIVATIONS, FusedMoeConfig, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Draw, Examples

#: Hidden and intermediate sizes: below, at and past the tile sides (16 to 128), and odd ones.
SIZES = (1, 8, 15, 16, 17, 32, 64, 100, 128)
#: Expert counts from one (a dense MLP) to DeepSeek-V3's 256.
EXPERTS = (1, 2, 3, 8, 16, 60, 128, 256)
#: A token is charged its products / this many elements of the budget: 3k GEMMs a token, fewer tokens than matmul (30).
PRODUCTS_PER_ELEMENT = 6


def draw_ids(inputs: Any, config: FusedMoeConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """``k`` distinct experts a token (global ones under an expert map), from a skewed preference: a few experts
    take most tokens and some none (the imbalance that breaks the per-expert blocks); ``geometry["one_expert"]``
    sends every token to expert 0 first. ``geometry["routing"] == "balanced"`` (the benchmark's): token ``t`` takes
    experts ``t·k`` to ``t·k + k - 1`` modulo ``E``, so a call reads exactly ``min(E, T·k)`` experts, as a trained
    router's balanced load does, and :meth:`FusedMoeExamples.traffic` counts its bytes exactly."""
    generator = inputs.generator
    experts = config.global_experts or config.num_experts
    if geometry.get("routing") == "balanced":
        ids = (torch.arange(tokens)[:, None] * config.top_k + torch.arange(config.top_k)) % experts
        return ids.to(torch.int32).to(inputs.device)
    popularity = torch.empty(experts).exponential_(generator=generator) * 4
    scores = torch.rand(tokens, experts, generator=generator) + popularity
    if geometry.get("one_expert"):
        scores[:, 0] = float("inf")
    ids = scores.argsort(dim=-1, descending=True, stable=True)[:, : config.top_k]
    return ids.to(torch.int32).to(inputs.device)


def draw_weights(inputs: Any, config: FusedMoeConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    weights = torch.rand(tokens, config.top_k, generator=inputs.generator)
    return (weights / weights.sum(-1, keepdim=True)).to(inputs.device)


def draw_expert_map(local: int, experts: int, generator: torch.Generator) -> torch.Tensor:
    """``expert_map[experts]`` (int32): each of ``local`` experts from one random global one, the others -1."""
    chosen = torch.randperm(experts, generator=generator)[:local]
    expert_map = torch.full((experts,), -1, dtype=torch.int32)
    expert_map[chosen] = torch.arange(local, dtype=torch.int32)
    return expert_map


class FusedMoeExamples(Examples):
    """The geometry beyond the configuration: ``one_expert`` (:func:`draw_ids`)."""

    draws: ClassVar[Mapping[str, Draw]] = {"topk_weights": draw_weights, "topk_ids": draw_ids}

    def cases(self) -> Any:

        @st.composite
        def draw_case(draw: st.DrawFn) -> Case:
            experts = draw(st.sampled_from(EXPERTS) | st.integers(1, 20))
            top_k = draw(st.integers(1, min(8, experts)))
            args = (
                draw(st.sampled_from(SIZES) | st.integers(1, 80)),
                draw(st.sampled_from(SIZES) | st.integers(1, 80)),
                experts,
                top_k,
                draw(strategies.dtypes()),
            )
            geometry = {"one_expert": draw(st.booleans())}
            kwargs: dict[str, Any] = {"activation": draw(st.sampled_from(ACTIVATIONS))}
            if draw(st.integers(0, 3)) == 0:  # expert parallelism: this rank holds some of the experts
                kwargs["global_experts"] = experts + draw(st.integers(0, 2 * experts))
            tokens, seed = draw(strategies.token_sequences()), draw(strategies.seeds())
            return Case(self.spec.name, args, kwargs, tokens, seed, geometry)

        return draw_case()

    def draw_other(self, config: FusedMoeConfig, param: Any, tokens: int, draw: Any, geometry: Any) -> Any:
        """A map of each local expert from one random global one, the rest -1; empty (left out) without one."""
        if config.global_experts is None:
            return torch.empty(0, dtype=torch.int32, device=draw.device)
        return draw_expert_map(config.num_experts, config.global_experts, draw.generator).to(draw.device)

    def token_elements(self, config: FusedMoeConfig, geometry: Mapping[str, Any]) -> int:
        products = 3 * config.top_k * config.hidden * config.intermediate
        return max(config.hidden, products // PRODUCTS_PER_ELEMENT)

    def traffic(self, config: FusedMoeConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        """The bytes of the experts a call reads, ``min(E, T·k)`` of them, not the whole weight stack: exact under
        the balanced routing (:func:`draw_ids`; issue 36's decode goal is a share of HBM over these bytes), an
        upper bound under the skewed one, whose popular experts take several of a token's assignments."""
        used = min(config.num_experts, tokens * config.top_k)
        itemsize = config.dtype.itemsize
        weights = used * 3 * config.intermediate * config.hidden * itemsize
        rows = tokens * (2 * config.hidden * itemsize + config.top_k * 8)
        flops = 6 * tokens * config.top_k * config.hidden * config.intermediate
        return Traffic(bytes=weights + rows, flops=flops, bound="compute" if tokens * config.top_k > 512 else "memory")

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Qwen3-30B-A3B's experts: 128 of 2048 to 768, 8 a token, routed evenly (:func:`draw_ids`)."""
        return Example((2048, 768, 128, 8, dtype), geometry={"routing": "balanced"})


examples = FusedMoeExamples(spec)
