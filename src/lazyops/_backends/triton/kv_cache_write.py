"""New tokens' keys and values written into a paged KV cache, as vLLM's ``reshape_and_cache_flash``.

One program per token and block of its ``Hk * D`` features: the token's slot is read once, its key and value rows
(strided: the slices of a packed ``qkv``) are copied into the slot's ``[Hk, D]`` rows of the two caches. Offsets are
64-bit (``slot * Hk * D`` passes 2**31 in a cache of a few GiB). A padding token (negative slot) is skipped, and so
is a slot past the cache, without reading it on the host (a synchronisation on every call): a GPU kernel must never
write out of bounds, whatever the values. In Triton's interpreter, where reading is free, the spec's checks refuse
such a slot first.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device, next_power_of_2, warps_for
from lazyops._backends.triton._fp8 import to_fp8
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.kv_cache_write import KVCacheWriteConfig, spec
from lazyops.specs.paged_attention import FP8_DTYPE

#: Features of a token one program copies: a Llama-3-8B token (8 heads of 128) in one program.
MAX_BLOCK = 1024


@triton.jit
def _store_row(x_ptr, cache_ptr, scale_ptr, features, keep, FP8: tl.constexpr, EXACT_ROUNDING: tl.constexpr):
    """Copy one token's ``features`` (masked by ``keep``) from ``x_ptr`` to ``cache_ptr``, quantized for fp8."""
    x = tl.load(x_ptr + features, mask=keep, other=0.0)
    if FP8:
        # divided as the spec does (IEEE division, not a multiplication by an inverse), saturated, converted once
        scaled = tl.math.div_rn(x.to(tl.float32), tl.load(scale_ptr))
        tl.store(cache_ptr + features, to_fp8(scaled, 1.0, EXACT_ROUNDING), mask=keep)
    else:
        tl.store(cache_ptr + features, x, mask=keep)


@triton.jit
def _kv_cache_write_kernel(
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_mapping_ptr,
    k_scale_ptr,
    v_scale_ptr,
    slots,
    key_row_stride,
    value_row_stride,
    WIDTH: tl.constexpr,
    BLOCK: tl.constexpr,
    FP8: tl.constexpr,
    EXACT_ROUNDING: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)
    inside = (slot >= 0) & (slot < slots)
    # A count, not `mask & inside`: Triton's interpreter turns a tensor-and-scalar `&` into int32, not a mask.
    limit = tl.where(inside, WIDTH, 0)
    features = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    keep = features < limit
    row = tl.where(inside, slot, 0) * WIDTH  # int64: slot is
    _store_row(key_ptr + token * key_row_stride, key_cache_ptr + row, k_scale_ptr, features, keep, FP8, EXACT_ROUNDING)
    _store_row(
        value_ptr + token * value_row_stride, value_cache_ptr + row, v_scale_ptr, features, keep, FP8, EXACT_ROUNDING
    )


def build_write(config: KVCacheWriteConfig) -> Callable[..., None]:
    """The launch ``write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)``, unchecked."""
    width = config.num_kv_heads * config.head_dim
    block = min(next_power_of_2(width), MAX_BLOCK)
    fp8 = config.cache_dtype is FP8_DTYPE
    constexprs = {
        "WIDTH": width,
        "BLOCK": block,
        "FP8": fp8,
        "EXACT_ROUNDING": fp8 and interpreting(_kv_cache_write_kernel),
    }
    launch = Launcher(_kv_cache_write_kernel, constexprs, num_warps=warps_for(block))
    parts = cdiv(width, block)
    block_size = config.block_size

    def write(
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        k_scale: torch.Tensor | None,
        v_scale: torch.Tensor | None,
    ) -> None:
        # without an fp8 cache the scale pointers are never read: the slots stand in for them
        scales = (k_scale, v_scale) if fp8 else (slot_mapping, slot_mapping)
        launch(
            (key.shape[0], parts),
            key,
            value,
            key_cache,
            value_cache,
            slot_mapping,
            *scales,
            key_cache.shape[0] * block_size,
            key.stride(0),
            value.stride(0),
        )

    return write


@spec.implementation(device_type=launch_device(_kv_cache_write_kernel), strided_rows=True)
def kv_cache_write_tl(config: KVCacheWriteConfig) -> Callable[..., None]:
    return build_write(config)
