"""The experts of a sparse MoE layer: each token through its ``k`` routed experts' SwiGLU MLPs, weighted and summed.

``out[t] = sum_j topk_weights[t, j] * w2[e] @ act_and_mul(w13[e] @ x[t])`` with ``e = topk_ids[t, j]``: vLLM's
``fused_moe`` and sgl-kernel's, on the weight layout Hugging Face's Mixtral and Qwen3-MoE experts already hold
(``gate_up_proj[E, 2I, H]``, ``down_proj[E, H, I]``). Products accumulate in float32; the gate/up GEMM's result
and the activation are each rounded to the factory's dtype, as vLLM's intermediate caches are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs._params import Fixed, Out, Rows
from lazyops.specs._spec import Example, KernelSpec, Traffic

#: Hidden and intermediate sizes: below, at and past the tile sides (16 to 128), and odd ones.
SIZES = (1, 8, 15, 16, 17, 32, 64, 100, 128)
#: Expert counts from one (a dense MLP) to DeepSeek-V3's 256.
EXPERTS = (1, 2, 3, 8, 16, 60, 128, 256)
ACTIVATIONS = ("silu", "gelu")
#: A token is charged its products / this many elements of the budget: 3k GEMMs a token, fewer tokens than matmul (30).
PRODUCTS_PER_ELEMENT = 6


class FusedMoeKernel(Protocol):
    """What ``fused_moe_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self,
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        /,
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``out[..., H]``: each token of ``x[..., H]`` through the experts ``topk_ids[..., k]`` (int32) names,
        weighted by ``topk_weights[..., k]`` (float32) and summed; written into ``out`` when given."""
        ...


@dataclass(frozen=True)
class FusedMoeConfig:
    hidden: int
    intermediate: int
    num_experts: int
    top_k: int
    dtype: torch.dtype
    activation: str
    label: str

    @property
    def gate_up(self) -> int:
        return 2 * self.intermediate


def activate(activation: str, gate: torch.Tensor) -> torch.Tensor:
    """The gate's activation (``"silu"``, or ``"gelu"`` with tanh as Gemma's and gpt-oss' MLPs use it)."""
    if activation == "silu":
        return torch.nn.functional.silu(gate)
    return torch.nn.functional.gelu(gate, approximate="tanh")


