"""Rotary embedding in plain PyTorch (the spec: ``lazyops.specs.rope``).

Written over views: the rotary features of every head, seen as pairs ``(x1, x2)`` (the two halves of the rotary
features for neox, neighbours otherwise), are rotated in float32 (one rounding at the store, as every backend
computes) and copied back into the same views. Nothing else of a head is touched or cloned. The check that
``query`` and ``key`` do not overlap has run before the launch, so rotating one cannot alter the other's inputs.

On the CPU, four ops a tensor: ``rotated = x * cos`` over both halves at once, then ``x2 * sin`` subtracted from
the first half and ``x1 * sin`` added to the second, then the store; mixed-dtype ops copy their inputs first
there, so a block of tokens is upcast once, and the blocks are small enough for the float32 passes to stay in
cache (see ``CPU_BLOCK_ELEMENTS``). On a GPU (this backend as the last fallback), three: each pair becomes a
complex64 number in a float32 copy, one multiplication by ``cos + i sin`` turns it, and the store rounds once.
(Why that rotation and not the others tried: ``docs/decisions``, "the torch backend's rope on a GPU".)

Positions are range-checked on the CPU (the spec's ``check_values``, before anything is written; ``index_select``
would refuse an index outside the cache too); on a GPU, out-of-range tokens are left unrotated without reading the
positions on the host, as the GPU backends do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lazyops.specs.rope import RopeConfig, spec

#: Elements of rotary features a CPU block holds: 2 MiB of float32, so that a block's upcast copy and its rotation
#: stay in cache between the four passes, while each op is still large enough to split over torch's threads.
CPU_BLOCK_ELEMENTS = 1 << 19


def rotate_all(pairs_of: tuple[torch.Tensor, ...], cos_pairs: torch.Tensor, sin: torch.Tensor, pair_dim: int) -> None:
    """The CPU's rotation of each of ``pairs_of`` (query's and key's pairs, in place): ``x1 * cos - x2 * sin`` and
    ``x2 * cos + x1 * sin`` in float32 (a copy for 16-bit types), stored once, in blocks of tokens that stay in
    cache (:data:`CPU_BLOCK_ELEMENTS`). ``cos_pairs`` is ``cos`` with the pair dimension, ``sin`` without it."""
    for pairs in pairs_of:
        tokens = pairs.shape[0]
        block = max(1, CPU_BLOCK_ELEMENTS // (pairs.shape[1] * pairs.shape[2] * pairs.shape[3]))
        if tokens <= block:
            pieces: Any = ((pairs, cos_pairs, sin),)
        else:
            pieces = (
                (pairs[i : i + block], cos_pairs[i : i + block], sin[i : i + block]) for i in range(0, tokens, block)
            )
        for part, part_cos, part_sin in pieces:
            features = part.float()
            x1, x2 = features.unbind(pair_dim)
            rotated = torch.mul(features, part_cos)  # a new float32 tensor
            rotated1, rotated2 = rotated.unbind(pair_dim)
            rotated1.addcmul_(x2, part_sin, value=-1.0)
            rotated2.addcmul_(x1, part_sin)
            part.copy_(rotated)


def turn_all(pairs_of: tuple[torch.Tensor, ...], turn: torch.Tensor, pair_dim: int) -> None:
    """The GPU's rotation of each of ``pairs_of`` (in place): each pair ``x1 + i x2`` times ``turn`` (``cos + i sin``,
    complex64, broadcast against the pairs without their pair dimension): float32 math, one rounding at the store."""
    for pairs in pairs_of:
        neighbours = pairs.movedim(pair_dim, -1)  # each pair's two features side by side: a view
        # a fresh float32 copy, pairs as its last dimension (``to()`` would keep a float32 view as it is)
        dense = torch.empty_like(neighbours, dtype=torch.float32, memory_format=torch.contiguous_format)
        neighbours.copy_(torch.view_as_real(torch.view_as_complex(dense.copy_(neighbours)) * turn))


@spec.implementation(strided_rows=True)
def rope_tl(config: RopeConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    head_dim, is_neox = config.head_dim, config.is_neox
    # neox: [..., 2, r/2] (the two halves); GPT-J: [..., r/2, 2] (interleaved neighbours)
    pair_dim = -2 if is_neox else -1

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, rotary_dim = cos_sin_cache.shape
        half = rotary_dim // 2
        pair_shape = (2, half) if is_neox else (half, 2)
        q_heads = query.view(query.shape[0], query.shape[1] // head_dim, head_dim)
        k_heads = key.view(key.shape[0], key.shape[1] // head_dim, head_dim)
        if rotary_dim != head_dim:  # (a slice costs an op's dispatch: skipped for the usual full rotation)
            q_heads, k_heads = q_heads[..., :rotary_dim], k_heads[..., :rotary_dim]
        pairs_of = (q_heads.unflatten(-1, pair_shape), k_heads.unflatten(-1, pair_shape))
        if positions.is_cpu:
            try:
                cos_sin = cos_sin_cache.index_select(0, positions)
            except IndexError:
                # On the host the values are at hand: an index outside the cache is refused, not read.
                spec.check_values(config, positions, query, key, cos_sin_cache)
                raise
            # float32 (itself for a float32 cache), [tokens, 1, rotary_dim] cut in halves: each a view
            cos, sin = cos_sin.float().unsqueeze(1).chunk(2, -1)
            rotate_all(pairs_of, cos.unsqueeze(pair_dim), sin, pair_dim)
            return query, key
        # On a GPU, reading the positions would synchronise every call and break CUDA-graph capture. As the GPU
        # backends do, a token whose position lies outside the cache is left as it is: turned by cos = 1, sin = 0,
        # which in float32 reproduces every feature exactly.
        clamped = positions.clamp(0, rows - 1)
        cos_sin = cos_sin_cache.index_select(0, clamped).float()
        inside = (clamped == positions)[:, None, None]
        turn_all(
            pairs_of,
            torch.complex(torch.where(inside, cos_sin[:, None, :half], 1.0), cos_sin[:, None, half:] * inside),
            pair_dim,
        )
        return query, key

    return rope
