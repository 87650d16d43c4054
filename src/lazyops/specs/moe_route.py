"""The router of a sparse MoE layer: from router logits to each token's ``k`` experts and their weights.

``softmax`` scoring (Mixtral, Qwen3-MoE): the softmax over the experts in float32, the ``k`` largest, optionally
renormalised to sum to one (vLLM's ``fused_topk``, sgl-kernel's ``topk_softmax``).

``sigmoid`` scoring (DeepSeek-V3, vLLM's ``grouped_topk``, sgl-kernel's ``moe_fused_gate``): each expert's score
is ``sigmoid(logit)``; it is selected by ``score + correction_bias`` (``e_score_correction_bias``, with
``correction_bias=True``). With ``n_group`` groups of ``E / n_group`` consecutive experts, only the experts of the
``topk_group`` best groups may be chosen, a group ranked by the sum of its two best selection scores with a bias
(its best one without, as vLLM). The weights are the chosen experts' scores (without the bias), renormalised if
configured, times ``routed_scaling_factor`` (any scoring).

Ties go to the lower expert id (and group id), so every backend picks the same experts. A NaN logit ranks as
``-inf`` (its expert picked after every number, ties to the lower id as ever) and a row holding one gets NaN
weights, in every backend: a broken router shows in the layer's output instead of being hidden. The call writes
``topk_weights[..., k]`` (float32) and ``topk_ids[..., k]`` (int32) in place and returns them: their sizes come
from the token count alone, so an engine allocates them once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import Rows, Tensor
from lazyops.specs._spec import KernelSpec

SCORINGS = ("softmax", "sigmoid")


class MoeRouteKernel(Protocol):
    """What ``moe_route_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self,
        logits: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        /,
        *,
        correction_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes each token's ``k`` experts of ``logits[..., E]`` into ``topk_ids[..., k]`` (int32, highest score
        first, ties to the lower id) and their weights into ``topk_weights[..., k]`` (float32); returns both.
        ``correction_bias[E]`` (float32): required with ``correction_bias=True``, else left out."""
        ...


@dataclass(frozen=True)
class MoeRouteConfig:
    num_experts: int
    top_k: int
    dtype: torch.dtype
    scoring: str
    renormalize: bool
    label: str
    n_group: int = 1
    topk_group: int = 1
    correction_bias: bool = False
    routed_scaling_factor: float = 1.0

    @property
    def group_size(self) -> int:
        return self.num_experts // self.n_group


def select(
    config: MoeRouteConfig, logits: torch.Tensor, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, ids)``: the ``k`` best experts, ties to the lower id (stable sorts), and their weights in
    ``logits``' dtype (float32 or float64), as the module says. Plain torch with no host read."""
    nan = logits.isnan()
    if config.scoring == "softmax":
        scores = torch.softmax(logits, dim=-1)
        key = logits.masked_fill(nan, -math.inf)
    else:
        scores = torch.sigmoid(logits)
        key = scores if bias is None or not bias.numel() else scores + bias.to(scores.dtype)
        key = key.masked_fill(nan, -math.inf)
    ranked = key.argsort(dim=-1, descending=True, stable=True)
    if config.n_group > 1:
        grouped = key.unflatten(-1, (config.n_group, config.group_size))
        if config.correction_bias and config.group_size > 1:
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        else:
            group_scores = grouped.amax(dim=-1)
        best = group_scores.argsort(dim=-1, descending=True, stable=True)[..., : config.topk_group]
        chosen = torch.zeros_like(group_scores, dtype=torch.bool).scatter(-1, best, True)
        allowed = chosen.unsqueeze(-1).expand(*chosen.shape, config.group_size).flatten(-2)
        first = allowed.gather(-1, ranked).to(torch.int8).argsort(dim=-1, descending=True, stable=True)
        ranked = ranked.gather(-1, first)  # the allowed experts first, each part in the order of its keys
    ids = ranked[..., : config.top_k]
    weights = scores.gather(-1, ids)
    if config.renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if config.routed_scaling_factor != 1.0:
        weights = weights * config.routed_scaling_factor
    return weights.masked_fill(nan.any(dim=-1, keepdim=True), math.nan), ids


