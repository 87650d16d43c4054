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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs import _checks as checks
from lazyops.specs import _paged as paged
from lazyops.specs._params import Other, Rows


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


# -- the definition ----------------------------------------------------------------------------------------------
def stored(x: torch.Tensor, scale: torch.Tensor | None, cache_dtype: torch.dtype) -> torch.Tensor:
    """What the cache holds for ``x``, in ``x``'s dtype: ``x`` itself, or for an fp8 cache ``x / scale`` divided in
    float32 (as the kernels divide: ``x`` is exact in float32 whatever the activations' dtype), saturated and
    rounded to float8."""
    if cache_dtype is not paged.FP8_DTYPE or scale is None:
        return x
    quotient = x.float() / scale.float().reshape(())
    return quotient.clamp(-paged.FP8_MAX, paged.FP8_MAX).to(paged.FP8_DTYPE).to(x.dtype)


def kv_cache_write_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    cache_dtype: torch.dtype,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New caches (the inputs are left alone) with each token of a non-negative slot written, a plain loop."""
    heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    new = []
    for x, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        written = cache.clone()
        slots = written.view(-1, heads, head_dim)
        rows = x.reshape(-1, heads, head_dim)
        for token, slot in enumerate(slot_mapping.reshape(-1).tolist()):
            if slot >= 0:
                slots[slot] = stored(rows[token], scale, cache_dtype).to(cache.dtype)
        new.append(written)
    return new[0], new[1]


# -- the checks ----------------------------------------------------------------------------------------------------
def check_slot_values(label: str, slot_mapping: torch.Tensor, slots: int) -> None:
    """Every slot below ``num_blocks * block_size`` (a negative one is padding): read on the host."""
    values = paged.host(slot_mapping)
    if values.numel() and int(values.max()) >= slots:
        token = int(values.argmax())
        raise KernelInputError(
            f"{label}: slot_mapping[{token}] = {int(values[token])} lies past the cache's {slots} slots "
            "(num_blocks * block_size); a slot is block * block_size + offset, and a padding token takes -1"
        )


# -- the spec ------------------------------------------------------------------------------------------------------
class KVCacheWriteSpec(paged.PagedSpec):
    name = "kv_cache_write_tl"
    kernel_type = KVCacheWriteKernel
    # key and value: [T, Hk, D] or rows [*T, Hk*D] (checked here); the caches written in place, returned
    params = (
        Rows("key", width=None),
        Rows("value", width=None),
        Other("key_cache", mutated=True),
        Other("value_cache", mutated=True),
        Other("slot_mapping"),
        Other("k_scale", keyword=True),
        Other("v_scale", keyword=True),
    )
    head_inputs = (("key", "num_kv_heads"), ("value", "num_kv_heads"))

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
        num_kv_heads = arguments.positive_int(name, "num_kv_heads", num_kv_heads)
        head_dim = arguments.positive_int(name, "head_dim", head_dim)
        dtype = arguments.canonical_dtype(name, dtype)
        block_size = arguments.positive_int(name, "block_size", block_size)
        stored_dtype = paged.cache_dtype(name, cache_dtype, dtype)
        options = {"cache_dtype": stored_dtype} if stored_dtype is not dtype else {}
        label = arguments.describe(
            name, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=dtype, block_size=block_size, **options
        )
        return KVCacheWriteConfig(num_kv_heads, head_dim, dtype, block_size, stored_dtype, label)

    def check(
        self,
        config: KVCacheWriteConfig,
        key: Any,
        value: Any,
        key_cache: Any,
        value_cache: Any,
        slot_mapping: Any,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        label, heads, head_dim = config.label, config.num_kv_heads, config.head_dim
        paged.check_head_rows(label, "key", key, heads, head_dim, config.dtype)
        device = key.device
        paged.check_head_rows(label, "value", value, heads, head_dim, config.dtype, device)
        tokens = paged.token_count(key, heads, head_dim)
        value_tokens = paged.token_count(value, heads, head_dim)
        checks.same_size(label, "the token count", {"key": tokens, "value": value_tokens})
        for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
            paged.check_cache(label, name, cache, config.block_size, heads, head_dim, config.cache_dtype, device)
        if key_cache.shape[0] != value_cache.shape[0]:
            raise KernelInputError(
                f"{label}: key_cache has {key_cache.shape[0]} blocks and value_cache {value_cache.shape[0]}; the two "
                "caches hold the same slots"
            )
        checks.check_tensor(label, "slot_mapping", slot_mapping, shape=(tokens,), dtype=torch.int64, device=device)
        paged.check_scales(label, config.cache_dtype is paged.FP8_DTYPE, k_scale, v_scale, device)
        if paged.reads_values(slot_mapping, validate=False):
            check_slot_values(label, slot_mapping, key_cache.shape[0] * config.block_size)

    def plain_predicate(
        self, config: KVCacheWriteConfig, *, strided_rows: bool, device_type: str | None
    ) -> Callable[[tuple[Any, ...]], bool]:
        """The engine call: ``key`` and ``value`` ``[T, Hk*D]`` rows with tokens (views of a packed ``qkv`` where the
        launch takes strided rows), contiguous caches of the configuration's shape and dtype, ``slot_mapping[T]``
        int64, the scales as the cache dtype wants them, one device, nothing requiring grad in grad mode, caches
        sharing no element with key or value; on the host, slots within the cache (read there, as the checks do)."""
        return plain_write(config, strided_rows=strided_rows, device_type=device_type)

    def reference(  # type: ignore[override]
        self,
        config: KVCacheWriteConfig,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return kv_cache_write_reference(
            key,
            value,
            key_cache,
            value_cache,
            slot_mapping,
            cache_dtype=config.cache_dtype,
            k_scale=None if paged.absent(k_scale) else k_scale,
            v_scale=None if paged.absent(v_scale) else v_scale,
        )


# -- the fast path -------------------------------------------------------------------------------------------------
def plain_write(
    config: KVCacheWriteConfig, *, strided_rows: bool, device_type: str | None
) -> Callable[[tuple[Any, ...]], bool]:
    """The engine call, recognised in one frame (every frame is host time on every layer of every step): ``key``
    and ``value`` ``[T, Hk*D]`` rows with tokens (slices of a packed ``qkv`` where the launch takes strided rows),
    contiguous caches of the configuration, ``slot_mapping[T]`` int64, the scales as the cache dtype wants them, one
    device (the current one for CUDA), nothing requiring grad in grad mode, the caches writable here and their bytes
    apart from every other input's; on the host, every slot inside the cache."""
    tensor = torch.Tensor
    inference_mode = torch.is_inference_mode_enabled
    is_grad_enabled = torch.is_grad_enabled
    current_device = torch.cuda.current_device
    on_cuda = device_type == "cuda"
    other_kind = device_type if device_type not in (None, "cuda") else None
    int64, float32 = torch.int64, torch.float32
    width = config.num_kv_heads * config.head_dim
    cache_shape = (config.block_size, config.num_kv_heads, config.head_dim)
    dtype, stored_dtype = config.dtype, config.cache_dtype
    fp8 = stored_dtype is paged.FP8_DTYPE
    block_size = config.block_size

    def accepts(args: tuple[Any, ...]) -> bool:
        if len(args) != 7:
            return False
        key, value, key_cache, value_cache, slots, k_scale, v_scale = args
        if type(key) is not tensor or type(value) is not tensor or key.dtype is not dtype or value.dtype is not dtype:
            return False
        sizes = key.shape
        if len(sizes) != 2 or sizes[1] != width or value.shape != sizes or not sizes[0]:
            return False
        tokens = sizes[0]
        (key_step, key_unit), (value_step, value_unit) = key.stride(), value.stride()
        if width > 1 and (key_unit != 1 or value_unit != 1):
            return False
        dense = key.is_contiguous() and value.is_contiguous()
        if not dense and (not strided_rows or (tokens > 1 and (key_step < width or value_step < width))):
            return False
        device = key.device
        if on_cuda:
            if not key.is_cuda or key.get_device() != current_device():
                return False
        elif other_kind is not None and device.type != other_kind:
            return False
        if type(key_cache) is not tensor or type(value_cache) is not tensor:
            return False
        if key_cache.dtype is not stored_dtype or value_cache.dtype is not stored_dtype:
            return False
        cache_sizes = key_cache.shape
        if len(cache_sizes) != 4 or cache_sizes[1:] != cache_shape or value_cache.shape != cache_sizes:
            return False
        if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
            return False
        if key_cache.device != device or value_cache.device != device or value.device != device:
            return False
        if (key_cache.is_inference() or value_cache.is_inference()) and not inference_mode():
            return False  # written under torch.inference_mode() by the checked path
        if type(slots) is not tensor or slots.dtype is not int64 or slots.shape != (tokens,):
            return False
        if not slots.is_contiguous() or slots.device != device:
            return False
        for scale in (k_scale, v_scale):
            if fp8:
                if type(scale) is not tensor or scale.dtype is not float32 or scale.numel() != 1:
                    return False
                if scale.device != device:
                    return False
            elif not (scale is None or (type(scale) is tensor and scale.dtype is float32 and scale.numel() == 0)):
                return False
        if is_grad_enabled() and (
            key.requires_grad
            or value.requires_grad
            or key_cache.requires_grad
            or value_cache.requires_grad
            or (k_scale is not None and k_scale.requires_grad)
            or (v_scale is not None and v_scale.requires_grad)
        ):
            return False
        # byte ranges: the caches apart from each other and from every input (a packed qkv's slices may interleave
        # with each other, never with a cache); anything closer takes the checked path's exact test
        itemsize = key.element_size()
        ranges = [
            (key.data_ptr(), key.data_ptr() + ((tokens - 1) * key_step + width) * itemsize),
            (value.data_ptr(), value.data_ptr() + ((tokens - 1) * value_step + width) * itemsize),
            (slots.data_ptr(), slots.data_ptr() + tokens * 8),
        ]
        for cache in (key_cache, value_cache):
            start = cache.data_ptr()
            end = start + cache.nbytes
            for other_start, other_end in ranges:
                if start < other_end and other_start < end:
                    return False
            ranges.append((start, end))
        if slots.is_cpu:  # the host reads them free: a slot past the cache is refused by the checked path
            return not tokens or int(slots.max()) < cache_sizes[0] * block_size
        return True

    return accepts


spec = KVCacheWriteSpec()
