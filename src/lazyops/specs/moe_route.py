"""The router of a sparse MoE layer: from router logits to each token's ``k`` experts and their weights.

``softmax`` scoring (Mixtral, Qwen3-MoE): the softmax over the experts in float32, the ``k`` largest, optionally
renormalised to sum to one (vLLM's ``fused_topk``, sgl-kernel's ``topk_softmax``). Ties go to the lower expert id,
so every backend picks the same experts. The call writes ``topk_weights[..., k]`` (float32) and ``topk_ids[..., k]``
(int32) in place and returns them: their sizes come from the token count alone, so an engine allocates them once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs._params import Rows
from lazyops.specs._spec import Example, KernelSpec

SCORINGS = ("softmax",)
#: Expert counts from one to DeepSeek-V3's 256, with the odd ones between.
EXPERTS = (1, 2, 3, 8, 16, 60, 64, 128, 256)


class MoeRouteKernel(Protocol):
    """What ``moe_route_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, logits: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, /
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes each token's ``k`` experts of ``logits[..., E]`` into ``topk_ids[..., k]`` (int32, highest score
        first, ties to the lower id) and their weights into ``topk_weights[..., k]`` (float32); returns both."""
        ...


@dataclass(frozen=True)
class MoeRouteConfig:
    num_experts: int
    top_k: int
    dtype: torch.dtype
    scoring: str
    renormalize: bool
    label: str


def draw_logits(inputs: Any, config: MoeRouteConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """Halves between -4 and 4: exact in every dtype, so ties are frequent and the same in every backend; a few
    rows all equal (every expert tied)."""
    halves = torch.randint(-8, 9, (tokens, config.num_experts), generator=inputs.generator) / 2
    halves[:: max(1, tokens // 3)] = 0.5
    return halves.to(config.dtype).to(inputs.device)


def select(config: MoeRouteConfig, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, ids)``: the ``k`` best experts by logit, ties to the lower id (a stable sort), and their
    softmax probabilities in ``logits``' dtype (float32 or float64), renormalised if configured."""
    ids = logits.argsort(dim=-1, descending=True, stable=True)[..., : config.top_k]
    weights = torch.softmax(logits, dim=-1).gather(-1, ids)
    if config.renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class MoeRouteSpec(KernelSpec):
    name = "moe_route_tl"
    kernel_type = MoeRouteKernel
    params = (
        Rows("logits", width="num_experts", draw=draw_logits),
        Rows("topk_weights", width="top_k", dtype=torch.float32, mutated=True),
        Rows("topk_ids", width="top_k", dtype=torch.int32, mutated=True),
    )

    def bind(
        self,
        num_experts: int,
        top_k: int,
        dtype: torch.dtype | str = "float32",
        *,
        scoring: str = "softmax",
        renormalize: bool = True,
    ) -> MoeRouteConfig:
        """The router of a sparse MoE layer: ``top_k`` of ``num_experts`` experts a token, from logits in ``dtype``.

        Returns ``kernel(logits[..., E], topk_weights[..., k], topk_ids[..., k]) -> (topk_weights, topk_ids)``,
        written in place: the ``k`` highest logits' experts (int32, ties to the lower id) and their softmax
        probabilities (float32), renormalised to sum to one when ``renormalize`` (Mixtral; Qwen3-MoE's
        ``norm_topk_prob``). A row holding NaN gets undefined experts.
        """
        num_experts = arguments.positive_int(self.name, "num_experts", num_experts)
        top_k = arguments.positive_int(self.name, "top_k", top_k)
        dtype = arguments.canonical_dtype(self.name, dtype)
        if scoring not in SCORINGS:
            raise KernelInputError(
                f"{self.name}: scoring must be one of {', '.join(map(repr, SCORINGS))}, got {scoring!r} (DeepSeek-V3's "
                "grouped sigmoid scoring is not in this lazyops yet)"
            )
        if top_k > num_experts:
            raise KernelInputError(f"{self.name}: top_k {top_k} exceeds num_experts {num_experts}; pick at most that")
        renormalize = bool(renormalize)
        label = arguments.describe(
            self.name, num_experts=num_experts, top_k=top_k, dtype=dtype, scoring=scoring, renormalize=renormalize
        )
        return MoeRouteConfig(num_experts, top_k, dtype, scoring, renormalize, label)

    def reference(  # type: ignore[override]
        self, config: MoeRouteConfig, logits: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights, ids = select(config, logits)
        return weights.to(topk_weights.dtype), ids.to(topk_ids.dtype)

    def cases(self) -> Any:
        from hypothesis import strategies as st

        from lazyops.testing import strategies
        from lazyops.testing._case import Case

        @st.composite
        def draw_case(draw: st.DrawFn) -> Case:
            experts = draw(st.sampled_from(EXPERTS) | st.integers(1, 40))
            args = (experts, draw(st.integers(1, min(8, experts))), draw(strategies.dtypes()))
            kwargs = {"renormalize": draw(st.booleans())}
            return Case(self.name, args, kwargs, draw(strategies.token_sequences()), draw(strategies.seeds()))

        return draw_case()

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Qwen3-30B-A3B's router: 8 of 128 experts."""
        return Example((128, 8, dtype))


spec = MoeRouteSpec()
