"""Attention over a paged KV cache for a packed batch of prefill, chunked-prefill and decode queries (the design of
vLLM's unified attention, written for lazyops' contract).

**The 2D kernel.** A grid of (query blocks across the packed batch) x (kv heads). A program takes ``BLOCK_Q``
consecutive query tokens of one sequence and the ``GROUP`` query heads that share its kv head: ``BLOCK_M = BLOCK_Q *
GROUP`` rows (padded to a power of two), so a decode step (one token) still gives ``tl.dot`` at least 16 rows. It
finds its sequence by a binary search over ``cu_seqlens_q`` (sequence ``b``'s blocks start at ``cu_seqlens_q[b] //
BLOCK_Q + b``, so ``T // BLOCK_Q + B`` programs cover any batch of ``T`` tokens: the grid comes from shapes, never
from values), then walks the sequence's keys in tiles of ``TILE_N``, each key read through the block table, with an
online softmax in float32 (base 2). Tiles outside the causal range of its queries (and below a sliding window) are
not visited.

**The 3D kernel** (flash-decoding) for a batch too small to fill the GPU: the same program, its key tiles split into
``SEGMENTS`` equal runs, one program each (a third grid dimension); each writes its partial maximum, sum and
unnormalised output in float32 workspaces (``[T, Hq, SEGMENTS, D]``), and a reduce kernel merges them exactly
(``out = sum(acc_s 2^(m_s - M)) / sum(l_s 2^(m_s - M))``). ``SEGMENTS`` comes from the GPU's size and the factory's
``max_seq_len``; whether a call takes the 3D kernel from its shapes (:func:`plan`): nothing depends on index values,
so a CUDA graph captured once replays with any lengths and tables.

Index values are never trusted: a block id outside the cache, an entry past the table's row, a query row outside
``[0, T)`` are masked (a missing key, an unwritten row), never read or written. The cache's unused slots may hold
anything (NaN included): keys and values are loaded with masks, so a masked key weighs exactly 0.

Precision: products in float32 (``input_precision="ieee"`` for float32 inputs, which a GPU would otherwise round to
TF32; Triton's interpreter multiplies 16-bit tiles in float32, as its bfloat16 ``tl.dot`` multiplies raw bits), the
probabilities rounded to the values' dtype for the second product, as every flash kernel does. An fp8 cache is
converted to the query's dtype exactly and its scales applied to the logits and the output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops._errors import KernelInputError
from lazyops.specs._paged import FP8_DTYPE
from lazyops.specs.paged_attention import PagedAttentionConfig, spec

#: The widest head this backend serves (a program holds ``BLOCK_M x head_dim`` float32 accumulators).
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class Tiles:
    """One kernel configuration: ``block_m`` rows (query tokens x the group's heads), ``tile_n`` keys per step."""

    block_m: int
    tile_n: int
    num_warps: int
    num_stages: int


#: The configurations by head dim (the next power of two): for prefill-like calls (many queries per sequence), big
#: row tiles that reuse each key tile over many queries; for decode-like ones, 16 rows (a decode step's GROUP heads
#: of one token, padded to what ``tl.dot`` takes) and long key tiles, to keep loads in flight. Chosen so that none
#: spills registers when compiled for sm_90 (the compiled kernel's ``n_regs`` and ``n_spills``, on the host with Triton
#: 3.9: 172 / 227 / 254 registers for prefill at head dims 64 / 128 / 256, 64 / 113 / 164 for decode); not timed on an
#: H200 yet: ``benchmarks/bench_attention.py --sweep`` times the alternatives in ``SWEEP``.
PREFILL_TILES = {
    16: Tiles(128, 64, 8, 3),
    32: Tiles(128, 64, 8, 3),
    64: Tiles(128, 64, 8, 3),
    128: Tiles(128, 64, 8, 3),
    256: Tiles(64, 64, 8, 2),
}
DECODE_TILES = {
    16: Tiles(16, 64, 4, 3),
    32: Tiles(16, 64, 4, 3),
    64: Tiles(16, 64, 4, 3),
    128: Tiles(16, 64, 4, 3),
    256: Tiles(16, 32, 4, 3),
}
#: float32 (the CPU engine's dtype, served on a GPU for its exactness, not its speed): full-precision products run
#: on the FMA units, where bigger tiles spill (128 x 64 x 128 spills 1.4 KB a thread); this one does not, up to 256.
FLOAT32_TILES = Tiles(16, 32, 8, 2)
#: Alternatives the GPU script sweeps (``benchmarks/bench_attention.py --sweep``), by kind of call.
SWEEP = {
    "prefill": (Tiles(128, 64, 8, 3), Tiles(128, 32, 4, 3), Tiles(64, 64, 4, 3), Tiles(128, 128, 8, 2)),
    "decode": (Tiles(16, 64, 4, 3), Tiles(16, 32, 4, 3), Tiles(16, 64, 8, 3), Tiles(16, 128, 8, 3)),
}
#: A call takes the prefill tiles when its sequences average at least this many queries.
PREFILL_QUERIES = 16
#: The 3D kernel serves calls of at most this many query tokens whose 2D grid has fewer programs than
#: ``PROGRAMS_PER_SM`` per SM: its workspaces hold ``T * Hq * SEGMENTS * (D + 2)`` float32 values.
SPLIT_TOKENS = 64
PROGRAMS_PER_SM = 2
#: The most segments a sequence's keys are split into, and the fewest keys a segment should have at ``max_seq_len``.
MAX_SEGMENTS = 64
MIN_SEGMENT_KEYS = 256
#: What the interpreter pretends to run on (it has no SMs): small, so that the host tests stay quick.
INTERPRETER_SMS = 4


@dataclass(frozen=True)
class Plan:
    """How one call runs: its tiles, the programs of each grid dimension, and the 3D kernel's segments (1: 2D)."""

    tiles: Tiles
    block_q: int
    query_blocks: int
    segments: int


def segments_for(config: PagedAttentionConfig, sms: int) -> int:
    """The 3D kernel's split: about ``PROGRAMS_PER_SM`` programs per SM for one sequence (a power of two, at most
    ``MAX_SEGMENTS``), and no more segments than ``max_seq_len`` holds ``MIN_SEGMENT_KEYS``-key runs. A factory
    argument and the device, nothing of a call."""
    wanted = max(1, PROGRAMS_PER_SM * sms // config.num_kv_heads)
    wanted = 1 << (wanted.bit_length() - 1)  # a power of two, at most what was wanted
    return max(1, min(wanted, MAX_SEGMENTS, cdiv(config.max_seq_len, MIN_SEGMENT_KEYS)))


#: Shapes whose plan a kernel keeps (an engine's decode and prefill shapes repeat step after step).
MAX_PLANS_KEPT = 4096


def plan(
    config: PagedAttentionConfig,
    tokens: int,
    batch: int,
    segments: int,
    sms: int,
    tiles: Tiles | None = None,
) -> Plan:
    """The launch of a call of ``tokens`` query tokens over ``batch`` sequences (``block_table.shape[0]``): shapes
    and factory arguments only, so a CUDA graph's replays launch exactly what its capture did."""
    head = max(16, next_power_of_2(config.head_dim))
    if tiles is None and config.dtype is torch.float32:
        tiles = FLOAT32_TILES
    elif tiles is None:
        prefill = batch == 0 or tokens >= PREFILL_QUERIES * batch
        tiles = (PREFILL_TILES if prefill else DECODE_TILES)[head]
    group = config.group
    block_m = max(tiles.block_m, next_power_of_2(group))
    if block_m != tiles.block_m:
        tiles = Tiles(block_m, tiles.tile_n, tiles.num_warps, tiles.num_stages)
    block_q = block_m // group
    query_blocks = tokens // block_q + batch
    split = segments > 1 and tokens <= SPLIT_TOKENS and query_blocks * config.num_kv_heads < PROGRAMS_PER_SM * sms
    return Plan(tiles, block_q, query_blocks, segments if split else 1)


@triton.jit
def _sequence_of(cu_seqlens_ptr, query_block, batch, BLOCK_Q: tl.constexpr):
    """The sequence whose query blocks include ``query_block`` (its blocks start at ``cu[b] // BLOCK_Q + b``)."""
    low: tl.int32 = 0
    high = batch
    while low < high:
        middle = (low + high) // 2
        start = tl.load(cu_seqlens_ptr + middle) // BLOCK_Q + middle
        if start <= query_block:
            low = middle + 1
        else:
            high = middle
    return tl.maximum(low - 1, 0)  # garbage offsets must not send the reads below the tensor


@triton.jit(do_not_specialize=["tokens", "batch", "num_blocks", "table_width"])
def _attention_kernel(
    query_ptr,
    key_cache_ptr,
    value_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    cu_seqlens_ptr,
    k_scale_ptr,
    v_scale_ptr,
    out_ptr,
    partial_out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    tokens,
    batch,
    num_blocks,
    table_width,
    query_row_stride,
    out_row_stride,
    table_row_stride,
    scale,
    softcap,
    HEADS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    TILE_N: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
    FP8: tl.constexpr,
    SEGMENTS: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    # float32 products in full precision: float32 inputs (a GPU would round them to TF32), and the interpreter's
    # upcast 16-bit tiles
    FULL_PRECISION: tl.constexpr = IEEE or UPCAST
    query_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    segment = tl.program_id(2)

    sequence = _sequence_of(cu_seqlens_ptr, query_block, batch, BLOCK_Q)
    query_start = tl.load(cu_seqlens_ptr + sequence)
    query_len = tl.load(cu_seqlens_ptr + sequence + 1) - query_start
    local = query_block - (query_start // BLOCK_Q + sequence)  # this program's block within its sequence
    if local * BLOCK_Q < query_len:
        seq_len = tl.load(seq_lens_ptr + sequence)
        context = seq_len - query_len  # queries are the sequence's last tokens: query i sits at context + i

        rows = tl.arange(0, BLOCK_M)
        row_query = local * BLOCK_Q + rows // GROUP  # the row's query within the sequence
        head = kv_head * GROUP + rows % GROUP
        token = query_start + row_query
        row_ok = (rows < BLOCK_Q * GROUP) & (row_query < query_len) & (token >= 0) & (token < tokens)
        position = context + row_query
        dims = tl.arange(0, BLOCK_D)
        dim_ok = dims < HEAD_DIM
        q_offsets = token.to(tl.int64)[:, None] * query_row_stride + (head * HEAD_DIM)[:, None] + dims[None, :]
        q = tl.load(query_ptr + q_offsets, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)

        # The keys this program's queries attend: up to its last query's position (causal), from its first
        # query's window; never past the sequence or its block table row.
        first = context + local * BLOCK_Q
        last = context + tl.minimum(query_len, (local + 1) * BLOCK_Q) - 1
        high = tl.minimum(tl.minimum(last + 1, seq_len), table_width * BLOCK_SIZE)
        low = 0
        if WINDOW > 0:
            low = tl.maximum(first - WINDOW + 1, 0)
        tile_low = low // TILE_N
        tile_high = tl.maximum(tl.cdiv(high, TILE_N), tile_low)
        if SEGMENTS > 1:
            per_segment = tl.cdiv(tile_high - tile_low, SEGMENTS)
            tile_low = tl.minimum(tile_low + segment * per_segment, tile_high)
            tile_high = tl.minimum(tile_low + per_segment, tile_high)

        logit_scale = scale
        if FP8:
            logit_scale = logit_scale * tl.load(k_scale_ptr)
        maximum = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        total = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        table_row = block_table_ptr + sequence.to(tl.int64) * table_row_stride
        keys_in = tl.arange(0, TILE_N)
        for tile in tl.range(tile_low, tile_high):
            key = tile * TILE_N + keys_in
            key_ok = key < high
            block = tl.load(table_row + key // BLOCK_SIZE, mask=key_ok, other=0)
            key_ok = key_ok & (block >= 0) & (block < num_blocks)
            slot = block.to(tl.int64) * BLOCK_SIZE + key % BLOCK_SIZE
            kv_offsets = (slot * KV_HEADS + kv_head)[:, None] * HEAD_DIM + dims[None, :]
            if BLOCK_D == HEAD_DIM:  # noqa: SIM108 - constexpr: a mask constant along the head keeps loads vectorised
                kv_mask = key_ok[:, None]
            else:
                kv_mask = key_ok[:, None] & dim_ok[None, :]
            k = tl.load(key_cache_ptr + kv_offsets, mask=kv_mask, other=0.0).to(q.dtype)
            v = tl.load(value_cache_ptr + kv_offsets, mask=kv_mask, other=0.0).to(q.dtype)
            if FULL_PRECISION:  # noqa: SIM108 - a constexpr branch: each arm compiled alone
                logits = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                logits = tl.dot(q, tl.trans(k))
            if SOFTCAP:
                # softcap * tanh(x / softcap), with tanh(y) = 1 - 2 / (exp(2y) + 1): exact at both ends
                capped = logits * (logit_scale / softcap)
                logits = softcap * (1.0 - 2.0 / (tl.exp2(capped * (2.0 * 1.4426950408889634)) + 1.0))
                logits = logits * 1.4426950408889634
            else:
                logits = logits * (logit_scale * 1.4426950408889634)
            allowed = key_ok[None, :] & (key[None, :] <= position[:, None])
            if WINDOW > 0:
                allowed = allowed & (key[None, :] > position[:, None] - WINDOW)
            logits = tl.where(allowed, logits, float("-inf"))
            new_maximum = tl.maximum(maximum, tl.max(logits, axis=1))
            # a row with nothing attended yet keeps -inf: shift by 0 there, so that no inf - inf makes a NaN
            shift = tl.where(new_maximum == float("-inf"), 0.0, new_maximum)
            weights = tl.exp2(logits - shift[:, None])
            rescale = tl.exp2(maximum - shift)
            total = total * rescale + tl.sum(weights, axis=1)
            if FULL_PRECISION:
                acc = acc * rescale[:, None] + tl.dot(weights, v, input_precision="ieee")
            else:
                acc = acc * rescale[:, None] + tl.dot(weights.to(v.dtype), v)
            maximum = new_maximum

        if FP8:
            acc = acc * tl.load(v_scale_ptr)
        store_mask = row_ok[:, None] & dim_ok[None, :]
        if SEGMENTS > 1:
            cell = token.to(tl.int64) * HEADS + head  # [T, Hq] position of the row
            tl.store(partial_max_ptr + cell * SEGMENTS + segment, maximum, mask=row_ok)
            tl.store(partial_sum_ptr + cell * SEGMENTS + segment, total, mask=row_ok)
            if tile_high > tile_low:  # an empty segment's output is never read (its maximum is -inf)
                partial = partial_out_ptr + (cell * SEGMENTS + segment)[:, None] * BLOCK_D + dims[None, :]
                tl.store(partial, acc, mask=store_mask)
        else:
            out = acc / tl.where(total > 0, total, 1.0)[:, None]  # nothing attended (bad values): 0, not 0 / 0
            out_offsets = token.to(tl.int64)[:, None] * out_row_stride + (head * HEAD_DIM)[:, None] + dims[None, :]
            tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=store_mask)


@triton.jit
def _merge_segments_kernel(
    out_ptr,
    partial_out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    out_row_stride,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SEGMENTS: tl.constexpr,
):
    # One program per (token, query head): the exact merge of its segments' partial softmaxes. A segment with
    # nothing attended has maximum -inf and weighs 0; its partial output is never read (it may be stale).
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    cell = (token * HEADS + head) * SEGMENTS
    segments = tl.arange(0, SEGMENTS)
    maxima = tl.load(partial_max_ptr + cell + segments)
    attended = maxima > float("-inf")
    overall = tl.max(maxima, axis=0)
    weights = tl.where(attended, tl.exp2(maxima - tl.where(overall == float("-inf"), 0.0, overall)), 0.0)
    totals = tl.load(partial_sum_ptr + cell + segments, mask=attended, other=0.0)
    total = tl.sum(totals * weights, axis=0)
    dims = tl.arange(0, BLOCK_D)
    partial = tl.load(
        partial_out_ptr + (cell + segments)[:, None] * BLOCK_D + dims[None, :],
        mask=attended[:, None] & (dims < HEAD_DIM)[None, :],
        other=0.0,
    )
    acc = tl.sum(partial * weights[:, None], axis=0)
    out = acc / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + token * out_row_stride + head * HEAD_DIM + dims,
        out.to(out_ptr.dtype.element_ty),
        mask=dims < HEAD_DIM,
    )


def device_sms(interpret: bool) -> int:
    """The current GPU's SM count (the interpreter's stand-in on the host)."""
    if interpret:
        return INTERPRETER_SMS
    return int(torch.cuda.get_device_properties().multi_processor_count)


def build_attention(
    config: PagedAttentionConfig, tiles: Tiles | None = None, segments: int | None = None
) -> Callable[..., None]:
    """The launch ``attention(query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, k_scale, v_scale,
    out)``; ``tiles`` and ``segments`` fix what :func:`plan` and :func:`segments_for` would choose (the GPU script's
    sweep)."""
    if config.head_dim > MAX_HEAD_DIM:
        raise KernelInputError(
            f"{config.label}: the Triton backend serves head dims up to {MAX_HEAD_DIM}; select the 'torch' backend "
            "for wider heads"
        )
    interpret = interpreting(_attention_kernel)
    sms = device_sms(interpret)
    # a power of two: the merge reads every segment of a row at once
    split = segments_for(config, sms) if segments is None else next_power_of_2(max(1, segments))
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    block_d = max(16, next_power_of_2(head_dim))
    fp8 = config.cache_dtype is FP8_DTYPE
    ieee = config.dtype is torch.float32
    common = {
        "HEADS": heads,
        "KV_HEADS": kv_heads,
        "GROUP": config.group,
        "HEAD_DIM": head_dim,
        "BLOCK_D": block_d,
        "BLOCK_SIZE": config.block_size,
        "WINDOW": config.sliding_window,
        "SOFTCAP": config.softcap > 0,
        "FP8": fp8,
        "UPCAST": interpret and not ieee,
        "IEEE": ieee,
    }
    launchers: dict[tuple[Tiles, int, int], Launcher] = {}
    # the plan and launcher of each (tokens, batch) a call has had: one dict read a call, no planning frames
    by_shape: dict[tuple[int, int], tuple[Plan, Launcher]] = {}
    merge = Launcher(
        _merge_segments_kernel,
        {"HEADS": heads, "HEAD_DIM": head_dim, "BLOCK_D": block_d, "SEGMENTS": split},
        num_warps=4,
    )
    scale, softcap = config.scale, config.softcap or 1.0

    def launcher(chosen: Plan) -> Launcher:
        key = (chosen.tiles, chosen.block_q, chosen.segments)
        launch = launchers.get(key)
        if launch is None:
            constexprs = {
                **common,
                "BLOCK_M": chosen.tiles.block_m,
                "BLOCK_Q": chosen.block_q,
                "TILE_N": chosen.tiles.tile_n,
                "SEGMENTS": chosen.segments,
            }
            launch = launchers[key] = Launcher(
                _attention_kernel,
                constexprs,
                num_warps=chosen.tiles.num_warps,
                num_stages=chosen.tiles.num_stages,
            )
        return launch

    def attention(
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
        tokens, batch = query.shape[0], block_table.shape[0]
        out = out.view(tokens, heads * head_dim)
        planned = by_shape.get((tokens, batch))
        if planned is None:
            chosen = plan(config, tokens, batch, split, sms, tiles)
            if len(by_shape) >= MAX_PLANS_KEPT:  # an engine's shapes repeat; a stream of new ones must not grow it
                by_shape.clear()
            planned = by_shape[(tokens, batch)] = (chosen, launcher(chosen))
        chosen, launch = planned
        # without an fp8 cache the scale pointers are never read: the lengths stand in for them
        scales = (k_scale, v_scale) if fp8 else (seq_lens, seq_lens)
        if chosen.segments > 1:
            # one allocation per call, sized from T and the split (inside a CUDA graph's capture it comes from the
            # graph's pool): every program of a real query row writes its segment's three parts
            cells = tokens * heads * chosen.segments
            workspace = torch.empty(cells * (block_d + 2), dtype=torch.float32, device=query.device)
            partial_max = workspace[:cells]
            partial_sum = workspace[cells : 2 * cells]
            partial_out = workspace[2 * cells :]
        else:
            partial_out = partial_max = partial_sum = out
        launch(
            (chosen.query_blocks, kv_heads, chosen.segments),
            query,
            key_cache,
            value_cache,
            block_table,
            seq_lens,
            cu_seqlens_q,
            *scales,
            out,
            partial_out,
            partial_max,
            partial_sum,
            tokens,
            batch,
            key_cache.shape[0],
            block_table.shape[1],
            query.stride(0),
            out.stride(0),
            block_table.stride(0),
            scale,
            softcap,
        )
        if chosen.segments > 1:
            merge((tokens, heads), out, partial_out, partial_max, partial_sum, out.stride(0))

    return attention


@spec.implementation(device_type=launch_device(_attention_kernel), strided_rows=True, writes_out=True)
def paged_attention_tl(config: PagedAttentionConfig) -> Callable[..., None]:
    return build_attention(config)
