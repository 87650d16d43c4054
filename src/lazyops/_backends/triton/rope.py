"""Rotary position embedding applied in place to query and key, as vLLM's ``rotary_embedding``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends._grid import MAX_GRID_X, refuse_rows
from lazyops._backends.triton._common import interpreting, launch_device, next_power_of_2, warps_for
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.rope import RopeConfig, spec


@triton.jit
def _rotate_heads(
    x_ptr,
    cos,
    sin,
    pairs_valid,
    HEADS: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
):
    """Rotate the first ``2*HALF`` features of each of one token's ``HEADS`` heads, in place.

    ``cos`` and ``sin`` are ``[1, BLOCK_HALF]``; only the first ``pairs_valid`` pairs are touched (0: none).
    """
    heads = tl.arange(0, BLOCK_HEADS)[:, None]
    if IS_NEOX:  # the rotary features' first half pairs with their second half
        pairs = tl.arange(0, BLOCK_HALF)[None, :]
        keep = (heads < HEADS) & (pairs < pairs_valid)
        first = x_ptr + heads * HEAD_DIM + pairs
        x1 = tl.load(first, mask=keep, other=0.0).to(tl.float32)
        x2 = tl.load(first + HALF, mask=keep, other=0.0).to(tl.float32)
        tl.store(first, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=keep)
        tl.store(first + HALF, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=keep)
    else:  # neighbours pair up: (0, 1), (2, 3), ...
        # Loaded as one contiguous run of 2*HALF features and split into pairs in registers: two loads of every
        # other element would each be a scalar access.
        features = tl.arange(0, 2 * BLOCK_HALF)[None, :]
        keep = (heads < HEADS) & (features < 2 * pairs_valid)
        ptrs = x_ptr + heads * HEAD_DIM + features
        x = tl.load(ptrs, mask=keep, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, [BLOCK_HEADS, BLOCK_HALF, 2]))
        rotated = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin)
        tl.store(ptrs, tl.reshape(rotated, [BLOCK_HEADS, 2 * BLOCK_HALF]).to(x_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _rope_kernel(
    positions_ptr,
    query_ptr,
    key_ptr,
    cache_ptr,
    CACHE_ROWS,
    query_row_stride,
    key_row_stride,
    HEAD_DIM: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    QUERY_HEADS: tl.constexpr,
    BLOCK_QUERY_HEADS: tl.constexpr,
    KEY_HEADS: tl.constexpr,
    BLOCK_KEY_HEADS: tl.constexpr,
    IS_NEOX: tl.constexpr,
):
    # One program a token: its cache row is read once and serves every query and key head. Query and key rows lie
    # a stride apart, so the slices of a packed qkv buffer are rotated where they are.
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    # A position outside the cache would read past it; such a token is left as it is instead (checking the range
    # on the host would cost a device synchronisation on every call).
    in_cache = (position >= 0) & (position < CACHE_ROWS)
    # A count, not `mask & in_cache`: Triton's interpreter turns a tensor-and-scalar `&` into int32, not a mask.
    pairs_valid = tl.where(in_cache, HALF, 0)
    pairs = tl.arange(0, BLOCK_HALF)[None, :]
    row = cache_ptr + position * (2 * HALF)
    cos = tl.load(row + pairs, mask=pairs < pairs_valid, other=0.0).to(tl.float32)
    sin = tl.load(row + HALF + pairs, mask=pairs < pairs_valid, other=0.0).to(tl.float32)
    _rotate_heads(
        query_ptr + token * query_row_stride,
        cos,
        sin,
        pairs_valid,
        QUERY_HEADS,
        BLOCK_QUERY_HEADS,
        HEAD_DIM,
        HALF,
        BLOCK_HALF,
        IS_NEOX,
    )
    _rotate_heads(
        key_ptr + token * key_row_stride,
        cos,
        sin,
        pairs_valid,
        KEY_HEADS,
        BLOCK_KEY_HEADS,
        HEAD_DIM,
        HALF,
        BLOCK_HALF,
        IS_NEOX,
    )


@spec.implementation(device_type=launch_device(_rope_kernel), strided_rows=True)
def rope_tl(config: RopeConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    # The head counts and r are read from the arguments on each call; each new combination compiles once.
    # Positions are not range-checked on a GPU (that would synchronise every call): a token whose position is
    # outside the cache is left unrotated. In Triton's interpreter, where the check is free, it raises like the
    # torch backend.
    head_dim, is_neox, label = config.head_dim, config.is_neox, config.label
    interpret = interpreting(_rope_kernel)
    #: one launcher per (rotary half, query heads, key heads): each combination is its own compiled kernel
    launchers: dict[tuple[int, int, int], Launcher] = {}

    def launcher(half: int, query_heads: int, key_heads: int) -> Launcher:
        block_half = next_power_of_2(half)
        block_query_heads = next_power_of_2(max(query_heads, 1))
        constexprs = {
            "HEAD_DIM": head_dim,
            "HALF": half,
            "BLOCK_HALF": block_half,
            "QUERY_HEADS": query_heads,
            "BLOCK_QUERY_HEADS": block_query_heads,
            "KEY_HEADS": key_heads,
            "BLOCK_KEY_HEADS": next_power_of_2(max(key_heads, 1)),
            "IS_NEOX": is_neox,
        }
        return Launcher(_rope_kernel, constexprs, num_warps=warps_for(block_query_heads * block_half))

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        m = positions.shape[0]
        if m > MAX_GRID_X:
            refuse_rows(label, "query", m, MAX_GRID_X, "a program per token")
        cache_rows = cos_sin_cache.shape[0]
        if interpret and m and not positions.is_meta:
            # The range is read here, and spec.check_values (which says what is wrong) called only to
            # refuse: a call on every launch would be a Python frame on every step.
            low, high = positions.aminmax()
            if not 0 <= low <= high < cache_rows:
                spec.check_values(config, positions, query, key, cos_sin_cache)
        geometry = (cos_sin_cache.shape[1] // 2, query.shape[1] // head_dim, key.shape[1] // head_dim)
        launch = launchers.get(geometry)
        if launch is None:
            launch = launchers[geometry] = launcher(*geometry)
        launch((m,), positions, query, key, cos_sin_cache, cache_rows, query.stride(0), key.stride(0))
        return query, key

    return rope
