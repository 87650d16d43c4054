"""Causal attention over a paged KV cache in TileLang: one kernel for prefill, chunked prefill and decode
(vLLM's ``unified_attention``), with a split-KV form for decode and an exact merge.

A program owns one tile of *rows*: ``tokens`` consecutive query tokens of one sequence times ``heads`` query heads
of one kv head's group (:class:`Packing`), so grouped-query heads share every key and value the program loads, and
a decode step (one token a sequence) still fills a tensor-core tile's rows with its group's heads. The grid is
``(M // tokens + B, Hk * chunks[, splits])``: sequence ``b``'s row blocks start at ``cu_seqlens_q[b] // tokens + b``
(at most one block a sequence is partly or wholly empty), so a program finds its sequence by a binary search over
``cu_seqlens_q`` and does nothing when its block is past the sequence's queries. The grid depends on the shapes
(``M``, ``B``) and the factory's arguments only, never on index values: a CUDA graph captured once replays with any
``seq_lens``, ``block_table`` and ``cu_seqlens_q``.

Each program walks the key tiles its rows can see (causal: up to its last query's position; with a sliding window,
from its first query's window start), ``block_n`` keys a step, with the flash-attention online softmax in float32
fragments. On Hopper both products are ``wgmma``: the scores from Q and K in shared memory, ``P @ V`` with P in
registers. Keys and values are gathered through the block table a key row at a time, 16-byte ``cp.async`` copies
(several physical blocks a tile when ``block_size < block_n``), double-buffered by ``T.Pipelined``: the next tile's
keys and values are in flight while the current one is computed. An fp8 cache is staged in shared memory as loaded
and converted there to the query's dtype (exact: every e4m3 value is a bf16 and an fp16 value); ``k_scale`` folds
into the softmax scale and ``v_scale`` into the final division, both read from memory by every launch.

Decode at small batch gives too few programs to fill the GPU, so its keys are split (flash-decoding): program
``split`` of ``splits`` takes an equal share of its rows' key tiles and writes its normalised float32 output and its
base-2 log-sum-exp to workspaces ``[splits, M, Hq, D]`` and ``[splits, M, Hq]`` (a share with no tile writes only its
log-sum-exp, ``-inf``); :func:`merge_program` combines the shares exactly (weights ``2**(lse_s - max)``), reading
only those that saw keys. ``splits`` follows from the shapes, the SM count and ``max_seq_len`` (:func:`plan_launch`),
so it cannot follow the actual lengths: a short sequence leaves most shares empty, and they cost a program start
and a few bytes each.

A factory compiles four programs (prefill tile, decode tile, its split form, the merge; :func:`programs`), each
specialised on the group size, the head size, the dtypes, the block size and whether a window and a soft-cap
apply. The scale, the window and soft-cap values and the kv head count are run-time arguments, so configurations
that differ only there share the compiled programs (TileLang caches by program text).

Out-of-range index values never make a program read or write out of bounds: a key whose block id lies outside
``[0, num_blocks)``, past the table's row or at or past ``seq_len`` is absent. Its gather reads block
``num_blocks``, past the cache, which TileLang's bounds legalisation turns into a zero-filling ``cp.async`` that
reads nothing (so no garbage, NaN included, reaches ``P @ V``), and its score is masked. Query rows outside
``[0, M)`` are neither read nor written; a row that sees no key writes zeros.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tilelang.language as T
import torch

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
from lazyops.specs.paged_attention import PagedAttentionConfig, spec

LOG2E = math.log2(math.e)
#: Head sizes with tiles planned for them.
HEAD_DIMS = (64, 128, 256)
#: The float32 row maximum a score tile starts from, far below any real logit (in log2 units): a row that has seen
#: only masked keys keeps a finite maximum, so its rescale ``exp2(m_before - m)`` is 1, not ``exp2(-inf + inf)``.
ROW_MAX_START = -1e30
#: The multiple (in elements) the programs assume of query's and out's row strides: 16-byte rows of 16-bit values.
ROW_MULTIPLE = 8
#: Key tiles in shared memory. Two: TileLang 0.1.15 cannot emit the drain of a deeper ``cp.async`` pipeline whose
#: trip count is dynamic (its ``cp.async.wait_group`` counts stay expressions of the loop variable).
STAGES = 2
#: The split count aims at this many programs an SM (two resident at once, two waves) before splitting stops.
PROGRAMS_PER_SM = 4
#: A split covers at least this many key tiles of a ``max_seq_len`` sequence: shorter shares would cost more in
#: workspace traffic and merging than they add in parallelism.
MIN_TILES_PER_SPLIT = 4
MAX_SPLITS = 128
#: The merge program: groups of threads that fold the shares in parallel, and shares a group loads back to back.
MERGE_GROUPS = 4
MERGE_UNROLL = 4


@dataclass(frozen=True)
class Tile:
    """The work of one program step: a ``block_m`` x ``block_n`` score tile against keys double-buffered in shared
    memory."""

    block_m: int  #: score rows: query tokens x heads of one group; 64 a warpgroup (wgmma's M)
    block_n: int  #: keys a step
    threads: int  #: 128 a warpgroup

    def shared_bytes(self, head_dim: int, itemsize: int, cache_itemsize: int) -> int:
        """Q, the stages of keys and values, and for an fp8 cache the converted tile the products read."""
        tile = self.block_n * head_dim
        staged = 2 * tile * cache_itemsize * STAGES
        converted = 2 * tile * itemsize if cache_itemsize != itemsize else 0
        return self.block_m * head_dim * itemsize + staged + converted


#: Prefill and chunked prefill: two warpgroups of 64 rows each (FA3's 128-row tiles); 64 keys a step for D >= 128,
#: so the float32 output (128 x D over 256 threads, 64 or 128 registers a thread) and the scores fit in registers;
#: 128 keys a step for D = 64.
PREFILL_TILES = {64: Tile(128, 128, 256), 128: Tile(128, 64, 256), 256: Tile(128, 64, 256)}
#: Decode: one warpgroup of 64 rows, the smallest wgmma tile, so a decode step's heads waste least of it; 16 KiB of
#: keys and as much of values a step whatever D (bf16), at most 96 KiB of shared memory a program, so that two
#: programs share an SM.
DECODE_TILES = {64: Tile(64, 128, 128), 128: Tile(64, 64, 128), 256: Tile(64, 32, 128)}


@dataclass(frozen=True)
class Packing:
    """How a score tile's rows map to (token, head): row ``r`` is token ``r // heads`` of the program's row block
    and head ``chunk * heads + r % heads`` of its kv head's group."""

    heads: int  #: query heads of the group one program covers
    chunks: int  #: programs a group's heads are spread over (more than one when the group outgrows a tile)
    tokens: int  #: query tokens one program covers

    @classmethod
    def of(cls, group: int, block_m: int) -> "Packing":
        heads = min(group, block_m)
        return cls(heads, -(-group // heads), block_m // heads)


def row_blocks(tokens: Any, batch: Any, block_tokens: int) -> Any:
    """The grid's first axis: ``M // block_tokens + B`` row blocks cover every sequence's queries whatever their
    lengths (:func:`first_row_block` gives a sequence's first; a sequence's blocks end before the next one's start,
    the last ones before this bound). Plain ints or TileLang expressions alike."""
    return tokens // block_tokens + batch


def first_row_block(q_start: Any, b: Any, block_tokens: int) -> Any:
    """Sequence ``b``'s first row block, its queries starting at row ``q_start``: increasing in ``b``, so a
    program finds its sequence by a binary search."""
    return q_start // block_tokens + b


def split_share(tiles: Any, splits: Any) -> Any:
    """Key tiles each of ``splits`` programs takes of a row block's ``tiles``: split ``i`` takes tiles
    ``[i * share, min((i + 1) * share, tiles))``, the last ones possibly none."""
    return (tiles + splits - 1) // splits


def paged_attention_program(
    group: int,
    head_dim: int,
    dtype: str,
    *,
    block_size: int,
    windowed: bool = False,
    capped: bool = False,
    cache_dtype: str | None = None,
    tile: Tile | None = None,
    split: bool = False,
) -> Any:
    """The program ``main(query[M, Hq, D], key_cache[NB, block_size, Hk, D], value_cache, block_table[B, MB],
    seq_lens[B], cu_seqlens_q[B + 1], [k_scale[1], v_scale[1],] out[M, Hq, D], scale, softcap, window)`` for
    ``Hq = Hk * group`` query heads; with ``split``, float32 ``partial_out[S, M, Hq, D]`` and ``partial_lse[S, M,
    Hq]`` in place of ``out``.

    ``dtype`` and ``cache_dtype`` are TileLang dtype names; the scales are parameters when the cache is ``FP8``.
    Compiled in: the group, the head size, the dtypes, the block size, whether a window (``windowed``) and a
    soft-cap (``capped``) apply, the tile. Everything else is a run-time value, so that configurations differing
    only there share one compiled program (TileLang's cache is keyed by the program's text): the softmax
    ``scale``, the ``softcap`` and ``window`` values (read only where ``capped`` and ``windowed``), the kv heads
    ``Hk``, and the sizes: tokens ``M``, batch ``B``, the cache's blocks ``NB``, the table's width ``MB`` and row
    stride, query's and out's row strides (multiples of :data:`ROW_MULTIPLE`), the split count ``S``.
    """
    cache_dtype = cache_dtype or dtype
    fp8 = cache_dtype == FP8
    tile = tile or DECODE_TILES[head_dim]
    pack = Packing.of(group, tile.block_m)
    BM, BN, D, BS, HP, BQ = tile.block_m, tile.block_n, head_dim, block_size, pack.heads, pack.tokens
    M, B, NB, MB, S, Hk = T.dynamic("M, B, NB, MB, S, Hk")
    # 64-bit: TileLang narrows a stride to its declared type on the host, unchecked (a row 2**31 elements on wraps)
    q_stride, o_stride = T.dynamic("q_stride, o_stride", INDEX)
    table_stride = T.dynamic("table_stride")
    if fp8:
        # TileLang's planner would give the fp8 conversions a stage of their own (a three-stage pipeline, see
        # STAGES); stated explicitly: the gather (statement 0) one tile ahead, the other 14 statements of the
        # loop body (the two conversions among them) on the current tile.
        statements = 15
        schedule: dict[str, Any] = {"order": list(range(statements)), "stage": [0] + [1] * (statements - 1)}
    else:
        schedule = {"num_stages": STAGES}

    @T.macro
    def attend(
        query: T.Tensor,
        key_cache: T.Tensor,
        value_cache: T.Tensor,
        block_table: T.Tensor,
        seq_lens: T.Tensor,
        cu_seqlens_q: T.Tensor,
        k_scale: Any,
        v_scale: Any,
        out: Any,
        partial_out: Any,
        partial_lse: Any,
        scale: Any,
        softcap: Any,
        window: Any,
    ):
        with T.Kernel(row_blocks(M, B, BQ), Hk * pack.chunks, S if split else 1, threads=tile.threads) as (
            q_block,
            group_chunk,
            split_index,
        ):
            Q_shared = T.alloc_shared((BM, D), dtype)
            K_shared = T.alloc_shared((BN, D), dtype)
            V_shared = T.alloc_shared((BN, D), dtype)
            O_shared = T.alloc_shared((BM, D), F32 if split else dtype)
            scores = T.alloc_fragment((BM, BN), F32)
            probabilities = T.alloc_fragment((BM, BN), dtype)
            acc_o = T.alloc_fragment((BM, D), F32)
            row_max = T.alloc_fragment((BM,), F32)
            row_max_before = T.alloc_fragment((BM,), F32)
            rescale = T.alloc_fragment((BM,), F32)
            row_sum = T.alloc_fragment((BM,), F32)
            tile_sum = T.alloc_fragment((BM,), F32)
            low = T.alloc_var("int32", init=0)
            high = T.alloc_var("int32", init=B - 1)

            kv_head = group_chunk // pack.chunks
            first_head = kv_head * group + (group_chunk % pack.chunks) * HP
            group_end = (kv_head + 1) * group  # a group spread over chunks leaves its last chunk's tail rows empty
            # The sequence: the last b whose first row block (cu_seqlens_q[b] // BQ + b) is at or before this one.
            while low < high:
                middle = (low + high + 1) // 2
                if first_row_block(cu_seqlens_q[middle], middle, BQ) <= q_block:
                    low = middle
                else:
                    high = middle - 1
            b = low
            q_start = cu_seqlens_q[b]
            q_end = T.min(cu_seqlens_q[b + 1], M)
            t0 = (q_block - first_row_block(q_start, b, BQ)) * BQ
            # This program's query tokens (0: nothing to do; t0 < 0 only when cu_seqlens_q[0] > 0, invalid).
            rows = T.alloc_var("int32", init=T.if_then_else(t0 >= 0, T.max(T.min(q_end - q_start - t0, BQ), 0), 0))
            seq_len = seq_lens[b]
            kv_len = T.min(seq_len, MB * BS)  # a length past the table's row reads no further than the row
            first_position = seq_len - (q_end - q_start) + t0  # the queries are the sequence's last tokens
            keys_end = T.if_then_else(rows > 0, T.min(first_position + rows, kv_len), 0)
            keys_start = T.max(first_position - window + 1, 0) if windowed else 0
            # The program's key tiles, held in variables: as expressions they would be inlined into every index
            # and mask below, and TileLang's simplifier takes minutes over the split form's nested min/max.
            first_tile = T.alloc_var("int32", init=keys_start // BN)
            tiles = T.alloc_var("int32", init=T.max(T.ceildiv(keys_end, BN) - keys_start // BN, 0))
            if split:
                share = split_share(tiles, S)
                first_tile = first_tile + split_index * share
                tiles = T.max(T.min(tiles - split_index * share, share), 0)
            # What a raw q . k is multiplied by: into the softmax's base-2 exponent, or into tanh's argument
            # (``softcap * tanh(scale * q.k / softcap)``, then times log2(e)); k_scale dequantises the keys.
            k_factor = k_scale[0] if fp8 else 1.0
            score_factor = T.alloc_var(F32, init=k_factor * scale / softcap if capped else k_factor * scale * LOG2E)

            for i, d in T.Parallel(BM, D):
                token = q_start + t0 + i // HP
                head = first_head + i % HP
                Q_shared[i, d] = T.if_then_else(
                    i // HP < rows and token >= 0 and head < group_end, query[token, head, d], T.cast(0, dtype)
                )
            T.fill(acc_o, 0)
            T.fill(row_sum, 0)
            T.fill(row_max, ROW_MAX_START)

            if fp8:
                K_staged = T.alloc_shared((BN, D), cache_dtype)
                V_staged = T.alloc_shared((BN, D), cache_dtype)
            for step in T.Pipelined(tiles, **schedule):
                key0 = (first_tile + step) * BN
                # Keys and values in one gather: one cp.async group a stage. An absent key reads block NB, past
                # the cache, which the bounds legalisation zero-fills without reading.
                for j, d in T.Parallel(BN, D):
                    position = key0 + j
                    block = T.if_then_else(position < kv_len, block_table[b, position // BS], NB)
                    if fp8:
                        K_staged[j, d] = key_cache[block, position % BS, kv_head, d]
                        V_staged[j, d] = value_cache[block, position % BS, kv_head, d]
                    else:
                        K_shared[j, d] = key_cache[block, position % BS, kv_head, d]
                        V_shared[j, d] = value_cache[block, position % BS, kv_head, d]
                if fp8:
                    for j, d in T.Parallel(BN, D):
                        K_shared[j, d] = T.cast(T.cast(K_staged[j, d], F32), dtype)
                T.clear(scores)
                T.gemm(Q_shared, K_shared, scores, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(BM, BN):
                    position = key0 + j
                    row_position = first_position + i // HP
                    block = T.if_then_else(position < kv_len, block_table[b, position // BS], -1)
                    visible = i // HP < rows and position <= row_position and block >= 0 and block < NB
                    if windowed:
                        visible = visible and position > row_position - window
                    logit = scores[i, j] * score_factor
                    if capped:
                        logit = T.tanh(logit) * (softcap * LOG2E)
                    scores[i, j] = T.if_then_else(visible, logit, -T.infinity(F32))
                T.copy(row_max, row_max_before)
                T.reduce_max(scores, row_max, dim=1, clear=False)
                for i in T.Parallel(BM):
                    rescale[i] = T.exp2(row_max_before[i] - row_max[i])
                for i, j in T.Parallel(BM, BN):
                    scores[i, j] = T.exp2(scores[i, j] - row_max[i])
                T.reduce_sum(scores, tile_sum, dim=1)
                for i in T.Parallel(BM):
                    row_sum[i] = row_sum[i] * rescale[i] + tile_sum[i]
                T.copy(scores, probabilities)
                for i, d in T.Parallel(BM, D):
                    acc_o[i, d] *= rescale[i]
                if fp8:
                    for j, d in T.Parallel(BN, D):
                        V_shared[j, d] = T.cast(T.cast(V_staged[j, d], F32), dtype)
                T.gemm(probabilities, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            v_factor = v_scale[0] if fp8 else 1.0
            for i, d in T.Parallel(BM, D):
                O_shared[i, d] = T.if_then_else(row_sum[i] > 0, acc_o[i, d] * (v_factor / row_sum[i]), 0)
            if split:
                for i in T.Parallel(BM):
                    token = q_start + t0 + i // HP
                    head = first_head + i % HP
                    if i // HP < rows and token >= 0 and head < group_end:
                        partial_lse[split_index, token, head] = T.if_then_else(
                            row_sum[i] > 0, row_max[i] + T.log2(row_sum[i]), -T.infinity(F32)
                        )
            # A split with no key tile leaves its output unwritten: its lse of -inf tells the merge not to read it.
            if split:
                rows = T.if_then_else(tiles > 0, rows, 0)
            for i, d in T.Parallel(BM, D):
                token = q_start + t0 + i // HP
                head = first_head + i % HP
                if i // HP < rows and token >= 0 and head < group_end:
                    if split:
                        partial_out[split_index, token, head, d] = O_shared[i, d]
                    else:
                        out[token, head, d] = O_shared[i, d]

    # One annotation object a parameter: TileLang makes one buffer of each, so two parameters sharing an
    # annotation would be one buffer (the value cache read as the key cache).
    def cache_type() -> Any:
        return T.Tensor((NB, BS, Hk, D), cache_dtype)

    query_type = T.StridedTensor((M, Hk * group, D), (q_stride, D, 1), dtype)
    table_type = T.StridedTensor((B, MB), (table_stride, 1), "int32")
    out_type = T.StridedTensor((M, Hk * group, D), (o_stride, D, 1), dtype)
    partial_out_type = T.Tensor((S, M, Hk * group, D), F32)
    partial_lse_type = T.Tensor((S, M, Hk * group), F32)

    if fp8 and split:

        @T.prim_func
        def main(
            query: query_type,
            key_cache: cache_type(),
            value_cache: cache_type(),
            block_table: table_type,
            seq_lens: T.Tensor((B,), "int32"),
            cu_seqlens_q: T.Tensor((B + 1,), "int32"),
            k_scale: T.Tensor((1,), F32),
            v_scale: T.Tensor((1,), F32),
            partial_out: partial_out_type,
            partial_lse: partial_lse_type,
            scale: T.float32,
            softcap: T.float32,
            window: T.int32,
        ):
            T.assume(q_stride % ROW_MULTIPLE == 0)
            attend(
                query,
                key_cache,
                value_cache,
                block_table,
                seq_lens,
                cu_seqlens_q,
                k_scale,
                v_scale,
                None,
                partial_out,
                partial_lse,
                scale,
                softcap,
                window,
            )

    elif fp8:

        @T.prim_func
        def main(
            query: query_type,
            key_cache: cache_type(),
            value_cache: cache_type(),
            block_table: table_type,
            seq_lens: T.Tensor((B,), "int32"),
            cu_seqlens_q: T.Tensor((B + 1,), "int32"),
            k_scale: T.Tensor((1,), F32),
            v_scale: T.Tensor((1,), F32),
            out: out_type,
            scale: T.float32,
            softcap: T.float32,
            window: T.int32,
        ):
            T.assume(q_stride % ROW_MULTIPLE == 0)
            T.assume(o_stride % ROW_MULTIPLE == 0)
            attend(
                query,
                key_cache,
                value_cache,
                block_table,
                seq_lens,
                cu_seqlens_q,
                k_scale,
                v_scale,
                out,
                None,
                None,
                scale,
                softcap,
                window,
            )

    elif split:

        @T.prim_func
        def main(
            query: query_type,
            key_cache: cache_type(),
            value_cache: cache_type(),
            block_table: table_type,
            seq_lens: T.Tensor((B,), "int32"),
            cu_seqlens_q: T.Tensor((B + 1,), "int32"),
            partial_out: partial_out_type,
            partial_lse: partial_lse_type,
            scale: T.float32,
            softcap: T.float32,
            window: T.int32,
        ):
            T.assume(q_stride % ROW_MULTIPLE == 0)
            attend(
                query,
                key_cache,
                value_cache,
                block_table,
                seq_lens,
                cu_seqlens_q,
                None,
                None,
                None,
                partial_out,
                partial_lse,
                scale,
                softcap,
                window,
            )

    else:

        @T.prim_func
        def main(
            query: query_type,
            key_cache: cache_type(),
            value_cache: cache_type(),
            block_table: table_type,
            seq_lens: T.Tensor((B,), "int32"),
            cu_seqlens_q: T.Tensor((B + 1,), "int32"),
            out: out_type,
            scale: T.float32,
            softcap: T.float32,
            window: T.int32,
        ):
            T.assume(q_stride % ROW_MULTIPLE == 0)
            T.assume(o_stride % ROW_MULTIPLE == 0)
            attend(
                query,
                key_cache,
                value_cache,
                block_table,
                seq_lens,
                cu_seqlens_q,
                None,
                None,
                out,
                None,
                None,
                scale,
                softcap,
                window,
            )

    return main


def merge_program(head_dim: int, dtype: str) -> Any:
    """The program ``main(partial_out[S, M, H, D], partial_lse[S, M, H], out[M, H, D])``: each (token, head)'s
    output from its ``S`` shares, ``sum_s 2**(lse_s - top) * out_s / sum_s 2**(lse_s - top)`` with ``top`` the
    largest ``lse_s``. ``M``, ``H``, ``S`` and out's row stride are run-time sizes.

    A program takes one (token, head), ``D`` threads: :data:`MERGE_GROUPS` groups of ``D / 4`` threads, four floats
    (16 bytes) a thread, each group folding every fourth share into a running maximum, weight and sum,
    :data:`MERGE_UNROLL` shares back to back so that their loads are in flight together; the groups' results are
    then combined. A share with ``lse = -inf`` (it saw no key) weighs nothing and its output is not read (an empty
    split does not write it); a row whose every share is empty writes zeros.
    """
    G, U, D = MERGE_GROUPS, MERGE_UNROLL, head_dim
    M, H, S = T.dynamic("M, H, S")
    o_stride = T.dynamic("o_stride", INDEX)  # 64-bit, as the attention program's

    @T.prim_func
    def main(
        partial_out: T.Tensor((S, M, H, D), F32),
        partial_lse: T.Tensor((S, M, H), F32),
        out: T.StridedTensor((M, H, D), (o_stride, D, 1), dtype),
    ):
        T.assume(o_stride % ROW_MULTIPLE == 0)
        with T.Kernel(M, H, threads=D) as (token, head):
            top = T.alloc_fragment((G, D), F32)
            weights = T.alloc_fragment((G, D), F32)
            acc = T.alloc_fragment((G, D), F32)
            top_all = T.alloc_fragment((D,), F32)
            weights_all = T.alloc_fragment((D,), F32)
            acc_all = T.alloc_fragment((D,), F32)
            T.fill(top, ROW_MAX_START)
            T.fill(weights, 0)
            T.fill(acc, 0)
            for chunk in T.serial(T.ceildiv(S, G * U)):
                for u in T.unroll(U):
                    for g, d in T.Parallel(G, D):
                        s = (chunk * U + u) * G + g
                        lse = T.if_then_else(s < S, partial_lse[s, token, head], -T.infinity(F32))
                        new_top = T.max(top[g, d], lse)
                        rescale = T.exp2(top[g, d] - new_top)
                        weight = T.exp2(lse - new_top)
                        weights[g, d] = weights[g, d] * rescale + weight
                        share = T.if_then_else(weight > 0, weight * partial_out[s, token, head, d], 0)
                        acc[g, d] = acc[g, d] * rescale + share
                        top[g, d] = new_top
            T.reduce_max(top, top_all, dim=0)
            for g, d in T.Parallel(G, D):
                weights[g, d] = weights[g, d] * T.exp2(top[g, d] - top_all[d])
                acc[g, d] = acc[g, d] * T.exp2(top[g, d] - top_all[d])
            T.reduce_sum(weights, weights_all, dim=0)
            T.reduce_sum(acc, acc_all, dim=0)
            for d in T.Parallel(D):
                out[token, head, d] = T.if_then_else(weights_all[d] > 0, acc_all[d] / weights_all[d], 0)

    return main


# -- the factory ---------------------------------------------------------------------------------------------------
def unsupported(config: Any) -> str | None:
    """Why these programs do not serve ``config`` (``None``: they do): the backend declines it, and the
    configuration comes from the next backend that serves it (``spec.implementation(supports=...)``)."""
    if config.dtype not in (torch.float16, torch.bfloat16):
        return (
            f"its attention computes in float16 and bfloat16 (its tensor-core products take 16-bit operands), not "
            f"{config.dtype}"
        )
    if config.head_dim not in HEAD_DIMS:
        return f"its attention has tiles for head_dim in {HEAD_DIMS}, not {config.head_dim}"
    return None


def programs(config: Any) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config`` (a ``PagedAttentionConfig``), by variant: the prefill and
    decode tiles, the decode tile split over keys, and the split's merge. A configuration they are not built for is
    refused here, before anything compiles."""
    refuse_unsupported(spec.name, config, unsupported(config))
    dtype, head_dim = tl_dtype(config.dtype), config.head_dim
    cache_dtype = FP8 if config.cache_dtype is torch.float8_e4m3fn else dtype

    def attention(tile: Tile, split: bool) -> Callable[[], Any]:
        return lambda: paged_attention_program(
            config.num_heads // config.num_kv_heads,
            head_dim,
            dtype,
            block_size=config.block_size,
            windowed=bool(config.sliding_window),
            capped=bool(config.softcap),
            cache_dtype=cache_dtype,
            tile=tile,
            split=split,
        )

    return {
        "prefill": attention(PREFILL_TILES[head_dim], split=False),
        "decode": attention(DECODE_TILES[head_dim], split=False),
        "split": attention(DECODE_TILES[head_dim], split=True),
        "merge": lambda: merge_program(head_dim, dtype),
    }


@dataclass(frozen=True)
class LaunchPlan:
    variant: str  #: "prefill" or "decode"
    splits: int  #: 1: no split; else the "split" program with this many shares, then "merge"


def plan_launch(
    config: Any, tokens: int, batch: int, width: int, sm_count: int, splits: int | None = None
) -> LaunchPlan:
    """The programs a call of ``tokens`` query tokens over ``batch`` sequences, its block table ``width`` entries
    wide, runs: shapes and factory arguments only, never index values (a CUDA graph replays the plan it captured
    with any values).

    A call whose sequences average no more query tokens than one decode program covers (a decode step, speculative
    decoding's few) takes the decode tile; others the prefill tile. The decode tile's keys are split when its
    programs number fewer than :data:`PROGRAMS_PER_SM` an SM: into as many shares as bring them there, at most one
    share for every :data:`MIN_TILES_PER_SPLIT` key tiles of the longest sequence the call can hold (``max_seq_len``,
    and no more keys than a table row holds). ``splits`` fixes the decode tile's shares (the GPU script's sweep).
    """
    group = config.num_heads // config.num_kv_heads
    decode = DECODE_TILES[config.head_dim]
    pack = Packing.of(group, decode.block_m)
    if tokens > batch * pack.tokens:
        return LaunchPlan("prefill", 1)
    if splits is not None:
        return LaunchPlan("decode", max(splits, 1))
    programs = row_blocks(tokens, batch, pack.tokens) * config.num_kv_heads * pack.chunks
    longest = min(config.max_seq_len, width * config.block_size)
    useful = -(-longest // (decode.block_n * MIN_TILES_PER_SPLIT))
    wanted = min(-(-PROGRAMS_PER_SM * sm_count // programs), useful, MAX_SPLITS)
    return LaunchPlan("decode", max(wanted, 1))


def with_values(kernel: Callable[..., None], values: tuple[float, float, int]) -> Callable[..., None]:
    """``kernel(*tensors, *values)``: an attention program's run-time scalars (scale, softcap, window) after the
    tensors, which are all that :func:`launch_with_copies` hands on."""

    def launch(*tensors: torch.Tensor) -> None:
        kernel(*tensors, *values)

    return launch


def launch(config: Any, kernels: dict[str, Any], splits: int | None = None) -> Callable[..., None]:
    """The launch ``launch(query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, k_scale, v_scale,
    out)`` of the compiled :func:`programs` (``kernels``, by variant): ``query`` and ``out`` as ``[T, Hq*D]`` rows or
    ``[T, Hq, D]``, row-strided by a multiple of :data:`ROW_MULTIPLE` elements (others, and misaligned views, go
    through contiguous copies); the scales are read only for an fp8 cache. Checked arguments only (the spec's
    checks run first); ``T > 0``. ``splits`` fixes the decode tile's split (:func:`plan_launch`)."""
    heads, head_dim = config.num_heads, config.head_dim
    fp8 = config.cache_dtype is torch.float8_e4m3fn
    values = (float(config.scale), float(config.softcap), int(config.sliding_window))
    attention = {variant: with_values(direct(kernels[variant]), values) for variant in ("prefill", "decode", "split")}
    merge = direct(kernels["merge"])
    plans: dict[tuple[int, int, int, int], LaunchPlan] = {}
    multiples = (ROW_MULTIPLE, 1, 1, 1, 1, 1, *((1, 1) if fp8 else ()))
    split_multiples = (*multiples, 1, 1)

    def plan_for(device: torch.device, tokens: int, batch: int, width: int) -> LaunchPlan:
        key = (device.index or 0, tokens, batch, width)
        plan = plans.get(key)
        if plan is None:
            sm_count = torch.cuda.get_device_properties(device).multi_processor_count
            plan = plans[key] = plan_launch(config, tokens, batch, width, sm_count, splits)
        return plan

    def paged_attention(
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        k_scale: torch.Tensor | None,
        v_scale: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        tokens = query.shape[0]
        rows = query.view(tokens, heads, head_dim)
        written = out.view(tokens, heads, head_dim)
        inputs = (rows, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q)
        if fp8:
            inputs = (*inputs, k_scale, v_scale)  # type: ignore[assignment]
        plan = plan_for(query.device, tokens, *block_table.shape)
        if plan.splits == 1:
            launch_with_copies(attention[plan.variant], (*inputs, written), (len(inputs),), (*multiples, ROW_MULTIPLE))
            return
        partial_out = query.new_empty((plan.splits, tokens, heads, head_dim), dtype=torch.float32)
        partial_lse = query.new_empty((plan.splits, tokens, heads), dtype=torch.float32)
        launch_with_copies(attention["split"], (*inputs, partial_out, partial_lse), (), split_multiples)
        launch_with_copies(merge, (partial_out, partial_lse, written), (2,), (1, 1, ROW_MULTIPLE))

    return paged_attention


def build(config: Any, splits: int | None = None) -> Callable[..., None]:
    """``paged_attention_tl``'s launch for ``config``: refused configurations first, then every program compiled
    (in parallel) so that no call compiles, and no CUDA graph capture meets a compile. ``splits`` fixes the decode
    tile's split (the GPU script's sweep; the programs take it at run time, so it compiles nothing more)."""
    return launch(config, compiled(config.label, programs(config)), splits)


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def paged_attention_tl(config: PagedAttentionConfig) -> Callable[..., None]:
    return build(config)
