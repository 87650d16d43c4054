"""Rotary position embedding in TileLang, applied in place to query and key (vLLM's ``rotary_embedding``)."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import next_power_of_two
from lazyops._backends.tilelang._runtime import F32, compiled, launch_in_place, tl_dtype
from lazyops.specs.rope import RopeConfig, spec

THREADS = 128
#: Bytes of features one block rotates per step (several heads of one token): a 16-byte vector per thread.
STEP_BYTES = THREADS * 16
POSITION_DTYPES = {torch.int32: "int32", torch.int64: "int64"}


def rope_program(head_dim: int, dtype: str, is_neox: bool, cache_dtype: str, positions_dtype: str) -> Any:
    """The TileLang program ``main(positions[M], query[M, Hq, head_dim], key[M, Hk, head_dim], cache[P, r])``.

    Everything but ``head_dim`` is a dynamic size: the token count, the head counts, the cache's length and its
    rotary width ``r``, so one compiled kernel serves every model that shares a head size.

    A block takes one token. It first expands the token's cache row into per-feature factors over the whole
    head, ``out[j] = x[j] * cos[j] + x[partner(j)] * sin[j]``, with the rotation's sign folded into ``sin`` and
    the identity (``cos = 1``, ``sin = 0``, ``partner(j) = j``) past ``r``. Then it rotates a few heads at a time
    through a shared-memory tile: global memory sees only whole, vectorised rows, the partner feature (at a
    distance known only at run time) is read from shared memory, and since every feature of the step is loaded
    before any is written back, rotating in place cannot race. The tile's rows are padded to a power of two
    (masked lanes), which TileLang's layout inference needs for head sizes such as 80.
    """
    M, Hq, Hk, P, R = T.dynamic("M, Hq, Hk, P, R")
    width = next_power_of_two(head_dim)
    itemsize = 4 if dtype == F32 else 2
    heads_per_step = max(1, STEP_BYTES // (width * itemsize))

    @T.macro
    def rotate(
        x: T.Tensor, heads: Any, tile: T.Buffer, out: T.Buffer, cos: T.Buffer, sin: T.Buffer, token: Any, half: Any
    ):
        for step in T.serial(T.ceildiv(heads, heads_per_step)):
            for h, j in T.Parallel(heads_per_step, width):
                head = step * heads_per_step + h
                tile[h, j] = T.if_then_else(head < heads and j < head_dim, x[token, head, j], T.cast(0, dtype))
            for h, j in T.Parallel(heads_per_step, width):
                if is_neox:
                    partner = T.if_then_else(j < half, j + half, T.if_then_else(j < 2 * half, j - half, j))
                else:
                    partner = T.if_then_else(j < 2 * half, j ^ 1, j)
                out[h, j] = T.cast(T.cast(tile[h, j], F32) * cos[j] + T.cast(tile[h, partner], F32) * sin[j], dtype)
            for h, j in T.Parallel(heads_per_step, width):
                head = step * heads_per_step + h
                if head < heads and j < head_dim:
                    x[token, head, j] = out[h, j]

    @T.prim_func
    def main(
        positions: T.Tensor((M,), positions_dtype),
        query: T.Tensor((M, Hq, head_dim), dtype),
        key: T.Tensor((M, Hk, head_dim), dtype),
        cache: T.Tensor((P, R), cache_dtype),
    ):
        with T.Kernel(M, threads=THREADS) as token:
            tile = T.alloc_shared((heads_per_step, width), dtype)
            out = T.alloc_fragment((heads_per_step, width), dtype)
            cos = T.alloc_shared((width,), F32)
            sin = T.alloc_shared((width,), F32)
            position = positions[token]
            half = R // 2
            for j in T.Parallel(width):
                # Pair index i of feature j, and whether j is the first of its pair (which takes -sin).
                if is_neox:
                    i = T.if_then_else(j < half, j, j - half)
                    first = j < half
                else:
                    i = j // 2
                    first = j % 2 == 0
                # A position outside the cache leaves its token unrotated instead of reading out of bounds.
                rotated = j < 2 * half and position >= 0 and position < P
                cos[j] = T.if_then_else(rotated, T.cast(cache[position, i], F32), T.float32(1))
                sin[j] = T.if_then_else(
                    rotated,
                    T.if_then_else(first, T.float32(-1), T.float32(1)) * T.cast(cache[position, half + i], F32),
                    T.float32(0),
                )
            rotate(query, Hq, tile, out, cos, sin, token, half)
            rotate(key, Hk, tile, out, cos, sin, token, half)

    return main


def programs(config: RopeConfig) -> dict[tuple[torch.dtype, torch.dtype], Callable[[], Any]]:
    """The programs the factory compiles for ``config``: one per (cache dtype, positions dtype)."""
    return {
        (cache_dtype, positions_dtype): _builder(
            config.head_dim, config.dtype, config.is_neox, cache_dtype, positions_dtype
        )
        for cache_dtype in dict.fromkeys((torch.float32, config.dtype))
        for positions_dtype in POSITION_DTYPES
    }


@spec.implementation(device_type="cuda")
def rope_tl(config: RopeConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    # The cache may be float32 or the dtype, the positions int32 or int64: the factory compiles a kernel for each
    # combination, in parallel, so that no call has to. Positions are not range-checked on the host, which would
    # cost a device sync per call (tens of µs, and impossible inside a CUDA graph); a token whose position lies
    # outside the cache is left unrotated by the kernel, never read out of bounds.
    head_dim = config.head_dim
    kernels = compiled(config.label, programs(config))

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = positions.shape[0]
        # -1 cannot be inferred for a tensor of no heads
        heads = (
            query.view(tokens, query.shape[1] // head_dim, head_dim),
            key.view(tokens, key.shape[1] // head_dim, head_dim),
        )
        launch_in_place(
            kernels[cos_sin_cache.dtype, positions.dtype], (positions, *heads, cos_sin_cache), written=(1, 2)
        )
        return query, key

    return rope


def _builder(
    head_dim: int, dtype: torch.dtype, is_neox: bool, cache_dtype: torch.dtype, positions_dtype: torch.dtype
) -> Callable[[], Any]:
    return lambda: rope_program(
        head_dim, tl_dtype(dtype), is_neox, tl_dtype(cache_dtype), POSITION_DTYPES[positions_dtype]
    )
