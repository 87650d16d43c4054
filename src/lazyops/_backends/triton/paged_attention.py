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
(``out = sum(acc_s 2^(m_s - M)) / sum(l_s 2^(m_s - M))``). ``SEGMENTS`` comes from the call's shapes (its tokens,
its block table's width), the factory's ``max_seq_len`` and the GPU's SM count (:func:`split_segments`), the tiles
from the GPU's table (``configs/paged_attention.json``): nothing depends on index values, so a CUDA graph captured
once replays with any lengths and tables.

Index values are never trusted: a block id outside the cache, an entry past the table's row, a query row outside
``[0, T)`` are masked (a missing key, an unwritten row), never read or written. The cache's unused slots may hold
anything (NaN included): keys and values are loaded with masks, so a masked key weighs exactly 0.

Precision: products in float32 (``input_precision="ieee"`` for float32 inputs, which a GPU would otherwise round to
TF32; Triton's interpreter multiplies 16-bit tiles in float32, as its bfloat16 ``tl.dot`` multiplies raw bits), the
probabilities rounded to the values' dtype for the second product, as every flash kernel does. An fp8 cache is
converted to the query's dtype exactly and its scales applied to the logits and the output.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from lazyops._backends._tuned import device_table
from lazyops._backends.triton._common import interpreting, launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops._errors import KernelInputError
from lazyops.specs.paged_attention import FP8_DTYPE, PagedAttentionConfig, spec

#: The widest head this backend serves (a program holds ``BLOCK_M x head_dim`` float32 accumulators).
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class Tiles:
    """One kernel configuration: ``block_m`` rows (query tokens x the group's heads), ``tile_n`` keys per step."""

    block_m: int
    tile_n: int
    num_warps: int
    num_stages: int


#: The tiles and the split rule's numbers, one table per device (``configs/paged_attention.json``): for
#: prefill-like calls (many queries per sequence) big row tiles that reuse each key tile over many queries; for
#: decode-like ones 16 rows (a decode step's GROUP heads of one token, padded to what ``tl.dot`` takes) and long key
#: tiles, to keep loads in flight; float32 (the CPU engine's dtype, served on a GPU for its exactness, not its speed)
#: on the FMA units, where bigger tiles spill. None spills registers when compiled for sm_90. Why these values, and
#: the sweep that confirms them: docs/decisions/010-paged-attention-split-and-tiles.md.
TABLES = Path(__file__).with_name("configs") / "paged_attention.json"
#: Shared memory a Hopper block may use (227 KiB); a launch asks the device for its own figure, and fits its
#: tiles' stages to it (:func:`shared_bytes`), less a margin for what the compiler adds (barriers).
HOPPER_SHARED_MEMORY = 227 * 1024
SHARED_RESERVE = 4 * 1024
#: What the interpreter pretends to run on (it has no SMs): small, so that the host tests stay quick.
INTERPRETER_SMS = 4


@dataclass(frozen=True)
class SplitRule:
    """The numbers of the split-KV rule (:func:`split_segments`): calls of at most ``max_tokens`` query tokens split
    each sequence's keys into segments, as many as bring the busy programs to ``programs_per_sm`` an SM, at most
    ``max_segments`` and no more than leave ``min_segment_keys`` keys a segment of the longest sequence the call can
    hold. Long sequences split further, into segments of ``long_segment_keys`` keys (0: never), while the busy
    programs stay within ``max_programs_per_sm`` an SM: a batch that already fills the GPU once (64 sequences of 8 kv
    heads on 132 SMs) still gains from evening out its programs' long reads (decision 010)."""

    max_tokens: int
    programs_per_sm: int
    min_segment_keys: int
    max_segments: int
    long_segment_keys: int = 0
    max_programs_per_sm: int = 0


@dataclass(frozen=True)
class AttentionTable:
    """One device's table of ``configs/paged_attention.json``: the tiles by head dim (the next power of two, 16 at
    least), the float32 tile, the average queries a sequence from which a call takes the prefill tiles, and the
    split rule's numbers."""

    prefill: dict[int, Tiles]
    decode: dict[int, Tiles]
    float32: Tiles
    prefill_queries: int
    split: SplitRule


@functools.cache
def attention_table(device: str | None = None) -> AttentionTable:
    """The table for the GPU named ``device`` (``torch.cuda.get_device_name()``), or the default one."""
    table = device_table(TABLES, device)

    def by_head(tiles: dict[str, dict[str, int]]) -> dict[int, Tiles]:
        return {int(head): Tiles(**fields) for head, fields in tiles.items()}

    return AttentionTable(
        prefill=by_head(table["prefill"]),
        decode=by_head(table["decode"]),
        float32=Tiles(**table["float32"]),
        prefill_queries=table["prefill_queries"],
        split=SplitRule(**table["split"]),
    )


#: The default table (the H200's) and its tiles, under the names the tests and the sweep use.
DEFAULT_TABLE = attention_table()
PREFILL_TILES, DECODE_TILES, FLOAT32_TILES = DEFAULT_TABLE.prefill, DEFAULT_TABLE.decode, DEFAULT_TABLE.float32
#: Alternatives the GPU script sweeps (``benchmarks/bench_attention.py --sweep``), by kind of call: key tiles of
#: 32 to 128, warps, and the stages that keep more or fewer loads in flight (more stages, fewer programs an SM).
#: Each compiles for sm_90 without spilling (Triton 3.9, head dim 128, bf16): decision 010 gives their registers and
#: shared memory.
SWEEP = {
    "prefill": (Tiles(128, 64, 8, 3), Tiles(128, 64, 8, 2), Tiles(128, 32, 8, 3), Tiles(64, 32, 4, 3)),
    "decode": (
        Tiles(16, 64, 4, 3),
        Tiles(16, 64, 4, 2),
        Tiles(16, 32, 4, 3),
        Tiles(16, 32, 4, 4),
        Tiles(16, 128, 4, 3),
        Tiles(16, 64, 8, 3),
    ),
}


@dataclass(frozen=True)
class Plan:
    """How one call runs: its tiles, the programs of each grid dimension, and the 3D kernel's segments (1: 2D)."""

    tiles: Tiles
    block_q: int
    query_blocks: int
    segments: int


def split_segments(
    config: PagedAttentionConfig, tokens: int, query_blocks: int, width: int, sms: int, rule: SplitRule
) -> int:
    """The 3D kernel's segments for a call of ``tokens`` query tokens, ``query_blocks`` row blocks and a block
    table ``width`` entries wide, on ``sms`` SMs: shapes and factory arguments only.

    A decode-like call (at most ``rule.max_tokens`` tokens) has at most ``min(tokens, query_blocks) * Hk`` programs
    with work; each reads a whole sequence's keys of its kv head. Splitting the keys into ``S`` segments multiplies
    them by ``S`` and adds a merge (its workspace ``T * Hq * S * (D + 2)`` float32 values written and read again):
    ``S`` is the largest power of two that keeps the busy programs within ``rule.programs_per_sm`` an SM, or, where
    that is fewer, cuts the longest sequence into segments of ``rule.long_segment_keys`` keys within
    ``rule.max_programs_per_sm`` an SM; and that leaves the longest sequence the call can hold
    (``min(max_seq_len, width * block_size)``: no sequence has more keys than its table row) at
    ``rule.min_segment_keys`` keys a segment or more, in at most ``rule.max_segments``."""
    if tokens > rule.max_tokens:
        return 1
    busy = max(1, min(tokens, query_blocks) * config.num_kv_heads)
    longest = min(config.max_seq_len, width * config.block_size)
    wanted = rule.programs_per_sm * sms // busy
    if rule.long_segment_keys:
        wanted = max(wanted, min(longest // rule.long_segment_keys, rule.max_programs_per_sm * sms // busy))
    wanted = min(wanted, rule.max_segments, longest // rule.min_segment_keys)
    return 1 << (wanted.bit_length() - 1) if wanted > 1 else 1


def shared_bytes(tiles: Tiles, head_dim: int, itemsize: int) -> int:
    """The shared memory a program of ``tiles`` takes: the query tile, ``num_stages - 1`` buffers of a key and a
    value tile, and the float32 scores' layout conversion (``block_m x tile_n``). Matches what Triton 3.9 allocates
    for sm_90 within 4 KiB for every tile of the table and the sweep (its ``metadata.shared``)."""
    buffers = max(1, tiles.num_stages - 1)
    return (tiles.block_m + 2 * buffers * tiles.tile_n) * head_dim * itemsize + tiles.block_m * tiles.tile_n * 4


def fitted(tiles: Tiles, head_dim: int, itemsize: int, shared_memory: int) -> Tiles:
    """``tiles`` cut until a program fits ``shared_memory`` less :data:`SHARED_RESERVE`: its stages first (two at
    least), then its keys a step (16 at least). A device with less shared memory than the table's (a 99 KiB sm_89)
    takes the same rows, less deep."""
    room = shared_memory - SHARED_RESERVE
    while shared_bytes(tiles, head_dim, itemsize) > room and (tiles.num_stages > 2 or tiles.tile_n > 16):
        if tiles.num_stages > 2:
            tiles = dataclasses.replace(tiles, num_stages=tiles.num_stages - 1)
        else:
            tiles = dataclasses.replace(tiles, tile_n=tiles.tile_n // 2)
    return tiles


#: Shapes whose plan a kernel keeps (an engine's decode and prefill shapes repeat step after step).
MAX_PLANS_KEPT = 4096


def plan(
    config: PagedAttentionConfig,
    tokens: int,
    batch: int,
    width: int,
    sms: int,
    table: AttentionTable = DEFAULT_TABLE,
    tiles: Tiles | None = None,
    segments: int | None = None,
) -> Plan:
    """The launch of a call of ``tokens`` query tokens over ``batch`` sequences (``block_table.shape``: ``[batch,
    width]``): shapes and factory arguments only, so a CUDA graph's replays launch exactly what its capture did.
    ``tiles`` and ``segments`` fix what the table and :func:`split_segments` would choose (a call of more than the
    rule's ``max_tokens`` tokens still runs unsplit)."""
    head = max(16, next_power_of_2(config.head_dim))
    if tiles is None and config.dtype is torch.float32:
        tiles = table.float32
    elif tiles is None:
        prefill = batch == 0 or tokens >= table.prefill_queries * batch
        tiles = (table.prefill if prefill else table.decode)[head]
    group = config.group
    block_m = max(tiles.block_m, next_power_of_2(group))
    if block_m != tiles.block_m:
        tiles = Tiles(block_m, tiles.tile_n, tiles.num_warps, tiles.num_stages)
    block_q = block_m // group
    query_blocks = tokens // block_q + batch
    if segments is None:
        segments = split_segments(config, tokens, query_blocks, width, sms, table.split)
    elif tokens > table.split.max_tokens:
        segments = 1
    return Plan(tiles, block_q, query_blocks, segments)


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
        # The block ids a tile ahead: the keys' addresses then come from the loop's carried values, not from a load
        # of the same iteration, so Triton's pipeliner keeps the next tile's keys and values in flight (num_stages
        # 3: two buffers) while this one is computed; read in the same iteration they were single-buffered.
        upcoming = tile_low * TILE_N + keys_in
        next_block = tl.load(table_row + upcoming // BLOCK_SIZE, mask=upcoming < high, other=0)
        for tile in tl.range(tile_low, tile_high):
            key = tile * TILE_N + keys_in
            key_ok = key < high
            block = next_block
            upcoming = key + TILE_N
            next_block = tl.load(table_row + upcoming // BLOCK_SIZE, mask=upcoming < high, other=0)
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


def build_attention(
    config: PagedAttentionConfig, tiles: Tiles | None = None, segments: int | None = None
) -> Callable[..., None]:
    """The launch ``attention(query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, k_scale, v_scale,
    out)``, planned by the current GPU's table (:func:`attention_table`, :func:`plan`); ``tiles`` and ``segments``
    fix what the table and the split rule would choose (the GPU script's sweep)."""
    reason = unsupported(config)
    if reason:  # a direct call; through lazyops' namespace the factory's ``supports`` declined it first
        raise KernelInputError(
            f"{config.label}: backend 'triton' does not serve it: {reason}; select the 'torch' backend for it"
        )
    interpret = interpreting(_attention_kernel)
    if interpret:
        sms, shared_memory, device = INTERPRETER_SMS, HOPPER_SHARED_MEMORY, None
    else:
        properties = torch.cuda.get_device_properties()
        sms, device = properties.multi_processor_count, properties.name
        shared_memory = getattr(properties, "shared_memory_per_block_optin", HOPPER_SHARED_MEMORY)
    table = attention_table(device)
    # a power of two: the merge reads every segment of a row at once
    forced = None if segments is None else next_power_of_2(max(1, segments))
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
    merges: dict[int, Launcher] = {}
    # the plan and launchers of each (tokens, batch, table width) a call has had: one dict read a call, no planning
    by_shape: dict[tuple[int, int, int], tuple[Plan, Launcher, Launcher | None]] = {}
    scale, softcap = config.scale, config.softcap or 1.0

    def launcher(chosen: Plan) -> Launcher:
        key = (chosen.tiles, chosen.block_q, chosen.segments)
        launch = launchers.get(key)
        if launch is None:
            tiles = fitted(chosen.tiles, block_d, config.dtype.itemsize, shared_memory)
            constexprs = {
                **common,
                "BLOCK_M": tiles.block_m,
                "BLOCK_Q": chosen.block_q,
                "TILE_N": tiles.tile_n,
                "SEGMENTS": chosen.segments,
            }
            launch = launchers[key] = Launcher(
                _attention_kernel, constexprs, num_warps=tiles.num_warps, num_stages=tiles.num_stages
            )
        return launch

    def merger(segments: int) -> Launcher | None:
        if segments == 1:
            return None
        if segments not in merges:
            constexprs = {"HEADS": heads, "HEAD_DIM": head_dim, "BLOCK_D": block_d, "SEGMENTS": segments}
            merges[segments] = Launcher(_merge_segments_kernel, constexprs, num_warps=4)
        return merges[segments]

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
        tokens, (batch, width) = query.shape[0], block_table.shape
        out = out.view(tokens, heads * head_dim)
        planned = by_shape.get((tokens, batch, width))
        if planned is None:
            chosen = plan(config, tokens, batch, width, sms, table, tiles, forced)
            if len(by_shape) >= MAX_PLANS_KEPT:  # an engine's shapes repeat; a stream of new ones must not grow it
                by_shape.clear()
            planned = by_shape[(tokens, batch, width)] = (chosen, launcher(chosen), merger(chosen.segments))
        chosen, launch, merge = planned
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
            width,
            query.stride(0),
            out.stride(0),
            block_table.stride(0),
            scale,
            softcap,
        )
        if merge is not None:
            merge((tokens, heads), out, partial_out, partial_max, partial_sum, out.stride(0))

    return attention


def unsupported(config: PagedAttentionConfig) -> str | None:
    """Why this launch does not serve ``config`` (``None``: it does): the backend declines it, and the configuration
    comes from the next backend that serves it (``spec.implementation(supports=...)``)."""
    if config.head_dim > MAX_HEAD_DIM:
        return f"its attention serves head dims up to {MAX_HEAD_DIM}, not {config.head_dim}"
    return None


@spec.implementation(
    device_type=launch_device(_attention_kernel), strided_rows=True, writes_out=True, supports=unsupported
)
def paged_attention_tl(config: PagedAttentionConfig) -> Callable[..., None]:
    return build_attention(config)
