"""The KV-cache write in TileLang: each token's keys and values stored at its slot of a paged cache, as vLLM's
``reshape_and_cache_flash`` (``key_cache[num_blocks, block_size, Hk, D]``, slot ``s`` = block ``s // block_size``,
offset ``s % block_size``).

A program takes one token: it reads the token's slot once and copies its ``Hk * D`` keys and values in 16-byte
vectors, one of each a thread (up to 128 threads; more a thread for wider tokens). A
negative slot is a padding token and is skipped, as is any slot at or past the cache's end: whatever its values,
the kernel writes nothing outside the caches. Slots are int64 and the cache offset ``slot * Hk * D`` is computed
in 64 bits (a cache of over 2**31 elements is an engine's ordinary size). ``key`` and ``value`` may be strided
rows, the slices of a packed ``qkv``.

An fp8 cache stores ``x / scale`` converted with the hardware's saturation (``cvt.rn.satfinite``: beyond ±448 it
saturates, as the spec's clamp does; NaN stays NaN), the division in float32; the scales are read from memory by
every launch, so a CUDA graph replays with their current values.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import vector_elements
from lazyops._backends.tilelang._runtime import (
    F32,
    FP8,
    INDEX,
    compiled,
    direct,
    launch_with_copies,
    refuse_unsupported,
    tl_dtype,
)
from lazyops.specs.kv_cache_write import KVCacheWriteConfig, spec

#: Threads a program: a 16-byte vector of the token's keys (and one of its values) each, within a warp and 128.
MAX_THREADS = 128
MIN_THREADS = 32


def threads_for(num_kv_heads: int, head_dim: int, vector: int) -> int:
    """Threads of the program that writes one token: one a vector of its keys, from a warp up to 128."""
    return max(MIN_THREADS, min(MAX_THREADS, num_kv_heads * head_dim // vector))


def kv_cache_write_program(
    num_kv_heads: int, head_dim: int, dtype: str, *, block_size: int, cache_dtype: str | None = None
) -> Any:
    """The program ``main(key[M, Hk, D], value[M, Hk, D], key_cache[NB, block_size, Hk, D], value_cache,
    slot_mapping[M], [k_scale[1], v_scale[1]])`` (the scales for an ``FP8`` cache). ``M``, ``NB`` and key's and
    value's row strides (multiples of the 16-byte vector, :func:`row_multiple`) are run-time sizes."""
    cache_dtype = cache_dtype or dtype
    fp8 = cache_dtype == FP8
    Hk, D, BS = num_kv_heads, head_dim, block_size
    vector = vector_elements(D, dtype)
    M, NB = T.dynamic("M, NB")
    # 64-bit: TileLang narrows a stride to its declared type on the host, unchecked (a row 2**31 elements on wraps)
    key_stride, value_stride = T.dynamic("key_stride, value_stride", INDEX)

    def stored(x: Any, scale: Any) -> Any:
        if fp8:
            return T.cast(T.cast(x, F32) / scale[0], cache_dtype)
        return x

    @T.macro
    def write(
        key: T.Tensor,
        value: T.Tensor,
        key_cache: T.Tensor,
        value_cache: T.Tensor,
        slot_mapping: T.Tensor,
        k_scale: Any,
        v_scale: Any,
    ):
        with T.Kernel(M, threads=threads_for(Hk, D, vector)) as token:
            # The slot is read once and tested once, outside the copy, which then takes 16-byte vectors.
            slot = slot_mapping[token]
            if slot >= 0 and slot < T.cast(NB, "int64") * BS:
                for c in T.Parallel(Hk * D):
                    key_cache[slot // BS, slot % BS, c // D, c % D] = stored(key[token, c // D, c % D], k_scale)
                    value_cache[slot // BS, slot % BS, c // D, c % D] = stored(value[token, c // D, c % D], v_scale)

    # One annotation object a parameter: TileLang makes one buffer of each annotation.
    def rows_type(stride: Any) -> Any:
        return T.StridedTensor((M, Hk, D), (stride, D, 1), dtype)

    def cache_type() -> Any:
        return T.Tensor((NB, BS, Hk, D), cache_dtype)

    if fp8:

        @T.prim_func
        def main(
            key: rows_type(key_stride),
            value: rows_type(value_stride),
            key_cache: cache_type(),
            value_cache: cache_type(),
            slot_mapping: T.Tensor((M,), "int64"),
            k_scale: T.Tensor((1,), F32),
            v_scale: T.Tensor((1,), F32),
        ):
            T.assume(key_stride % vector == 0)
            T.assume(value_stride % vector == 0)
            write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)

    else:

        @T.prim_func
        def main(
            key: rows_type(key_stride),
            value: rows_type(value_stride),
            key_cache: cache_type(),
            value_cache: cache_type(),
            slot_mapping: T.Tensor((M,), "int64"),
        ):
            T.assume(key_stride % vector == 0)
            T.assume(value_stride % vector == 0)
            write(key, value, key_cache, value_cache, slot_mapping, None, None)

    return main


def row_multiple(config: Any) -> int:
    """The element multiple the program assumes of key's and value's row strides (every contiguous row's)."""
    return vector_elements(config.head_dim, tl_dtype(config.dtype))


def unsupported(config: Any) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does): its caches are the ones its attention reads,
    float16 and bfloat16 (and fp8 quantised from them)."""
    if config.dtype not in (torch.float16, torch.bfloat16):
        return f"its caches are float16 and bfloat16 (or fp8 from them), as its attention reads, not {config.dtype}"
    return None


def programs(config: Any) -> dict[str, Callable[[], Any]]:
    """The program the factory compiles for ``config`` (a ``KVCacheWriteConfig``); a dtype it does not serve is
    refused here, before anything compiles."""
    refuse_unsupported(spec.name, config, unsupported(config))
    dtype = tl_dtype(config.dtype)
    cache_dtype = FP8 if config.cache_dtype is torch.float8_e4m3fn else dtype
    return {
        "main": lambda: kv_cache_write_program(
            config.num_kv_heads, config.head_dim, dtype, block_size=config.block_size, cache_dtype=cache_dtype
        )
    }


def launch(config: Any, kernels: dict[str, Any]) -> Callable[..., None]:
    """The launch ``launch(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)`` of the compiled
    program: ``key`` and ``value`` as ``[T, Hk*D]`` rows or ``[T, Hk, D]``, row-strided by a multiple of
    :func:`row_multiple` elements (others, and misaligned views, go through contiguous copies); the caches written
    in place; the scales read only for an fp8 cache. Checked arguments only; ``T > 0``."""
    heads, head_dim = config.num_kv_heads, config.head_dim
    fp8 = config.cache_dtype is torch.float8_e4m3fn
    kernel = direct(kernels["main"])
    multiple = row_multiple(config)
    multiples = (multiple, multiple, 1, 1, 1, *((1, 1) if fp8 else ()))

    def kv_cache_write(
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        k_scale: torch.Tensor | None,
        v_scale: torch.Tensor | None,
    ) -> None:
        tokens = key.shape[0]
        args = (
            key.view(tokens, heads, head_dim),
            value.view(tokens, heads, head_dim),
            key_cache,
            value_cache,
            slot_mapping,
        )
        if fp8:
            args = (*args, k_scale, v_scale)  # type: ignore[assignment]
        launch_with_copies(kernel, args, (2, 3), multiples)

    return kv_cache_write


def build(config: Any) -> Callable[..., None]:
    """``kv_cache_write_tl``'s launch for ``config``: refused configurations first, then the program compiled."""
    return launch(config, compiled(config.label, programs(config)))


@spec.implementation(device_type="cuda", strided_rows=True, supports=unsupported)
def kv_cache_write_tl(config: KVCacheWriteConfig) -> Callable[..., None]:
    return build(config)
