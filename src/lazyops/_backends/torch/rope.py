"""Rotary position embedding applied in place to query and key, as vLLM's ``rotary_embedding``."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops._backends._checks import canonical_dtype, check_rope_inputs, describe, positive_int
from lazyops._errors import KernelInputError


def rope_reference(
    positions: torch.Tensor, x: torch.Tensor, cos_sin_cache: torch.Tensor, head_dim: int, is_neox: bool
) -> torch.Tensor:
    """``x[M, H*head_dim]`` rotated (a new tensor), computed in ``x``'s dtype; the cache is cast to it."""
    rotary_dim = cos_sin_cache.shape[1]
    half = rotary_dim // 2
    cos_sin = cos_sin_cache.to(x.dtype)[positions.long()]  # [M, rotary_dim]
    cos = cos_sin[:, None, :half]
    sin = cos_sin[:, None, half:]
    heads = x.reshape(x.shape[0], x.shape[1] // head_dim, head_dim)  # -1 cannot be inferred when M == 0
    rotated = heads.clone()
    if is_neox:
        x1, x2 = heads[..., :half], heads[..., half:rotary_dim]
        rotated[..., :half] = x1 * cos - x2 * sin
        rotated[..., half:rotary_dim] = x2 * cos + x1 * sin
    else:
        x1, x2 = heads[..., 0:rotary_dim:2], heads[..., 1:rotary_dim:2]
        rotated[..., 0:rotary_dim:2] = x1 * cos - x2 * sin
        rotated[..., 1:rotary_dim:2] = x2 * cos + x1 * sin
    return rotated.reshape(x.shape)


class RopeKernel(Protocol):
    """What ``rope_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor, /
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``query[M, Hq*head_dim]`` and ``key[M, Hk*head_dim]`` in place at ``positions[M]``; returns them.

        ``cos_sin_cache[P, r]``: each row ``r/2`` cosines then ``r/2`` sines; the first ``r`` features of every
        head are rotated.
        """
        ...


def rope_tl(head_dim: int, dtype: torch.dtype | str, is_neox: bool = True) -> RopeKernel:
    """Rotary embedding over the first ``r`` features of every head, in place.

    Returns ``kernel(positions[M], query[M, Hq*head_dim], key[M, Hk*head_dim], cos_sin_cache[P, r])
    -> (query, key)``. A cache row holds ``r/2`` cosines then ``r/2`` sines; ``is_neox`` rotates the two halves
    of the rotary features, otherwise interleaved pairs (GPT-J style). The math runs in float32.
    """
    head_dim = positive_int("rope_tl", "head_dim", head_dim)
    dtype = canonical_dtype("rope_tl", dtype)
    is_neox = bool(is_neox)
    name = describe("rope_tl", head_dim=head_dim, dtype=dtype, is_neox=is_neox)

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_rope_inputs(name, head_dim, dtype, positions, query, key, cos_sin_cache)
        if positions.numel() and not 0 <= int(positions.min()) <= int(positions.max()) < cos_sin_cache.shape[0]:
            raise KernelInputError(
                f"{name}: positions range over [{int(positions.min())}, {int(positions.max())}], outside the "
                f"cache's {cos_sin_cache.shape[0]} rows"
            )
        cache = cos_sin_cache.float()
        query.copy_(rope_reference(positions, query.float(), cache, head_dim, is_neox))
        key.copy_(rope_reference(positions, key.float(), cache, head_dim, is_neox))
        return query, key

    return rope