class MoeRouteSpec(KernelSpec):
    name = "moe_route_tl"
    kernel_type = MoeRouteKernel
    params = (
        Rows("logits", width="num_experts"),
        Rows("topk_weights", width="top_k", dtype=torch.float32, mutated=True),
        Rows("topk_ids", width="top_k", dtype=torch.int32, mutated=True),
        Tensor(
            "correction_bias",
            ("num_experts",),
            torch.float32,
            keyword=True,
            present=lambda config: config.correction_bias,
            why=(
                "a factory built with correction_bias=True takes correction_bias[num_experts] (float32, DeepSeek-V3's "
                "e_score_correction_bias) at every call, and one built without it takes none"
            ),
        ),
    )
    #: the conformance tests widen no ``correction_bias``: a left-out one is None or empty
    free_widths = ("correction_bias",)

    def bind(
        self,
        num_experts: int,
        top_k: int,
        dtype: torch.dtype | str = "float32",
        *,
        scoring: str = "softmax",
        renormalize: bool = True,
        n_group: int = 1,
        topk_group: int = 1,
        correction_bias: bool = False,
        routed_scaling_factor: float = 1.0,
    ) -> MoeRouteConfig:
        """The router of a sparse MoE layer: ``top_k`` of ``num_experts`` experts a token, from logits in ``dtype``.

        Returns ``kernel(logits[..., E], topk_weights[..., k], topk_ids[..., k], *, correction_bias=None) ->
        (topk_weights, topk_ids)``, written in place: the ``k`` best experts (int32, ties to the lower id) and their
        weights (float32). ``scoring="softmax"``: by logit, weighted by softmax probability, renormalised to sum to
        one when ``renormalize`` (Mixtral; Qwen3-MoE's ``norm_topk_prob``). ``scoring="sigmoid"`` (DeepSeek-V3):
        weighted by ``sigmoid(logit)``, selected by that plus ``correction_bias[E]`` (float32, passed per call when
        ``correction_bias=True``) among the experts of the ``topk_group`` best of ``n_group`` groups (ranked by
        their two best selection scores' sum with a bias, their best without). The weights are then multiplied by
        ``routed_scaling_factor``. A NaN logit ranks as ``-inf`` and makes its row's weights NaN.
        """
        num_experts = _params.positive_int(self.name, "num_experts", num_experts)
        top_k = _params.positive_int(self.name, "top_k", top_k)
        dtype = _params.canonical_dtype(self.name, dtype)
        if scoring not in SCORINGS:
            raise KernelInputError(
                f"{self.name}: scoring must be one of {', '.join(map(repr, SCORINGS))}, got {scoring!r} (DeepSeek-V3's "
                "grouped sigmoid scoring is not in this lazyops yet)"
            )
        if top_k > num_experts:
            raise KernelInputError(f"{self.name}: top_k {top_k} exceeds num_experts {num_experts}; pick at most that")
        renormalize = bool(renormalize)
        n_group = _params.positive_int(self.name, "n_group", n_group)
        topk_group = _params.positive_int(self.name, "topk_group", topk_group)
        correction_bias = _params.flag(self.name, "correction_bias", correction_bias)
        factor = _params.finite_float(self.name, "routed_scaling_factor", routed_scaling_factor, positive=True)
        options: dict[str, Any] = {}
        if scoring == "softmax" and (n_group != 1 or correction_bias):
            raise KernelInputError(
                f"{self.name}: n_group and correction_bias are sigmoid scoring's (DeepSeek-V3): pass scoring='sigmoid'"
            )
        if n_group != 1:
            if num_experts % n_group:
                raise KernelInputError(f"{self.name}: n_group {n_group} does not divide num_experts {num_experts}")
            if topk_group > n_group or top_k > topk_group * (num_experts // n_group):
                raise KernelInputError(
                    f"{self.name}: topk_group {topk_group} of n_group {n_group} groups of {num_experts // n_group} "
                    f"experts cannot hold top_k {top_k}"
                )
            options.update(n_group=n_group, topk_group=topk_group)
        else:
            topk_group = 1
        if correction_bias:
            options["correction_bias"] = True
        if factor != 1.0:
            options["routed_scaling_factor"] = factor
        label = _params.describe(
            self.name,
            num_experts=num_experts,
            top_k=top_k,
            dtype=dtype,
            scoring=scoring,
            renormalize=renormalize,
            **options,
        )
        return MoeRouteConfig(
            num_experts, top_k, dtype, scoring, renormalize, label, n_group, topk_group, correction_bias, factor
        )

    def reference(  # type: ignore[override]
        self,
        config: MoeRouteConfig,
        logits: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        correction_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights, ids = select(config, logits, correction_bias)
        return weights.to(topk_weights.dtype), ids.to(topk_ids.dtype)


spec = MoeRouteSpec()
