"""What the two paged-KV-cache kernels share (``kv_cache_write_tl`` and ``paged_attention_tl``): the cache's layout
and dtype, the fp8 cache's scales, and heads given as their own dimension or packed in a row, as declarations.

The cache is vLLM's flash layout ("NHD"): ``key_cache[num_blocks, block_size, Hk, D]`` and a ``value_cache`` of the
same shape, contiguous. A token's slot is ``block * block_size + offset``.

The scales of an fp8 cache are one-element float32 tensors passed as keyword arguments (``k_scale=``, ``v_scale=``),
read by the kernel on every launch, so that a CUDA graph replays with whatever they hold. Without an fp8 cache they
are absent: ``None`` (the custom operator's ``Tensor?``; an empty tensor is read as absent too).
"""

from __future__ import annotations

from typing import Any

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs._params import Rows, Tensor

#: The fp8 cache's dtype and its largest finite value (stored values saturate there).
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
#: The names ``cache_dtype`` accepts for the fp8 cache besides ``torch.float8_e4m3fn``.
FP8_NAMES = ("float8_e4m3fn", "fp8", "fp8_e4m3")


def cache_dtype(factory: str, value: Any, dtype: torch.dtype) -> torch.dtype:
    """The factory's ``cache_dtype``: ``dtype`` when None, else ``dtype`` itself or ``torch.float8_e4m3fn``."""
    if value is None:
        return dtype
    if value is FP8_DTYPE or (isinstance(value, str) and value.lower().removeprefix("torch.") in FP8_NAMES):
        return FP8_DTYPE
    try:
        resolved: torch.dtype | None = arguments.canonical_dtype(factory, value)
    except KernelInputError:
        resolved = None
    if resolved is not dtype:
        raise KernelInputError(
            f"{factory}: cache_dtype={value!r}; the cache holds the factory's dtype ({dtype}, cache_dtype=None) or "
            "torch.float8_e4m3fn (with k_scale and v_scale at every call)"
        )
    return dtype


def head_rows(name: str, heads: str) -> Rows:
    """A token-indexed input of ``config.<heads>`` heads of ``head_dim``: rows ``[*T, heads * head_dim]`` (strided:
    a slice of a packed ``qkv``) or ``[T, heads, head_dim]``."""
    return Rows(name, width=lambda config: getattr(config, heads) * config.head_dim, head="head_dim")


def caches(*, mutated: bool = False) -> tuple[Tensor, Tensor]:
    """``key_cache`` and ``value_cache``: ``[N, block_size, num_kv_heads, head_dim]`` of the cache dtype, dense, the
    same number of blocks ``N``."""
    shape = ("N", "block_size", "num_kv_heads", "head_dim")
    return (
        Tensor("key_cache", shape, "cache_dtype", mutated=mutated),
        Tensor("value_cache", shape, "cache_dtype", mutated=mutated),
    )


def _fp8(config: Any) -> bool:
    return config.cache_dtype is FP8_DTYPE


_SCALES_WHY = (
    "an fp8 cache needs k_scale and v_scale, one-element float32 tensors (its dequantisation scales: cache = "
    "fp8(x / scale)); scales apply to an fp8 cache only (cache_dtype=torch.float8_e4m3fn)"
)
#: ``k_scale=``, ``v_scale=``: given with an fp8 cache, left out otherwise.
SCALES = (
    Tensor("k_scale", (1,), torch.float32, keyword=True, present=_fp8, why=_SCALES_WHY),
    Tensor("v_scale", (1,), torch.float32, keyword=True, present=_fp8, why=_SCALES_WHY),
)
