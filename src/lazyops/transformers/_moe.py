"""A sparse MoE block (Mixtral's, Qwen3-MoE's) on ``moe_route_tl`` and ``fused_moe_tl``, where lazyops has them.

The glue is this module alone: the router's logits (its linear layer, cuBLAS), the top-k (``moe_route_tl``: softmax,
renormalised as the model does, into float32 weights and int32 ids allocated here for each call) and the experts
(``fused_moe_tl`` on the block's own ``gate_up_proj[E, 2I, H]`` and ``down_proj[E, H, I]``, which are already the
layout it takes). Until both kernels exist, :func:`missing` names them and the block stays as it is, said so in the
report.
"""

from __future__ import annotations

from typing import Any

import torch

import lazyops

KERNELS = ("moe_route_tl", "fused_moe_tl")


def missing() -> tuple[str, ...]:
    """The MoE kernels this lazyops lacks (none once they are in ``lazyops.kernels()``)."""
    known = set(lazyops.kernels())
    return tuple(name for name in KERNELS if name not in known)


def configurations(block: Any, dtype: torch.dtype) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """``{kernel: (args, kwargs)}`` of ``block``: the router's and the experts' factory arguments."""
    experts, router = block.experts, block.gate
    num_experts, intermediate, hidden = experts.gate_up_proj.shape[0], experts.down_proj.shape[2], experts.hidden_dim
    renormalize = bool(getattr(router, "norm_topk_prob", True))  # Mixtral always renormalises
    return {
        "moe_route_tl": ((num_experts, router.top_k, dtype), {"scoring": "softmax", "renormalize": renormalize}),
        "fused_moe_tl": ((hidden, intermediate, num_experts, router.top_k, dtype), {"activation": "silu"}),
    }


def forward(block: Any, dtype: torch.dtype) -> Any:
    """``block``'s forward on lazyops' kernels, built now."""
    built = {name: getattr(lazyops, name)(*args, **kw) for name, (args, kw) in configurations(block, dtype).items()}
    route, experts = built["moe_route_tl"], built["fused_moe_tl"]

    def moe_forward(hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        rows = hidden_states.reshape(-1, shape[-1])
        logits = torch.nn.functional.linear(rows, block.gate.weight)
        top_k = block.gate.top_k
        weights = torch.empty(rows.shape[0], top_k, dtype=torch.float32, device=rows.device)
        ids = torch.empty(rows.shape[0], top_k, dtype=torch.int32, device=rows.device)
        route(logits, weights, ids)
        out = experts(rows, block.experts.gate_up_proj, block.experts.down_proj, weights, ids)
        return out.view(shape)  # type: ignore[no-any-return]

    return moe_forward