def draw_ids(inputs: Any, config: FusedMoeConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """``k`` distinct experts a token, from a skewed preference: a few experts take most tokens and some none (the
    imbalance that breaks the per-expert blocks); ``geometry["one_expert"]`` sends every token to expert 0 first."""
    generator = inputs.generator
    popularity = torch.empty(config.num_experts).exponential_(generator=generator) * 4
    scores = torch.rand(tokens, config.num_experts, generator=generator) + popularity
    if geometry.get("one_expert"):
        scores[:, 0] = float("inf")
    ids = scores.argsort(dim=-1, descending=True, stable=True)[:, : config.top_k]
    return ids.to(torch.int32).to(inputs.device)


def draw_weights(inputs: Any, config: FusedMoeConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    weights = torch.rand(tokens, config.top_k, generator=inputs.generator)
    return (weights / weights.sum(-1, keepdim=True)).to(inputs.device)


class FusedMoeSpec(KernelSpec):
    name = "fused_moe_tl"
    kernel_type = FusedMoeKernel
    params = (
        Rows("x", width="hidden"),
        Fixed("w13", shape=("num_experts", "gate_up", "hidden")),
        Fixed("w2", shape=("num_experts", "hidden", "intermediate")),
        Rows("topk_weights", width="top_k", dtype=torch.float32, draw=draw_weights),
        Rows("topk_ids", width="top_k", dtype=torch.int32, draw=draw_ids),
    )
    out = Out(width="hidden")

    def bind(
        self,
        hidden: int,
        intermediate: int,
        num_experts: int,
        top_k: int,
        dtype: torch.dtype | str,
        *,
        activation: str = "silu",
    ) -> FusedMoeConfig:
        """The experts of a sparse MoE layer (Mixtral, Qwen3-MoE): ``num_experts`` gated MLPs of ``hidden`` to
        ``intermediate`` and back, ``top_k`` of them a token.

        Returns ``kernel(x[..., H], w13[E, 2I, H], w2[E, H, I], topk_weights[..., k], topk_ids[..., k], *,
        out=None) -> out[..., H]`` in ``dtype``: ``w13`` holds each expert's gate then up projection, ``topk_ids``
        (int32) and ``topk_weights`` (float32) are ``moe_route_tl``'s. ``activation``: ``"silu"`` (SwiGLU) or
        ``"gelu"`` (tanh GeGLU). Products accumulate in float32.
        """
        hidden = arguments.positive_int(self.name, "hidden", hidden)
        intermediate = arguments.positive_int(self.name, "intermediate", intermediate)
        num_experts = arguments.positive_int(self.name, "num_experts", num_experts)
        top_k = arguments.positive_int(self.name, "top_k", top_k)
        dtype = arguments.canonical_dtype(self.name, dtype)
        if activation not in ACTIVATIONS:
            raise KernelInputError(
                f"{self.name}: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}"
            )
        if top_k > num_experts:
            raise KernelInputError(f"{self.name}: top_k {top_k} exceeds num_experts {num_experts}; pick at most that")
        label = arguments.describe(
            self.name, hidden=hidden, intermediate=intermediate, num_experts=num_experts, top_k=top_k, dtype=dtype
        )
        return FusedMoeConfig(hidden, intermediate, num_experts, top_k, dtype, activation, label)

    def reference(  # type: ignore[override]
        self,
        config: FusedMoeConfig,
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> tuple[torch.Tensor]:
        def rounded(values: torch.Tensor) -> torch.Tensor:
            return values.to(config.dtype).to(values.dtype)  # as the kernels store their intermediates

        rows = x.reshape(-1, config.hidden)
        ids = topk_ids.reshape(-1, config.top_k).long()
        weights = topk_weights.reshape(-1, config.top_k).to(rows.dtype)
        out = torch.zeros_like(rows)
        for expert in ids.unique().tolist():
            token, slot = (ids == expert).nonzero(as_tuple=True)
            gate, up = rounded(rows[token] @ w13[expert].T).split(config.intermediate, dim=-1)
            down = rounded(activate(config.activation, gate) * up) @ w2[expert].T
            out.index_add_(0, token, down * weights[token, slot, None])
        return (out.reshape(*x.shape[:-1], config.hidden),)

    def cases(self) -> Any:
        from hypothesis import strategies as st

        from lazyops.testing import strategies
        from lazyops.testing._case import Case

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
            kwargs = {"activation": draw(st.sampled_from(ACTIVATIONS))}
            tokens, seed = draw(strategies.token_sequences()), draw(strategies.seeds())
            return Case(self.name, args, kwargs, tokens, seed, geometry)

        return draw_case()

    def token_elements(self, config: FusedMoeConfig, geometry: Mapping[str, Any]) -> int:
        products = 3 * config.top_k * config.hidden * config.intermediate
        return max(config.hidden, products // PRODUCTS_PER_ELEMENT)

    def traffic(self, config: FusedMoeConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        """The experts a call reads are at most ``tokens * k`` of them: counted so, not the whole weight stack."""
        used = min(config.num_experts, tokens * config.top_k)
        itemsize = config.dtype.itemsize
        weights = used * 3 * config.intermediate * config.hidden * itemsize
        rows = tokens * (2 * config.hidden * itemsize + config.top_k * 8)
        flops = 6 * tokens * config.top_k * config.hidden * config.intermediate
        return Traffic(bytes=weights + rows, flops=flops, bound="compute" if tokens * config.top_k > 512 else "memory")

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Qwen3-30B-A3B's experts: 128 of 2048 to 768, 8 a token."""
        return Example((2048, 768, 128, 8, dtype))


spec = FusedMoeSpec()
