"""New tokens' keys and values written into a paged KV cache at their slots, as vLLM's ``reshape_and_cache_flash``.

``key_cache.view(-1, Hk, D)[slot_mapping[t]] = key[t]`` (and the value likewise) for every token ``t`` whose slot
is not negative: a negative slot is a padding token (a CUDA graph's batch padded to its captured size), skipped.
With an fp8 cache, what is stored is ``fp8(clamp(x / k_scale, -448, 448))``: divided in float32, saturated at the
format's largest value, converted once (round to nearest even).

Two tokens of one call mapped to one slot are accepted, as vLLM accepts them: which token's row the slot keeps is
unspecified on a GPU (programs run unordered); on the CPU (the torch backend, Triton's interpreter) the last token's.
Refusing them would take a host read of the slots (a synchronisation a GPU call never makes) or a device sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import TOKENS, Tensor, head_rows
from lazyops.specs._spec import KernelSpec
from lazyops.specs.paged_attention import FP8_DTYPE, FP8_MAX, SCALES, cache_dtype_of, caches


class KVCacheWriteKernel(Protocol):
    """What ``kv_cache_write_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        /,
        *,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``key[T, Hk, D]`` and ``value`` (or ``[T, Hk*D]`` rows, strided: slices of a packed ``qkv``) into
        ``key_cache[num_blocks, block_size, Hk, D]`` and ``value_cache`` at ``slot_mapping[T]`` (int64, ``block *
        block_size + offset``; negative: a padding token, skipped), in place; returns the caches.

        An fp8 cache takes ``k_scale`` and ``v_scale``, one-element float32 tensors: it stores ``fp8(x / scale)``,
        saturated at ±448.
        """
        ...


@dataclass(frozen=True)
class KVCacheWriteConfig:
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    block_size: int
    cache_dtype: torch.dtype
    label: str


def stored(x: torch.Tensor, scale: torch.Tensor | None, cache_dtype: torch.dtype) -> torch.Tensor:
    """What the cache holds for ``x``, in ``x``'s dtype: ``x`` itself, or for an fp8 cache ``x / scale`` divided in
    float32 (as the kernels divide: ``x`` is exact in float32 whatever the activations' dtype), saturated and
    rounded to float8."""
    if cache_dtype is not FP8_DTYPE or scale is None:
        return x
    quotient = x.float() / scale.float().reshape(())
    return quotient.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).to(x.dtype)


class KVCacheWriteSpec(KernelSpec):
    name = "kv_cache_write_tl"
    kernel_type = KVCacheWriteKernel
    # key and value: rows [*T, Hk*D] (strided: slices of a packed qkv) or [T, Hk, D]; the caches written in place
    params = (
        head_rows("key", "num_kv_heads"),
        head_rows("value", "num_kv_heads"),
        *caches(mutated=True),
        Tensor("slot_mapping", (TOKENS,), torch.int64),
        *SCALES,
    )

    def bind(
        self,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype | str,
        *,
        block_size: int,
        cache_dtype: torch.dtype | str | None = None,
    ) -> KVCacheWriteConfig:
        """Writes new tokens' keys and values into a paged KV cache (vLLM's flash layout), in place.

        Returns ``kernel(key, value, key_cache, value_cache, slot_mapping, *, k_scale=None, v_scale=None) ->
        (key_cache, value_cache)``: ``key[T, Hk, D]`` or ``[T, Hk*D]`` (rows may be strided: the slices of a packed
        ``qkv``), caches ``[num_blocks, block_size, Hk, D]`` of ``cache_dtype`` (default ``dtype``; or
        ``torch.float8_e4m3fn``, storing ``fp8(x / scale)`` with one-element float32 ``k_scale``, ``v_scale``),
        ``slot_mapping[T]`` int64 (``block * block_size + offset``; negative: a padding token, skipped).

        The same call elsewhere::

            lazyops:    kv_cache_write_tl(Hk, D, dtype, block_size=16)(key, value, k_cache, v_cache, slot_mapping)
            vLLM:       reshape_and_cache_flash(key, value, k_cache, v_cache, slot_mapping, "auto", k_scale, v_scale)
            FlashInfer: append_paged_kv_cache(key, value, batch_indices, positions, (k_cache, v_cache), kv_indices,
                        kv_indptr, kv_last_page_len, kv_layout="NHD")   (slots from pages and positions)

        ``block_size`` has no default. Two tokens mapped to one slot: one of them lands, unspecified which on a GPU
        (the last on the CPU), as in vLLM. Slots are range-checked where they are read on the host (CPU tensors); a
        GPU kernel skips a slot past the cache rather than write out of bounds, without a host read (which would
        synchronise every call).
        """
        name = self.name
        num_kv_heads = _params.positive_int(name, "num_kv_heads", num_kv_heads)
        head_dim = _params.positive_int(name, "head_dim", head_dim)
        dtype = _params.canonical_dtype(name, dtype)
        block_size = _params.positive_int(name, "block_size", block_size)
        stored_dtype = cache_dtype_of(name, cache_dtype, dtype)
        options = {"cache_dtype": stored_dtype} if stored_dtype is not dtype else {}
        label = _params.describe(
            name, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=dtype, block_size=block_size, **options
        )
        return KVCacheWriteConfig(num_kv_heads, head_dim, dtype, block_size, stored_dtype, label)

    def check_values(self, config: KVCacheWriteConfig, *args: Any) -> None:
        """Every slot below ``num_blocks * block_size`` (a negative one is padding)."""
        _, _, key_cache, _, slot_mapping, *_ = args
        slots = key_cache.shape[0] * config.block_size
        if slot_mapping.numel() and int(slot_mapping.max()) >= slots:
            token = int(slot_mapping.argmax())
            raise KernelInputError(
                f"{config.label}: slot_mapping[{token}] = {int(slot_mapping[token])} lies past the cache's {slots} "
                "slots (num_blocks * block_size); a slot is block * block_size + offset, and a padding token takes -1"
            )

    def reference(self, config: KVCacheWriteConfig, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """New caches (the inputs are left alone) with each token of a non-negative slot written, a plain loop."""
        key, value, key_cache, value_cache, slot_mapping, *scales = args  # the scales: an fp8 cache's, or absent
        new = []
        for x, cache, scale in zip((key, value), (key_cache, value_cache), (*scales, None, None)[:2], strict=True):
            written = cache.clone()
            slots, rows = written.view(-1, *cache.shape[2:]), x.reshape(-1, *cache.shape[2:])
            for token, slot in enumerate(slot_mapping.reshape(-1).tolist()):
                if slot >= 0:
                    slots[slot] = stored(rows[token], scale, config.cache_dtype).to(cache.dtype)
            new.append(written)
        return new[0], new[1]


spec = KVCacheWriteSpec()
