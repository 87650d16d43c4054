"""Rotary position embedding applied in place to query and key, as vLLM's ``rotary_embedding``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs import _checks as checks
from lazyops.specs._params import Other, Rows
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


def check_positions_in_cache(label: str, positions: torch.Tensor, cache_rows: int) -> None:
    """Positions index cache rows. Checking their values needs them on the host (a device sync), so only the
    torch backend, which reads them there anyway, calls this; GPU kernels leave an out-of-range token unrotated."""
    if positions.numel() and positions.device.type != "meta":
        low, high = int(positions.min()), int(positions.max())
        if not 0 <= low <= high < cache_rows:
            raise KernelInputError(
                f"{label}: positions range over [{low}, {high}], outside the cache's {cache_rows} rows"
            )


def check_heads(
    label: str, arg: str, tensor: Any, lead: int, head_dim: int, dtype: torch.dtype, device: torch.device
) -> None:
    """``query`` or ``key``: ``[*T, H*head_dim]`` or ``[*T, H, head_dim]``, rows strided at most between tokens."""
    if isinstance(tensor, torch.Tensor) and tensor.dim() == lead + 2:
        checks.check_kind(label, arg, tensor, dtype, device)
        if tensor.shape[-1] != head_dim:
            raise KernelInputError(
                f"{label}: {arg} has shape {tuple(tensor.shape)}; a [*T, H, head_dim] {arg} needs "
                f"head_dim={head_dim} last"
            )
        heads, (head_step, feature_step) = tensor.shape[-2], tensor.stride()[-2:]
        features = (*tensor.shape[:lead], heads * head_dim)
        if (
            (head_dim > 1 and feature_step != 1)
            or (heads > 1 and head_step != head_dim)
            or checks.row_stride(features, (*tensor.stride()[:lead], 1)) is None
        ):
            raise KernelInputError(
                f"{label}: {arg} of shape {tuple(tensor.shape)} has strides {tensor.stride()}: the heads of a token "
                f"must be contiguous (stride {head_dim} between heads) and tokens one row stride apart; pass "
                f"{arg}.contiguous()"
            )
        return
    checks.check_rows(label, arg, tensor, width=None, dtype=dtype, device=device, lead=lead)
    if tensor.shape[-1] % head_dim:
        raise KernelInputError(
            f"{label}: {arg} has {tensor.shape[-1]} features per token, not a multiple of head_dim={head_dim}"
        )


_POSITION_DTYPES = (torch.int32, torch.int64)


def _engine_call(config: RopeConfig, positions: Any, query: Any, key: Any, cos_sin_cache: Any) -> bool:
    """Whether the call is the one engines make on every step, accepted on a few reads: ``positions[M]``,
    ``query[M, Hq*head_dim]`` and ``key[M, Hk*head_dim]`` as dense or row-strided rows, a dense cache. False
    sends the call through the full checks, which accept the other layouts and word every refusal.

    It runs on every step of a model with rope, so query and key are read one after the other, not in a loop, and
    the devices are compared only after everything cheaper has passed."""
    tensor = torch.Tensor
    if not (
        type(positions) is tensor and type(query) is tensor and type(key) is tensor and type(cos_sin_cache) is tensor
    ):
        return False
    head_dim, dtype = config.head_dim, config.dtype
    tokens = positions.shape
    if len(tokens) != 1 or not positions.is_contiguous():
        return False
    count = tokens[0]
    position_dtype = positions.dtype
    if not count or (position_dtype is not torch.int64 and position_dtype is not torch.int32):
        return False
    if query.dtype is not dtype or key.dtype is not dtype:
        return False
    sizes, strides = query.shape, query.stride()
    if len(sizes) != 2 or sizes[0] != count or sizes[1] % head_dim or strides[1] != 1:
        return False
    if strides[0] < sizes[1] and count > 1:
        return False
    sizes, strides = key.shape, key.stride()
    if len(sizes) != 2 or sizes[0] != count or sizes[1] % head_dim or strides[1] != 1:
        return False
    if strides[0] < sizes[1] and count > 1:
        return False
    cache = cos_sin_cache.shape
    rotary = cache[1] if len(cache) == 2 else 0
    cache_dtype = cos_sin_cache.dtype
    if not (0 < rotary <= head_dim) or rotary % 2 or (cache_dtype is not torch.float32 and cache_dtype is not dtype):
        return False
    if not cos_sin_cache.is_contiguous():
        return False
    device = positions.device
    return query.device == device and key.device == device and cos_sin_cache.device == device


class RopeSpec(KernelSpec):
    name = "rope_tl"
    kernel_type = RopeKernel
    # query and key hold any number of heads: their width is checked here, against head_dim
    params = (
        Other("positions"),
        Rows("query", width=None, mutated=True),
        Rows("key", width=None, mutated=True),
        Other("cos_sin_cache"),
    )
    # the positions are indexed by token too ([*T], flattened to [tokens])
    row_inputs = ("positions", "query", "key")

    def flat_ranks(self) -> tuple[tuple[int, int], ...]:
        return ((0, 1), (1, 2), (2, 2))

    def tokens(self, config: RopeConfig, *args: Any) -> int:
        """Every element of the positions ``[*T]`` is a token."""
        return math.prod(args[0].shape)

    def bind(self, head_dim: int, dtype: torch.dtype | str, is_neox: bool = True) -> RopeConfig:
        """Rotary embedding over the first ``r`` features of every head, in place.

        Returns ``kernel(positions[M], query[M, Hq*head_dim], key[M, Hk*head_dim], cos_sin_cache[P, r])
        -> (query, key)``. A cache row holds ``r/2`` cosines then ``r/2`` sines; ``is_neox`` rotates the two halves
        of the rotary features, otherwise interleaved pairs (GPT-J style). The math runs in float32.

        The token dimensions may be any ``*T`` (``positions[batch, seq]``), the heads may be a dimension of their
        own (``query[*T, Hq, head_dim]``), and ``query`` and ``key`` may be row-strided views, as the slices of
        a packed ``qkv[M, (Hq + 2 Hk) * head_dim]`` are: they are rotated where they lie, nothing is copied.
        """
        head_dim = arguments.positive_int(self.name, "head_dim", head_dim)
        dtype = arguments.canonical_dtype(self.name, dtype)
        is_neox = bool(is_neox)
        return RopeConfig(
            head_dim, dtype, is_neox, arguments.describe(self.name, head_dim=head_dim, dtype=dtype, is_neox=is_neox)
        )

    def check(self, config: RopeConfig, positions: Any, query: Any, key: Any, cos_sin_cache: Any) -> None:
        if _engine_call(config, positions, query, key, cos_sin_cache):
            return
        name, head_dim, dtype = config.label, config.head_dim, config.dtype
        checks.check_tensor(
            name,
            "positions",
            positions,
            shape=("*T",) * max(1, getattr(positions, "ndim", 1)),
            dtype=(torch.int32, torch.int64),
        )
        device = positions.device
        lead = positions.dim()
        for arg, tensor in (("query", query), ("key", key)):
            check_heads(name, arg, tensor, lead, head_dim, dtype, device)
            if tensor.shape[:lead] != positions.shape:
                raise KernelInputError(
                    f"{name}: {arg} has shape {tuple(tensor.shape)} and positions {tuple(positions.shape)}; the "
                    f"leading (token) dimensions of {arg} must be the positions' shape"
                )
        checks.check_tensor(
            name, "cos_sin_cache", cos_sin_cache, shape=("P", "r"), dtype=(torch.float32, dtype), device=device
        )
        rotary_dim = cos_sin_cache.shape[1]
        if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
            raise KernelInputError(
                f"{name}: cos_sin_cache rows hold {rotary_dim} values; the rotary dimension must be even and at most "
                f"head_dim={head_dim} (each row is r/2 cosines then r/2 sines)"
            )

    def plain_predicate(
        self, config: RopeConfig, *, strided_rows: bool, device_type: str | None
    ) -> Callable[[tuple[Any, ...]], bool]:
        """The engine call (:func:`_engine_call`), its rows dense unless the launch takes strided ones, on a device
        the launch takes, with what the full path checks besides: no input requiring grad in grad mode, query and
        key writable here (no inference tensor outside inference mode), and neither sharing an element with another
        input (``_checks.overlap``: exact for a packed ``qkv``'s slices)."""
        is_grad_enabled = torch.is_grad_enabled
        inference_mode = torch.is_inference_mode_enabled
        rows_apart = checks.rows_apart
        current_device = torch.cuda.current_device
        on_cuda = device_type == "cuda"
        other_kind = device_type if device_type not in (None, "cuda") else None

        def accepts(args: tuple[Any, ...]) -> bool:
            if len(args) != 4:
                return False
            positions, query, key, cache = args
            if not _engine_call(config, positions, query, key, cache):
                return False
            if not strided_rows and not (query.is_contiguous() and key.is_contiguous()):
                return False
            if on_cuda:
                if not query.is_cuda or query.get_device() != current_device():
                    return False
            elif other_kind is not None and query.device.type != other_kind:
                return False
            if is_grad_enabled() and (query.requires_grad or key.requires_grad or cache.requires_grad):
                return False
            if (query.is_inference() or key.is_inference()) and not inference_mode():
                return False
            return rows_apart(query, key, positions, cache)

        return accepts

    def rows(self, config: RopeConfig, *args: Any) -> tuple[Any, ...]:
        positions, query, key, cache = args
        tokens, lead = positions.numel(), positions.dim()
        return (
            positions.view(tokens),
            query.view(tokens, math.prod(query.shape[lead:])),
            key.view(tokens, math.prod(key.shape[lead:])),
            cache,
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
