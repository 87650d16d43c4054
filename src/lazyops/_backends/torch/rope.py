"""Rotary embedding in plain PyTorch (the spec: ``lazyops.specs.rope``).

Written over views: the rotary features of every head are read once into float32, rotated there (float32 math,
one rounding at the store, as every backend computes), and copied back into the same views. Nothing else of a head
is touched or cloned. Positions are range-checked on the CPU; on a GPU, out-of-range tokens are left unrotated
without reading the positions on the host, as the GPU backends do. Both tensors' rotations are computed before
either is written, so neither write can alter the other's inputs, and every check has run before the first write.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.rope import RopeConfig, check_positions_in_cache, spec


def rotated_features(
    x: torch.Tensor, head_dim: int, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(view, values)``: the rotary features of ``x[M, H*head_dim]`` as a view, and their rotation in float32."""
    rotary_dim = 2 * cos.shape[-1]
    heads = x.view(x.shape[0], x.shape[1] // head_dim, head_dim)[..., :rotary_dim]
    features = heads.float()  # a copy for 16-bit types; ``heads`` itself for float32, hence no writes below
    rotation = torch.empty(features.shape, dtype=torch.float32, device=x.device)
    if is_neox:
        half = rotary_dim // 2
        x1, x2, out1, out2 = features[..., :half], features[..., half:], rotation[..., :half], rotation[..., half:]
    else:
        x1, x2, out1, out2 = features[..., 0::2], features[..., 1::2], rotation[..., 0::2], rotation[..., 1::2]
    torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-1.0)
    torch.mul(x2, cos, out=out2).addcmul_(x1, sin)
    return heads, rotation


@spec.implementation(strided_rows=True)
def rope_tl(config: RopeConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    head_dim, is_neox, label = config.head_dim, config.is_neox, config.label

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = cos_sin_cache.shape[0]
        if positions.device.type == "cpu":
            # On the host the values are at hand: an index outside the cache is refused, not read.
            check_positions_in_cache(label, positions, rows)
            cos_sin = cos_sin_cache.index_select(0, positions)
        else:
            # On a GPU, reading them would synchronise every call and break CUDA-graph capture. As the GPU
            # backends do, a token whose position lies outside the cache is left as it is: it is rotated by
            # cos = 1, sin = 0, which in float32 reproduces every feature exactly.
            inside = (positions >= 0) & (positions < rows)
            cos_sin = cos_sin_cache.index_select(0, positions.clamp(0, rows - 1))
            identity = torch.cat([cos_sin.new_ones(cos_sin.shape[1] // 2), cos_sin.new_zeros(cos_sin.shape[1] // 2)])
            cos_sin = torch.where(inside[:, None], cos_sin, identity)
        if cos_sin.dtype != torch.float32:
            cos_sin = cos_sin.float()
        half = cos_sin.shape[1] // 2
        cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]
        query_view, query_rotated = rotated_features(query, head_dim, cos, sin, is_neox)
        key_view, key_rotated = rotated_features(key, head_dim, cos, sin, is_neox)
        query_view.copy_(query_rotated)
        key_view.copy_(key_rotated)
        return query, key

    return rope
