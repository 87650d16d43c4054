"""``paged_attention_tl``'s examples: ragged batches (prefill, decode, chunked, idle sequences), shuffled and
shared blocks, poisoned spare slots, GQA ratios, windows, soft-caps, fp8 caches; the batch geometry and traffic
model benchmarks count by."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.paged_attention import FP8_DTYPE, PagedAttentionConfig, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Examples
from lazyops.testing.cases.kv_cache_write import draw_scales

# -- batches: what a call's index tensors describe -----------------------------------------------------------------
#: A call's sequences, ``(seq_len, q_len)`` each.
Batch = tuple[tuple[int, int], ...]
#: ``kind="auto"`` geometries time a decode step (one query per sequence) up to this many tokens, a prefill past it.
DECODE_TOKENS = 256


def batch_for(geometry: Mapping[str, Any], tokens: int, block_size: int) -> Batch:
    """The sequences of a call with ``tokens`` query tokens under ``geometry``.

    Either ``geometry["batches"]`` (drawn conformance cases): the first batch with exactly ``tokens`` queries, else
    the first batch cut (its queries trimmed from the end) or grown (decode sequences appended) to ``tokens``. Or a
    kind of step over ``geometry["context"]``-token contexts: ``"decode"`` (``tokens`` sequences of one query),
    ``"prefill"`` (sequences of ``context`` tokens, all queries, the last one ragged), ``"chunked"`` (each sequence
    ``context`` tokens, its last ``geometry["chunk"]`` new), ``"auto"`` (decode up to :data:`DECODE_TOKENS` tokens,
    prefill past it). Without a geometry: decode steps over contexts of three blocks and one token.
    """
    batches = geometry.get("batches")
    if batches is not None:
        for batch in batches:
            if sum(q for _, q in batch) == tokens:
                return tuple(batch)
        return resized(tuple(batches[0]) if batches else (), tokens)
    context = max(1, int(geometry.get("context", 3 * block_size + 1)))
    kind = geometry.get("kind", "decode")
    if kind == "auto":
        kind = "decode" if tokens <= DECODE_TOKENS else "prefill"
    if kind == "decode":
        return ((context, 1),) * tokens
    step = context if kind == "prefill" else max(1, min(context, int(geometry.get("chunk", 512))))
    sequences = []
    left = tokens
    while left > 0:
        new = min(step, left)
        sequences.append((new if kind == "prefill" else context, new))
        left -= new
    return tuple(sequences)


def resized(batch: Batch, tokens: int) -> Batch:
    """``batch`` with ``tokens`` queries: each sequence keeps its length, its queries cut to what is left (trailing
    sequences may keep none); past its queries, decode sequences as long as its longest are appended."""
    sequences = []
    left = tokens
    for length, queries in batch:
        taken = min(queries, left)
        sequences.append((length, taken))
        left -= taken
    longest = max((length for length, _ in batch), default=1)
    sequences += [(longest, 1)] * left
    return tuple(sequences)


def keys_attended(length: int, queries: int, window: int) -> tuple[int, int]:
    """``(keys read, query-key pairs)`` of one sequence: the keys any of its queries attends, and the sum over its
    queries of the keys each attends."""
    if not queries:
        return 0, 0
    first = length - queries  # the first query's position
    if not window:
        return length, queries * first + queries * (queries + 1) // 2
    lowest = max(0, first - window + 1)
    pairs = sum(min(window, position + 1) for position in range(first, length))
    return length - lowest, pairs


def attention_traffic(config: PagedAttentionConfig, batch: Batch) -> Traffic:
    """Bytes: each sequence's attended keys and values read once, the queries read, the output written (the index
    tensors besides). FLOPs: ``4 * D * Hq`` per query-key pair (two products). Bound: memory where the FLOPs per
    byte stay under 100 (decode: ``Hq / Hk`` per cache byte), compute otherwise."""
    read = pairs = 0
    for length, queries in batch:
        keys, attended = keys_attended(length, queries, config.sliding_window)
        read += keys
        pairs += attended
    tokens = sum(queries for _, queries in batch)
    cache_bytes = 2 * read * config.num_kv_heads * config.head_dim * config.cache_dtype.itemsize
    activation_bytes = 2 * tokens * config.num_heads * config.head_dim * config.dtype.itemsize
    index_bytes = 4 * (2 * len(batch) + 1) + 4 * sum(-(-length // config.block_size) for length, _ in batch)
    moved = cache_bytes + activation_bytes + index_bytes
    flops = 4 * pairs * config.head_dim * config.num_heads
    return Traffic(bytes=moved, flops=flops, bound="compute" if flops >= 100 * moved else "memory")


# -- the conformance cases -----------------------------------------------------------------------------------------
#: The query elements (``T * Hq * D``) a drawn call may hold: small, for Triton's interpreter on the host.
CASE_QUERY_ELEMENTS = 60_000
#: Caches up to this many elements are drawn on the host (reproducible on any device); larger ones (a benchmark's)
#: on their device, from a seed drawn on the host.
HOST_DRAWN_ELEMENTS = 1 << 24


def attention_cases(kernel: str) -> Any:
    """The cases that break attention kernels: ragged lengths (1, ending exactly on a block boundary, a partly
    filled last block), queries that are a whole sequence (prefill), one token (decode), the last few (chunked) or
    none, empty batches; shuffled and shared block ids, spare blocks and table columns (their contents poisoned);
    GQA ratios 1, 4, 8 and odd ones; windows, soft-caps, scales; block sizes 16, 1, 8, 32 and odd; head dims 64, 128,
    256 and small odd ones; fp8 caches; several calls per case."""

    @st.composite
    def sequence(draw: st.DrawFn, block_size: int) -> tuple[int, int]:
        length = draw(
            st.sampled_from([1, block_size, 2 * block_size, block_size + 1, 3 * block_size - 1]) | st.integers(1, 80)
        )
        kind = draw(st.sampled_from(["prefill", "decode", "decode", "chunked", "idle"]))
        if kind == "prefill":
            return length, length
        if kind == "decode":
            return length, 1
        if kind == "chunked" and length > 1:
            return length, draw(st.integers(2, min(length, 6)))
        return length, 0

    @st.composite
    def batch(draw: st.DrawFn, block_size: int, budget: int) -> Batch:
        sequences = draw(st.lists(sequence(block_size), min_size=0, max_size=4))
        trimmed = []
        for length, queries in sequences:  # within the budget: a prefill cut to its last queries (chunked)
            taken = min(queries, budget)
            budget -= taken
            trimmed.append((length, taken))
        return tuple(trimmed)

    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        dtype = draw(strategies.dtypes())
        kv_heads = draw(st.sampled_from([1, 2]) | st.integers(1, 3))
        group = draw(st.sampled_from([1, 4, 8]) | st.integers(1, 3))
        head_dim = draw(st.sampled_from([64, 128, 256]) | st.sampled_from([1, 3, 8, 17, 40]))
        block_size = draw(st.sampled_from([16, 1, 8, 32]) | st.integers(2, 5))
        heads = group * kv_heads
        budget = max(1, CASE_QUERY_ELEMENTS // (heads * head_dim))
        batches = tuple(draw(st.lists(batch(block_size, budget), min_size=1, max_size=2)))
        longest = max((length for each in batches for length, _ in each), default=1)
        kwargs: dict[str, Any] = {"block_size": block_size}
        options = {
            "max_seq_len": st.sampled_from([longest, 2 * longest + 3, 4096]),
            "scale": st.sampled_from([0.5, 0.05]),
            "sliding_window": st.sampled_from([1, 3]) | st.integers(1, 40),
            "softcap": st.sampled_from([1.5, 30.0]),
            "cache_dtype": st.just(FP8_DTYPE),
        }
        for option, values in options.items():
            if draw(st.integers(0, 3)) == 0:
                kwargs[option] = draw(values)
        geometry = {
            "batches": batches,
            "spare_blocks": draw(st.integers(0, 3)),
            "spare_columns": draw(st.integers(0, 2)),
            "table_fill": draw(st.sampled_from(["zero", "minus_one", "past_the_cache"])),
            "shuffle": draw(st.booleans()),
            "share": draw(st.booleans()),
        }
        tokens = tuple(sum(q for _, q in each) for each in batches)
        args = (heads, kv_heads, head_dim, dtype)
        return Case(kernel, args, kwargs, tokens, draw(strategies.seeds()), geometry)

    return cases()


# -- the inputs of one call ----------------------------------------------------------------------------------------
def block_ids(batch: Batch, block_size: int, share: bool) -> tuple[list[list[int]], int]:
    """Each sequence's logical blocks and how many there are: fresh ones, or with ``share`` the full blocks of the
    first sequence's prefix read by every later sequence as long (prefix caching: several sequences reading the same
    physical blocks)."""
    tables: list[list[int]] = []
    count = 0
    for b, (length, _) in enumerate(batch):
        shared = min(batch[0][0] // block_size, length // block_size) if share and b else 0
        ids = tables[0][:shared] if shared else []
        fresh = -(-length // block_size) - shared
        ids = ids + list(range(count, count + fresh))
        count += fresh
        tables.append(ids)
    return tables, count


def attention_inputs(
    config: PagedAttentionConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
) -> tuple[torch.Tensor, ...]:
    """Every input of one call for :func:`batch_for`'s batch: caches of random contents in which every slot no
    sequence reads (spare blocks, the tail of a partly filled last block) holds NaN, so a kernel that reads past a
    sequence fails; block ids in random order (``shuffle``) and shared (``share``); table entries past a sequence's
    blocks set to 0, -1 or an id past the cache (``table_fill``); the scales of an fp8 cache."""

    block_size, kv_heads, head_dim = config.block_size, config.num_kv_heads, config.head_dim
    batch = batch_for(geometry, tokens, block_size)
    logical, count = block_ids(batch, block_size, bool(geometry.get("share", False)))
    num_blocks = max(1, count + int(geometry.get("spare_blocks", 0)))
    if geometry.get("shuffle", False):
        physical = torch.randperm(num_blocks, generator=draw.generator)
    else:
        physical = torch.arange(num_blocks)
    width = max((len(ids) for ids in logical), default=0) + int(geometry.get("spare_columns", 0))
    fill = {"zero": 0, "minus_one": -1, "past_the_cache": num_blocks}[geometry.get("table_fill", "zero")]
    table = torch.full((len(batch), max(1, width)), fill, dtype=torch.int32)
    read = torch.zeros(num_blocks, block_size, dtype=torch.bool)  # the slots some sequence reads
    for b, ids in enumerate(logical):
        if not ids:
            continue
        blocks = physical[ids]
        table[b, : len(ids)] = blocks.to(torch.int32)
        length = batch[b][0]
        read[blocks[: length // block_size]] = True
        if length % block_size:
            read[blocks[-1], : length % block_size] = True
    read = read.to(draw.device)

    def cache() -> torch.Tensor:
        shape = (num_blocks, block_size, kv_heads, head_dim)
        if math.prod(shape) <= HOST_DRAWN_ELEMENTS:
            values = draw.randn(*shape, dtype=torch.float32)
        else:  # a benchmark's cache: drawn where it lives, from a seed the example's generator gives
            seed = int(torch.randint(0, 2**62, (1,), generator=draw.generator))
            generator = torch.Generator(draw.device).manual_seed(seed)
            drawn_dtype = torch.bfloat16 if config.cache_dtype is FP8_DTYPE else config.cache_dtype
            values = torch.randn(shape, generator=generator, dtype=drawn_dtype, device=draw.device)
        values[~read] = float("nan")
        stored: torch.Tensor = values.to(config.cache_dtype)
        return stored

    key_cache, value_cache = cache(), cache()
    query = draw.randn(tokens, config.num_heads * head_dim, dtype=config.dtype)
    seq_lens = torch.tensor([length for length, _ in batch], dtype=torch.int32)
    starts = [0]
    for _, queries in batch:
        starts.append(starts[-1] + queries)
    cu_seqlens_q = torch.tensor(starts, dtype=torch.int32)
    k_scale, v_scale = draw_scales(draw, config.cache_dtype is FP8_DTYPE)
    device = draw.device
    return (
        query,
        key_cache,
        value_cache,
        table.to(device),
        seq_lens.to(device),
        cu_seqlens_q.to(device),
        k_scale,
        v_scale,
    )


class PagedAttentionExamples(Examples):
    def cases(self) -> Any:
        return attention_cases(self.spec.name)

    def example_inputs(
        self, config: PagedAttentionConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return attention_inputs(config, tokens, draw, geometry)

    def token_elements(self, config: PagedAttentionConfig, geometry: Mapping[str, Any]) -> int:
        return config.num_heads * config.head_dim  # a query row (and an output row)

    def traffic(self, config: PagedAttentionConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        return attention_traffic(config, batch_for(geometry, tokens, config.block_size))

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Llama-3-8B's attention (32 query heads, 8 kv heads of 128, 16-token blocks) over 8192-token contexts:
        a decode step of ``tokens`` sequences up to 256 tokens, a prefill of 8192-token sequences past that."""
        return Example((32, 8, 128, dtype), {"block_size": 16}, {"kind": "auto", "context": 8192})


examples = PagedAttentionExamples(spec)
