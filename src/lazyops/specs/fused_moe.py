"""The experts of a sparse MoE layer: each token through its ``k`` routed experts' SwiGLU MLPs, weighted and summed.

``out[t] = sum_j topk_weights[t, j] * w2[e] @ act_and_mul(w13[e] @ x[t])`` with ``e = topk_ids[t, j]``: vLLM's
``fused_moe`` and sgl-kernel's, on the weight layout Hugging Face's Mixtral and Qwen3-MoE experts already hold
(``gate_up_proj[E, 2I, H]``, ``down_proj[E, H, I]``). Products accumulate in float32; the gate/up GEMM's result
and the activation are each rounded to the factory's dtype, as vLLM's intermediate caches are.

Expert parallelism: with ``global_experts=G`` the call takes ``expert_map[G]`` (int32), each global expert's local
index into ``w13``/``w2`` or -1 where another rank holds it; ``topk_ids`` are then global, and an assignment to an
absent expert contributes nothing (vLLM's ``expert_map``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import Fixed, Out, Rows, Tensor
from lazyops.specs._spec import KernelSpec

ACTIVATIONS = ("silu", "gelu")


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
        expert_map: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``out[..., H]``: each token of ``x[..., H]`` through the experts ``topk_ids[..., k]`` (int32) names,
        weighted by ``topk_weights[..., k]`` (float32) and summed; written into ``out`` when given.
        ``expert_map[G]`` (int32; required with ``global_experts=G``, else left out): global to local experts."""
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
    global_experts: int | None = None

    @property
    def gate_up(self) -> int:
        return 2 * self.intermediate


def activate(activation: str, gate: torch.Tensor) -> torch.Tensor:
    """The gate's activation (``"silu"``, or ``"gelu"`` with tanh as Gemma's and gpt-oss' MLPs use it)."""
    if activation == "silu":
        return torch.nn.functional.silu(gate)
    return torch.nn.functional.gelu(gate, approximate="tanh")


class FusedMoeSpec(KernelSpec):
    name = "fused_moe_tl"
    kernel_type = FusedMoeKernel
    params = (
        Rows("x", width="hidden"),
        Fixed("w13", shape=("num_experts", "gate_up", "hidden")),
        Fixed("w2", shape=("num_experts", "hidden", "intermediate")),
        Rows("topk_weights", width="top_k", dtype=torch.float32),
        Rows("topk_ids", width="top_k", dtype=torch.int32),
        Tensor(
            "expert_map",
            ("global_experts",),
            torch.int32,
            keyword=True,
            present=lambda config: config.global_experts is not None,
            why=(
                "expert_map[global_experts] (int32: each global expert's local index, -1 where another rank holds it) "
                "goes with a factory built with global_experts=G (expert parallelism), and only with one"
            ),
        ),
    )
    out = Out(width="hidden")
    #: the conformance tests widen no ``expert_map``: a left-out one is None or empty
    free_widths = ("expert_map",)

    def bind(
        self,
        hidden: int,
        intermediate: int,
        num_experts: int,
        top_k: int,
        dtype: torch.dtype | str,
        *,
        activation: str = "silu",
        global_experts: int | None = None,
    ) -> FusedMoeConfig:
        """The experts of a sparse MoE layer (Mixtral, Qwen3-MoE): ``num_experts`` gated MLPs of ``hidden`` to
        ``intermediate`` and back, ``top_k`` of them a token.

        Returns ``kernel(x[..., H], w13[E, 2I, H], w2[E, H, I], topk_weights[..., k], topk_ids[..., k], *,
        out=None) -> out[..., H]`` in ``dtype``: ``w13`` holds each expert's gate then up projection, ``topk_ids``
        (int32) and ``topk_weights`` (float32) are ``moe_route_tl``'s. ``activation``: ``"silu"`` (SwiGLU) or
        ``"gelu"`` (tanh GeGLU). Products accumulate in float32. ``global_experts``: the layer's expert count
        under expert parallelism, where this rank holds ``num_experts`` of them; the call then takes
        ``expert_map=`` (int32 ``[global_experts]``: the local expert, or -1 for an absent one, whose assignments
        contribute nothing) and ``topk_ids`` name global experts.
        """
        hidden = _params.positive_int(self.name, "hidden", hidden)
        intermediate = _params.positive_int(self.name, "intermediate", intermediate)
        num_experts = _params.positive_int(self.name, "num_experts", num_experts)
        top_k = _params.positive_int(self.name, "top_k", top_k)
        dtype = _params.canonical_dtype(self.name, dtype)
        if activation not in ACTIVATIONS:
            raise KernelInputError(
                f"{self.name}: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}"
            )
        options: dict[str, Any] = {}
        if global_experts is not None:
            global_experts = _params.positive_int(self.name, "global_experts", global_experts)
            if global_experts < num_experts:
                raise KernelInputError(
                    f"{self.name}: global_experts {global_experts} is fewer than the {num_experts} this rank holds"
                )
            options["global_experts"] = global_experts
        routed = global_experts or num_experts
        if top_k > routed:
            raise KernelInputError(f"{self.name}: top_k {top_k} exceeds the {routed} experts; pick at most that")
        label = _params.describe(
            self.name,
            hidden=hidden,
            intermediate=intermediate,
            num_experts=num_experts,
            top_k=top_k,
            dtype=dtype,
            **options,
        )
        return FusedMoeConfig(hidden, intermediate, num_experts, top_k, dtype, activation, label, global_experts)

    def reference(  # type: ignore[override]
        self,
        config: FusedMoeConfig,
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        expert_map: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor]:
        def rounded(values: torch.Tensor) -> torch.Tensor:
            return values.to(config.dtype).to(values.dtype)  # as the kernels store their intermediates

        rows = x.reshape(-1, config.hidden)
        ids = topk_ids.reshape(-1, config.top_k).long()
        if expert_map is not None and expert_map.numel():
            ids = expert_map.long()[ids]
        weights = topk_weights.reshape(-1, config.top_k).to(rows.dtype)
        out = torch.zeros_like(rows)
        for expert in ids.unique().tolist():
            if expert < 0:  # another rank's expert: nothing here
                continue
            token, slot = (ids == expert).nonzero(as_tuple=True)
            gate, up = rounded(rows[token] @ w13[expert].T).split(config.intermediate, dim=-1)
            down = rounded(activate(config.activation, gate) * up) @ w2[expert].T
            out.index_add_(0, token, down * weights[token, slot, None])
        return (out.reshape(*x.shape[:-1], config.hidden),)


spec = FusedMoeSpec()
