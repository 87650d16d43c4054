"""Writing new keys and values into a paged KV cache in plain PyTorch (the spec: ``lazyops.specs.kv_cache_write``).

One ``index_copy_`` per cache into its ``[num_blocks * block_size, Hk, D]`` view, from the rows as they lie (strided
slices of a packed ``qkv`` need no copy). Padding tokens (negative slots) are dropped first: that selection reads
the slots on the host, which on a GPU synchronises (this backend is the GPU's last fallback; the GPU backends skip
padding without a host read, and are what a CUDA graph captures). Having read them, it checks them on a device too.
An fp8 cache stores ``fp8(clamp(x / scale, ±448))``, divided in float32, converted once; its rows are copied as
bytes (``index_copy_`` has no float8 kernel). On the meta device (an engine tracing shapes) it writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.kv_cache_write import KVCacheWriteConfig, spec
from lazyops.specs.paged_attention import FP8_DTYPE, FP8_MAX


@spec.implementation(strided_rows=True)
def kv_cache_write_tl(config: KVCacheWriteConfig) -> Callable[..., None]:
    heads, head_dim = config.num_kv_heads, config.head_dim
    fp8 = config.cache_dtype is FP8_DTYPE

    def write(
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        k_scale: torch.Tensor | None,
        v_scale: torch.Tensor | None,
    ) -> None:
        if slot_mapping.is_meta:  # shapes only (an engine tracing on the meta device): nothing to write
            return
        if not slot_mapping.is_cpu:  # on the host the spec's checks have read them
            spec.check_values(config, key, value, key_cache, value_cache, slot_mapping)
        keep = slot_mapping >= 0
        slots = slot_mapping
        if not bool(keep.all()):
            kept = keep.nonzero().squeeze(1)
            slots, key, value = slot_mapping[kept], key[kept], value[kept]
        for rows, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
            heads_of = rows.view(rows.shape[0], heads, head_dim)
            if fp8 and scale is not None:
                quantized = (heads_of.float() / scale.reshape(())).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
                cache.view(torch.uint8).view(-1, heads, head_dim).index_copy_(0, slots, quantized.view(torch.uint8))
            else:
                cache.view(-1, heads, head_dim).index_copy_(0, slots, heads_of)

    return write
