"""The experts of a sparse MoE layer in plain PyTorch (the spec: ``lazyops.specs.fused_moe``).

The loop over experts torch users write, on the assignments sorted by expert once: one ``bincount`` read on the
host (the only synchronisation), then per expert that has tokens the gate/up GEMM in the input dtype, the
activation in float32, rounded to the dtype, the down GEMM, and the weighted rows added into a float32 sum. It
reads each token through a gather rather than a block table, so it is the reference and the last resort, not a
graph-capturable kernel: the GEMMs' sizes are the experts' token counts, which torch can only take from the host.
(Graph-safe torch would be ``torch._grouped_mm`` with device offsets, CUDA and Hopper only, or every expert over
its worst-case rows, ``E`` times the work.) An ``expert_map`` turns global ids into local ones first; an
assignment to an absent expert (-1) falls into a bin past the last expert, which is never computed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.fused_moe import FusedMoeConfig, activate, spec


@spec.implementation
def fused_moe_tl(config: FusedMoeConfig) -> Callable[..., torch.Tensor]:
    intermediate, top_k, activation = config.intermediate, config.top_k, config.activation

    def fused_moe(
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        expert_map: torch.Tensor | None,
    ) -> torch.Tensor:
        flat = topk_ids.reshape(-1)
        experts = w13.shape[0]
        if expert_map is not None and expert_map.numel():
            flat = expert_map[flat.long()]
            flat = torch.where(flat < 0, experts, flat)  # absent: the bin past the last expert
        order = flat.argsort(stable=True)
        tokens = order // top_k
        counts = torch.bincount(flat, minlength=experts).tolist()[:experts]
        weights = topk_weights.reshape(-1)[order]
        total = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            rows = tokens[start : start + count]
            gate, up = (x[rows] @ w13[expert].T).float().split(intermediate, dim=-1)  # rounded to x's dtype
            hidden = (activate(activation, gate) * up).to(x.dtype)
            down = (hidden @ w2[expert].T).float() * weights[start : start + count, None]
            total.index_add_(0, rows, down)
            start += count
        return total.to(x.dtype)

    return fused_moe
