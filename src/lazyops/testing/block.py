"""A small decoder block built from lazyops kernels, to check a backend inside ``torch.compile`` and ``torch.export``.

An engine compiles its model, not single kernels: what matters is that a block of kernels traces into one graph
(``fullgraph=True``), with the in-place updates (the residual, query and key) ordered as in eager mode, and gives
what eager mode gives. ``decoder_block`` returns such a block, shaped as an engine's layer in miniature, and a maker
of its inputs; the kernels come from the namespace, so whichever backend is selected is the one checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def decoder_block(
    hidden: int, dtype: torch.dtype
) -> tuple[Callable[..., Any], Callable[[int, str], tuple[torch.Tensor, ...]]]:
    """A small decoder block in an engine's order: add_rmsnorm → QKV GEMM → rope → softmax over per-head scores →
    O GEMM → rmsnorm → gate-up GEMM → SiLU-and-mul → down GEMM. Returns the block and a maker of its inputs."""
    import lazyops

    head_dim, heads, kv_heads, mlp = 16, hidden // 16, max(1, hidden // 32), 2 * hidden
    add_rmsnorm = lazyops.add_rmsnorm_tl(hidden, dtype)
    rmsnorm = lazyops.rmsnorm_tl(hidden, dtype)
    qkv_proj = lazyops.matmul_tl((heads + 2 * kv_heads) * head_dim, hidden, dtype)
    rope = lazyops.rope_tl(head_dim, dtype)
    softmax = lazyops.softmax_tl(heads, dtype)
    o_proj = lazyops.matmul_tl(hidden, heads * head_dim, dtype)
    gate_up = lazyops.matmul_tl(2 * mlp, hidden, dtype)
    down = lazyops.matmul_tl(hidden, mlp, dtype)
    silu_and_mul = lazyops.silu_and_mul_tl(mlp, dtype)

    def block(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual, norm_weight, positions, cache, w_qkv, w_o, w_gate_up, w_down = args
        h = add_rmsnorm(x, residual, norm_weight)
        qkv = qkv_proj(h, w_qkv)
        q = qkv[:, : heads * head_dim].contiguous()
        k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].contiguous()
        q, k = rope(positions, q, k, cache)
        tokens = q.shape[0]
        per_head = q.view(tokens, heads, head_dim)
        scores = softmax((per_head * k[:, :head_dim].view(tokens, 1, head_dim)).sum(-1).contiguous())
        attended = o_proj((per_head * scores[..., None]).reshape(tokens, heads * head_dim), w_o)
        h = rmsnorm(attended, norm_weight)
        out = down(silu_and_mul(gate_up(h, w_gate_up)), w_down)
        return out, residual

    def inputs(tokens: int, device: str) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(tokens)

        def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

        return (
            randn(tokens, hidden),
            randn(tokens, hidden),
            randn(hidden),
            torch.randint(0, 64, (tokens,), generator=g).to(device),
            randn(64, head_dim),
            randn(hidden, (heads + 2 * kv_heads) * head_dim, scale=hidden**-0.5),
            randn(heads * head_dim, hidden, scale=hidden**-0.5),
            randn(hidden, 2 * mlp, scale=hidden**-0.5),
            randn(mlp, hidden, scale=mlp**-0.5),
        )

    return block, inputs
