"""Rotary position embedding in TileLang, applied in place to query and key (vLLM's ``rotary_embedding``).

A thread block takes one token and every head of it. A *lane* (one thread's share of one head) rotates a run of
``pairs`` consecutive rotation pairs: in the neox style two 16-byte vectors (``x[i0 : i0+vec]`` and the partner
half ``x[half+i0 : half+i0+vec]``), in the interleaved style one 16-byte vector holding ``vec/2`` pairs. Each
thread first loads its ``LANES_PER_THREAD`` lanes' vectors and the matching cosines and sines (float4 loads of
a float32 cache row) into registers, then computes and stores them: no shared memory, no barrier, and the
loads of all its lanes are in flight together. ``query`` and ``key`` are indexed by their row stride, so the
two slices of a packed ``qkv`` buffer are rotated where they lie.

Why (issue 12): the previous program staged 8 heads at a time through shared memory, with a barrier after the
cos/sin expansion and two per step, so a block had 2 KiB in flight and waited on a chain of about seven memory
latencies per token; it reached 85% of the copy bandwidth at M = 32768 (bf16, 32 + 8 heads of 128, neox,
float32 cache). Prediction for that shape now: a token moves 2 * (32 + 8) * 128 * 2 = 20480 bytes of q/k (read
and written once) plus its 512-byte cache row (read once from DRAM, the other lanes hit L1): 688 MB at
M = 32768, 172 µs at 4.0 TB/s. 128 threads a block, ~40 registers a thread: 16 blocks (2048 threads) a SM,
each thread with 2 lanes x 2 x 16 bytes of q in flight, so 128 KiB a SM, about 3x what the bandwidth-latency
product asks (4.8 TB/s / 132 SMs x ~1 µs). A token's blocks wait on two round trips (q, then k), overlapped
by the other 15 blocks on the SM. Expected: within a few percent of the copy, like Triton's 97%.

The rotary width ``r`` (the cache's row length) is a run-time size. Lanes are laid out for ``r = head_dim``;
with a partial rotary width the lanes past ``r/2`` pairs do nothing (the tail features are left as they are).
The vectorised path needs ``r/2`` to be a multiple of ``pairs`` (the partner vector must be aligned); other
widths take a scalar path in the same kernel (correct, slower). A position outside the cache leaves its token
unrotated instead of reading out of bounds.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import vector_elements
from lazyops._backends.tilelang._runtime import F32, compiled, launch_with_copies, tl_dtype
from lazyops.specs.rope import RopeConfig, spec

THREADS = 128
#: Lanes (runs of pairs of one head) a thread loads before it computes and stores any: their loads overlap.
LANES_PER_THREAD = 2
POSITION_DTYPES = {torch.int32: "int32", torch.int64: "int64"}


def rope_program(head_dim: int, dtype: str, is_neox: bool, cache_dtype: str, positions_dtype: str) -> Any:
    """The TileLang program ``main(positions[M], query[M, Hq, head_dim], key[M, Hk, head_dim], cache[P, r])``.

    Everything but ``head_dim`` is a run-time size: the token count, the head counts, the cache's length, its
    rotary width ``r`` and the row strides of positions, query and key (each a multiple of
    :func:`rope_alignment` elements, which the launch guarantees), so one compiled kernel serves every model
    that shares a head size, packed ``qkv`` views included.
    """
    M, Hq, Hk, P, R = T.dynamic("M, Hq, Hk, P, R")
    positions_stride, query_stride, key_stride = T.dynamic("positions_stride, query_stride, key_stride")
    vec = vector_elements(head_dim, dtype)
    # Pairs one lane rotates: neox, a vector of first halves and its partner vector; interleaved, one vector.
    pairs = vec if is_neox else max(1, vec // 2)
    span = pairs if is_neox else 2 * pairs  # features of one loaded vector
    lanes_per_head = -(-(head_dim // 2) // pairs)
    lanes = LANES_PER_THREAD

    def turned_first(first: Any, second: Any, cos: Any, sin: Any) -> Any:
        return T.cast(T.cast(first, F32) * cos - T.cast(second, F32) * sin, dtype)

    def turned_second(first: Any, second: Any, cos: Any, sin: Any) -> Any:
        return T.cast(T.cast(second, F32) * cos + T.cast(first, F32) * sin, dtype)

    @T.macro
    def rotate(x: T.Tensor, heads: Any, cache: T.Tensor, token: Any, row: Any, half: Any, tx: Any, buffers: Any):
        a, b, cos, sin = buffers
        # The partner half's offset, written so that the compiler sees it is a whole number of vectors.
        partner = (half // pairs) * pairs
        vectorised = half % pairs == 0
        for step in T.serial(T.ceildiv(heads * lanes_per_head, THREADS * lanes)):
            for u in T.unroll(lanes):
                lane = (step * lanes + u) * THREADS + tx
                head = lane // lanes_per_head
                p0 = lane % lanes_per_head * pairs
                if vectorised and head < heads and p0 < half:
                    for v in T.vectorized(pairs):
                        cos[u * pairs + v] = T.cast(cache[row, p0 + v], F32)
                        sin[u * pairs + v] = T.cast(cache[row, partner + p0 + v], F32)
                    if is_neox:
                        for v in T.vectorized(span):
                            a[u * span + v] = x[token, head, p0 + v]
                        for v in T.vectorized(span):
                            b[u * span + v] = x[token, head, partner + p0 + v]
                    else:
                        for v in T.vectorized(span):
                            a[u * span + v] = x[token, head, 2 * p0 + v]
            for u in T.unroll(lanes):
                lane = (step * lanes + u) * THREADS + tx
                head = lane // lanes_per_head
                p0 = lane % lanes_per_head * pairs
                if head < heads and p0 < half:
                    if vectorised:
                        if is_neox:
                            for v in T.vectorized(span):
                                x[token, head, p0 + v] = turned_first(
                                    a[u * span + v], b[u * span + v], cos[u * pairs + v], sin[u * pairs + v]
                                )
                            for v in T.vectorized(span):
                                x[token, head, partner + p0 + v] = turned_second(
                                    a[u * span + v], b[u * span + v], cos[u * pairs + v], sin[u * pairs + v]
                                )
                        else:
                            for v in T.unroll(pairs):
                                b[u * span + 2 * v] = turned_first(
                                    a[u * span + 2 * v], a[u * span + 2 * v + 1], cos[u * pairs + v], sin[u * pairs + v]
                                )
                                b[u * span + 2 * v + 1] = turned_second(
                                    a[u * span + 2 * v], a[u * span + 2 * v + 1], cos[u * pairs + v], sin[u * pairs + v]
                                )
                            for v in T.vectorized(span):
                                x[token, head, 2 * p0 + v] = b[u * span + v]
                    else:
                        # r/2 is not a whole number of vectors: the same pairs, one element at a time.
                        for v in T.serial(pairs):
                            i = p0 + v
                            if i < half:
                                c = T.cast(cache[row, i], F32)
                                s = T.cast(cache[row, half + i], F32)
                                # The pair is read into registers before either element is written.
                                if is_neox:
                                    a[0] = x[token, head, i]
                                    b[0] = x[token, head, half + i]
                                    x[token, head, i] = turned_first(a[0], b[0], c, s)
                                    x[token, head, half + i] = turned_second(a[0], b[0], c, s)
                                else:
                                    a[0] = x[token, head, 2 * i]
                                    b[0] = x[token, head, 2 * i + 1]
                                    x[token, head, 2 * i] = turned_first(a[0], b[0], c, s)
                                    x[token, head, 2 * i + 1] = turned_second(a[0], b[0], c, s)

    @T.prim_func
    def main(
        positions: T.StridedTensor((M,), (positions_stride,), positions_dtype),
        query: T.StridedTensor((M, Hq, head_dim), (query_stride, head_dim, 1), dtype),
        key: T.StridedTensor((M, Hk, head_dim), (key_stride, head_dim, 1), dtype),
        cache: T.Tensor((P, R), cache_dtype),
    ):
        T.assume(query_stride % vec == 0)
        T.assume(key_stride % vec == 0)
        with T.Kernel(M, threads=THREADS) as token:
            tx = T.get_thread_binding()
            a = T.alloc_local((lanes * span,), dtype)
            b = T.alloc_local((lanes * span,), dtype)
            cos = T.alloc_local((lanes * pairs,), F32)
            sin = T.alloc_local((lanes * pairs,), F32)
            position = positions[token]
            half = R // 2
            if position >= 0 and position < P:
                rotate(query, Hq, cache, token, position, half, tx, (a, b, cos, sin))
                rotate(key, Hk, cache, token, position, half, tx, (a, b, cos, sin))

    return main


def rope_alignment(head_dim: int, dtype: torch.dtype) -> int:
    """The element multiple the program assumes of query's and key's row strides (every contiguous tensor's)."""
    return vector_elements(head_dim, tl_dtype(dtype))


def programs(config: RopeConfig) -> dict[tuple[torch.dtype, torch.dtype], Callable[[], Any]]:
    """The programs the factory compiles for ``config``: one per (cache dtype, positions dtype)."""
    return {
        (cache_dtype, positions_dtype): _builder(
            config.head_dim, config.dtype, config.is_neox, cache_dtype, positions_dtype
        )
        for cache_dtype in dict.fromkeys((torch.float32, config.dtype))
        for positions_dtype in POSITION_DTYPES
    }


@spec.implementation(device_type="cuda", strided_rows=True)
def rope_tl(config: RopeConfig) -> Callable[..., None]:
    # The cache may be float32 or the dtype, the positions int32 or int64: the factory compiles a kernel for each
    # combination, in parallel, so that no call has to. Positions are not range-checked on the host, which would
    # cost a device sync per call (tens of µs, and impossible inside a CUDA graph); a token whose position lies
    # outside the cache is left unrotated by the kernel, never read out of bounds.
    head_dim = config.head_dim
    kernels = compiled(config.label, programs(config))
    # query and key are taken as they lie (packed qkv views) when their row stride is a multiple of the
    # program's vector (true of every contiguous tensor and of engine layouts); otherwise, or at a misaligned
    # address, a contiguous copy is rotated and copied back.
    multiple = rope_alignment(head_dim, config.dtype)
    row_multiples = (1, multiple, multiple, 1)

    def rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
        tokens = positions.shape[0]
        # -1 cannot be inferred for a tensor of no heads
        heads = (
            query.view(tokens, query.shape[1] // head_dim, head_dim),
            key.view(tokens, key.shape[1] // head_dim, head_dim),
        )
        launch_with_copies(
            kernels[cos_sin_cache.dtype, positions.dtype],
            (positions, *heads, cos_sin_cache),
            written=(1, 2),
            row_multiples=row_multiples,
        )

    return rope


def _builder(
    head_dim: int, dtype: torch.dtype, is_neox: bool, cache_dtype: torch.dtype, positions_dtype: torch.dtype
) -> Callable[[], Any]:
    return lambda: rope_program(
        head_dim, tl_dtype(dtype), is_neox, tl_dtype(cache_dtype), POSITION_DTYPES[positions_dtype]
    )
