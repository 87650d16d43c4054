"""Rotary position embedding in TileLang, applied in place to query and key (vLLM's ``rotary_embedding``).

A thread block takes one token and every head of it, query and key heads as one range (``head < Hq``: query,
else key). A *lane* (one thread's share of one head) rotates a run of ``pairs`` consecutive rotation pairs: in
the neox style two 16-byte vectors (``x[p0 : p0+vec]`` and the partner half ``x[r/2+p0 : r/2+p0+vec]``), in the
interleaved style one 16-byte vector holding ``vec/2`` pairs. A thread keeps one pair offset ``p0`` for the whole
token, so it loads its cosines and sines once, as whole vectors. It first issues the loads of all its lanes
(``passes`` heads, ``BYTES_IN_FLIGHT`` bytes), then reads the position, loads its piece of the cache row, and
computes and stores: no shared memory, no barrier, and the query/key loads overlap the position -> cache-row
chain. ``query`` and ``key`` are indexed by their row stride, so the two slices of a packed ``qkv`` buffer are
rotated where they lie.

Why (issue 12, docs/decisions/007-tilelang-rope-and-fp8-programs.md): the previous program (79.5 % of the copy
at M = 32768) compiled to 121 registers a thread, so 4 blocks an SM; its cos/sin loop was lowered as 16 scalar
loads per lane (TileLang could not prove the cache row 16-byte aligned), reloaded for every lane; and the key heads
waited for the query heads' stores: three memory round trips a token with at most 8 KB in flight per block. This one: 79
registers (``MIN_BLOCKS_PER_SM`` = 6 asks nvcc for them), the cache row in 16-byte vectors loaded once, the
whole token (10 KB for 32 + 8 heads of 128 in bf16) in flight at once, two round trips a token.

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

from lazyops._backends._grid import MAX_GRID_X, refuse_rows
from lazyops._backends.tilelang._rows import ITEMSIZE, vector_elements
from lazyops._backends.tilelang._runtime import (
    ALIGNMENT,
    F32,
    INDEX,
    compiled,
    direct,
    launch_with_copies,
    tl_dtype,
)
from lazyops.specs.rope import RopeConfig, spec

THREADS = 128
#: Bytes of query and key a thread loads before it computes and stores any: 96 covers a whole token of 32 + 8
#: heads of 128 bf16 features (2.5 passes of 16 heads, rounded up to 3), so its loads are one round trip
#: (docs/decisions/007-tilelang-rope-and-fp8-programs.md).
BYTES_IN_FLIGHT = 96
#: Blocks an SM the compiler must leave registers for (``__launch_bounds__``): 6 x 128 threads gives a thread
#: 80 registers, which the bf16 program fits without spilling (79); 8 would spill 20 bytes a thread
#: (docs/decisions/007-tilelang-rope-and-fp8-programs.md).
MIN_BLOCKS_PER_SM = 6
POSITION_DTYPES = {torch.int32: "int32", torch.int64: "int64"}


def rope_program(
    head_dim: int,
    dtype: str,
    is_neox: bool,
    cache_dtype: str,
    positions_dtype: str,
    min_blocks_per_sm: int = MIN_BLOCKS_PER_SM,
) -> Any:
    """The TileLang program ``main(positions[M], query[M, Hq, head_dim], key[M, Hk, head_dim], cache[P, r])``.

    Everything but ``head_dim`` is a run-time size: the token count, the head counts, the cache's length, its
    rotary width ``r`` and the row strides of positions, query and key (each a multiple of
    :func:`rope_alignment` elements, which the launch guarantees), so one compiled kernel serves every model
    that shares a head size, packed ``qkv`` views included.
    """
    # The token count and the cache's length in 64 bits, as the row strides (see INDEX); the head counts and the
    # rotary width are bounded by a row's width.
    M, P = T.dynamic("M, P", INDEX)
    Hq, Hk, R = T.dynamic("Hq, Hk, R")
    positions_stride, query_stride, key_stride = T.dynamic("positions_stride, query_stride, key_stride", INDEX)
    vec = vector_elements(head_dim, dtype)
    # Pairs one lane rotates: neox, a vector of first halves and its partner vector; interleaved, one vector.
    pairs = vec if is_neox else max(1, vec // 2)
    span = pairs if is_neox else 2 * pairs  # features of one loaded vector
    lanes_per_head = -(-(head_dim // 2) // pairs)
    heads_per_pass = max(1, THREADS // lanes_per_head)
    # A head wider than the block's lanes (over 2048 bf16 features in the neox style) is rotated in chunks.
    chunks = -(-lanes_per_head // THREADS)
    passes = max(1, BYTES_IN_FLIGHT // ((2 if is_neox else 1) * span * ITEMSIZE[dtype]))

    def turned_first(first: Any, second: Any, cos: Any, sin: Any) -> Any:
        return T.cast(T.cast(first, F32) * cos - T.cast(second, F32) * sin, dtype)

    def turned_second(first: Any, second: Any, cos: Any, sin: Any) -> Any:
        return T.cast(T.cast(second, F32) * cos + T.cast(first, F32) * sin, dtype)

    @T.macro
    def load(x: T.Tensor, token: Any, head: Any, first: Any, second: Any, a: Any, b: Any, u: Any):
        for v in T.vectorized(span):
            a[u, v] = x[token, head, first + v]
        if is_neox:
            for v in T.vectorized(span):
                b[u, v] = x[token, head, second + v]

    @T.macro
    def store(x: T.Tensor, token: Any, head: Any, first: Any, second: Any, a: Any, b: Any, cos: Any, sin: Any, u: Any):
        if is_neox:
            for v in T.vectorized(span):
                x[token, head, first + v] = turned_first(a[u, v], b[u, v], cos[v], sin[v])
            for v in T.vectorized(span):
                x[token, head, second + v] = turned_second(a[u, v], b[u, v], cos[v], sin[v])
        else:
            for v in T.unroll(pairs):
                b[u, 2 * v] = turned_first(a[u, 2 * v], a[u, 2 * v + 1], cos[v], sin[v])
                b[u, 2 * v + 1] = turned_second(a[u, 2 * v], a[u, 2 * v + 1], cos[v], sin[v])
            for v in T.vectorized(span):
                x[token, head, first + v] = b[u, v]

    @T.macro
    def rotate_scalar(x: T.Tensor, token: Any, head: Any, cache: T.Tensor, position: Any, p0: Any, half: Any, a: Any):
        # r/2 is not a whole number of vectors: the lane's pairs one element at a time.
        for v in T.serial(pairs):
            i = p0 + v
            if i < half:
                c = T.cast(cache[position, i], F32)
                s = T.cast(cache[position, half + i], F32)
                first = i if is_neox else 2 * i
                second = half + i if is_neox else 2 * i + 1
                # The pair is read into registers before either element is written.
                a[0, 0] = x[token, head, first]
                a[0, 1] = x[token, head, second]
                x[token, head, first] = turned_first(a[0, 0], a[0, 1], c, s)
                x[token, head, second] = turned_second(a[0, 0], a[0, 1], c, s)

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
            T.annotate_min_blocks_per_sm(min_blocks_per_sm)
            tx = T.get_thread_binding()
            a = T.alloc_local((passes, max(span, 2)), dtype)
            b = T.alloc_local((passes, span), dtype)
            cos = T.alloc_local((pairs,), F32)
            sin = T.alloc_local((pairs,), F32)
            position = positions[token]
            slot = tx // lanes_per_head
            half = R // 2
            for chunk in T.serial(chunks):
                p0 = (tx % lanes_per_head + chunk * THREADS) * pairs
                active = slot < heads_per_pass and p0 < half
                # Written as a condition on R itself, so that inside it TileLang knows every cache row, and the
                # partner half, start on a whole vector.
                if R % (2 * pairs) == 0:
                    first = p0 if is_neox else 2 * p0
                    second = half + p0
                    for batch in T.serial(T.ceildiv(Hq + Hk, heads_per_pass * passes)):
                        for u in T.unroll(passes):
                            head = (batch * passes + u) * heads_per_pass + slot
                            if active and head < Hq:
                                load(query, token, head, first, second, a, b, u)
                            elif active and head < Hq + Hk:
                                load(key, token, head - Hq, first, second, a, b, u)
                        if active and position >= 0 and position < P:
                            for v in T.vectorized(pairs):
                                cos[v] = T.cast(cache[position, p0 + v], F32)
                            for v in T.vectorized(pairs):
                                sin[v] = T.cast(cache[position, second + v], F32)
                            for u in T.unroll(passes):
                                head = (batch * passes + u) * heads_per_pass + slot
                                if head < Hq:
                                    store(query, token, head, first, second, a, b, cos, sin, u)
                                elif head < Hq + Hk:
                                    store(key, token, head - Hq, first, second, a, b, cos, sin, u)
                elif active and position >= 0 and position < P:
                    for step in T.serial(T.ceildiv(Hq + Hk, heads_per_pass)):
                        head = step * heads_per_pass + slot
                        if head < Hq:
                            rotate_scalar(query, token, head, cache, position, p0, half, a)
                        elif head < Hq + Hk:
                            rotate_scalar(key, token, head - Hq, cache, position, p0, half, a)

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
    return rope_launch(config, compiled(config.label, programs(config)))


def rope_launch(config: RopeConfig, kernels: dict[tuple[torch.dtype, torch.dtype], Any]) -> Callable[..., None]:
    """The launch of compiled rope programs, ``kernels`` keyed by (cache dtype, positions dtype) as
    :func:`programs` is."""
    head_dim = config.head_dim
    kernels = {key: direct(kernel) for key, kernel in kernels.items()}
    # query and key are taken as they lie (packed qkv views) when their row stride is a multiple of the
    # program's vector (true of every contiguous tensor and of engine layouts); otherwise, or at a misaligned
    # address, a contiguous copy is rotated and copied back.
    multiple = rope_alignment(head_dim, config.dtype)
    row_multiples = (1, multiple, multiple, 1)

    def rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
        tokens = positions.shape[0]
        if tokens > MAX_GRID_X:
            refuse_rows(config.label, "query", tokens, MAX_GRID_X, "a thread block per token")
        # -1 cannot be inferred for a tensor of no heads
        heads = (
            query.view(tokens, query.shape[1] // head_dim, head_dim),
            key.view(tokens, key.shape[1] // head_dim, head_dim),
        )
        kernel = kernels[cos_sin_cache.dtype, positions.dtype]
        if (positions.data_ptr() | query.data_ptr() | key.data_ptr() | cos_sin_cache.data_ptr()) % ALIGNMENT or (
            query.stride(0) % multiple or key.stride(0) % multiple
        ):
            launch_with_copies(kernel, (positions, *heads, cos_sin_cache), written=(1, 2), row_multiples=row_multiples)
        else:
            kernel(positions, *heads, cos_sin_cache)

    return rope


def _builder(
    head_dim: int, dtype: torch.dtype, is_neox: bool, cache_dtype: torch.dtype, positions_dtype: torch.dtype
) -> Callable[[], Any]:
    return lambda: rope_program(
        head_dim, tl_dtype(dtype), is_neox, tl_dtype(cache_dtype), POSITION_DTYPES[positions_dtype]
    )
