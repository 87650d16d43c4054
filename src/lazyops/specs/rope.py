"""Rotary position embedding applied in place to query and key, as vLLM's ``rotary_embedding``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import TOKEN_DIMS, Rows, Tensor
from lazyops.specs._spec import KernelSpec


class RopeKernel(Protocol):
    """What ``rope_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor, /
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``query[*T, Hq*head_dim]`` and ``key[*T, Hk*head_dim]`` (or ``[*T, H, head_dim]``) in place at
        ``positions[*T]``; returns them. Both may be views of one packed ``qkv`` buffer (strided rows).

        ``cos_sin_cache[P, r]``: each row ``r/2`` cosines then ``r/2`` sines; the first ``r`` features of every
        head are rotated.
        """
        ...


@dataclass(frozen=True)
class RopeConfig:
    head_dim: int
    dtype: torch.dtype
    is_neox: bool
    label: str


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


class RopeSpec(KernelSpec):
    name = "rope_tl"
    kernel_type = RopeKernel
    # query and key: any number of heads of head_dim, in rows or as their own dimension; a cache row holds r/2
    # cosines then r/2 sines, r even and at most head_dim
    params = (
        Tensor("positions", (TOKEN_DIMS,), (torch.int32, torch.int64)),
        Rows("query", width=None, head="head_dim", mutated=True),
        Rows("key", width=None, head="head_dim", mutated=True),
        Tensor("cos_sin_cache", (None, lambda config: range(2, config.head_dim + 1, 2)), (torch.float32, "dtype")),
    )

    def bind(self, head_dim: int, dtype: torch.dtype | str, is_neox: bool = True) -> RopeConfig:
        """Rotary embedding over the first ``r`` features of every head, in place.

        Returns ``kernel(positions[M], query[M, Hq*head_dim], key[M, Hk*head_dim], cos_sin_cache[P, r])
        -> (query, key)``. A cache row holds ``r/2`` cosines then ``r/2`` sines; ``is_neox`` rotates the two halves
        of the rotary features, otherwise interleaved pairs (GPT-J style). The math runs in float32.

        The token dimensions may be any ``*T`` (``positions[batch, seq]``), the heads may be a dimension of their
        own (``query[*T, Hq, head_dim]``), and ``query`` and ``key`` may be row-strided views, as the slices of
        a packed ``qkv[M, (Hq + 2 Hk) * head_dim]`` are: they are rotated where they lie, nothing is copied.
        """
        head_dim = _params.positive_int(self.name, "head_dim", head_dim)
        dtype = _params.canonical_dtype(self.name, dtype)
        is_neox = bool(is_neox)
        return RopeConfig(
            head_dim, dtype, is_neox, _params.describe(self.name, head_dim=head_dim, dtype=dtype, is_neox=is_neox)
        )

    def check_values(self, config: RopeConfig, positions: Any, query: Any, key: Any, cos_sin_cache: Any) -> None:
        """Positions index the cache's rows (read on the host; a GPU kernel leaves a token outside them unrotated)."""
        if positions.numel():
            low, high = positions.aminmax()
            low, high = int(low), int(high)
            if not 0 <= low <= high < cos_sin_cache.shape[0]:
                raise KernelInputError(
                    f"{config.label}: positions range over [{low}, {high}], outside the cache's "
                    f"{cos_sin_cache.shape[0]} rows"
                )

    def reference(  # type: ignore[override]
        self,
        config: RopeConfig,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(query, key)`` rotated (new tensors; the inputs are left alone)."""

        def rotated(x: torch.Tensor) -> torch.Tensor:
            if positions.numel() == 0:
                return x.clone()
            flat = x.reshape(positions.numel(), -1)
            turned = rope_reference(
                positions.reshape(-1), flat, cos_sin_cache.to(x.dtype), config.head_dim, config.is_neox
            )
            return turned.reshape(x.shape)

        return rotated(query), rotated(key)


spec = RopeSpec()
