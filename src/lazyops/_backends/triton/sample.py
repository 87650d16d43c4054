"""Sampling (the spec: ``lazyops.specs.sample``): the thresholds of min-p, top-k and top-p without a sort.

Every filter keeps ``{i: z_i >= threshold}``. min-p's is a comparison with the row's maximum; top-k's and top-p's are
found by a 16-way search over the 32-bit ordered key of ``z`` (the float's bits, negatives flipped): each pass over the
row counts the tokens (top-k) or sums the mass (top-p) above 15 pivots at once and keeps the sixteenth of the interval
where the count or the mass crosses, so 8 passes settle a search's 32 bits where a bisection took 32. The keys found are
the bisection's (the argument: the comment on the searches). The draw is the exponential race over the kept tokens with
the spec's hashed uniforms. Rows of a program are searched together.

The reads of a row, at most 17 (the bisection's kernel: 67): pass 1 finds the greedy token and the largest ``z`` and
counts above top-k's first pivots (top-k's interval starts at every key, so it needs no maximum); 7 more top-k passes;
up to 8 top-p passes from top-k's key to one past the largest key, the first also summing the kept mass (top-p's limit;
it was a pass of its own), fewer where that interval is narrower than 2**32 keys (each pass divides it by 16; a program
stops when all its rows are one key); the draw. A program whose rows ask for no top-k reads the row for no top-k pass
after the first, one whose rows ask for no top-p (or whose top-k leaves one key) for no top-p pass. Each pass does 15
comparisons and reductions an element where a bisection step did one: fewer reads, more arithmetic. Why a search and
what it costs: ``docs/decisions/012-sampling-thresholds.md``.

Log-probabilities (``logprobs=True``): the first pass also sums ``exp(x - max)`` of the raw logits (online, the
sum rescaled as the maximum grows), the sampled token's logit is read once more, and the top ``n`` are found in
``n`` passes, each taking the largest (logit key, lowest id) below the previous one: ``n`` more reads of the row
(vLLM gathers them with a ``torch.topk``; a few passes suit the ``n`` of 0 to 20 engines serve).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import cdiv, interpreting, launch_device, next_power_of_2, program_rows
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.sample import SampleConfig, spec


@triton.jit
def _mix(x):
    # the spec's lowbias32 (lazyops.specs.sample._mix), in int64 masked to 32 bits: the same bits as torch's
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


@triton.jit
def _key(z):
    # a float's bits as an int ordered like the float (negatives' magnitude bits flipped), in 32 bits
    bits = z.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


# The searches. Each keeps an interval [lo, hi] of 64-bit keys holding the answer: the smallest key t of the
# interval at which a monotone predicate holds (top-k: fewer than k tokens above t; top-p: less than top_p of the
# kept mass above t). A pass evaluates the predicate at WAYS - 1 pivots splitting the interval into WAYS pieces of
# ``step = ceil(size / WAYS)`` keys, pivot j = lo + j * step - 1 (capped at hi); the predicate fails at the first
# f pivots and holds from pivot f + 1 on, so the answer lies in piece f: [lo + f * step, lo + (f + 1) * step - 1].
# A size of 2**32 is one key after ceil(32 / log2(WAYS)) passes.
#
# Why the keys are those of the bisection this replaced (32 halvings, ``mid = lo + (hi - lo) // 2``, kept the
# half where the predicate flips): both keep the smallest key of the interval at which the predicate holds inside
# their interval, so both end on that key. The predicate is the same function of t in both: top-k's counts are
# integers; top-p's mass above a pivot is summed with the bisection's expression and order (block by block, one
# ``tl.sum`` a block), so a float sum, monotone in the set summed since its terms are non-negative, is the same
# float. The bisection ran over [-2**31, top] (top: the largest z's key); where its predicate failed at top it
# walked on to top + 1, so it ended on the smallest key at which the predicate holds wherever that is at most
# top + 1: always for top-k (no key lies above top + 1 unless a maximum is NaN; a -0.0 maximum beside a +0.0 puts
# the +0.0 at top + 1), and for top-p wherever the kept mass is positive. Top-k searches every key; top-p from
# k_key (its threshold was max(lo, k_key)) to top + 1, where its predicate is taken to hold.


@triton.jit
def _step(lo, hi, WAYS: tl.constexpr):
    return (hi - lo + WAYS) // WAYS


@triton.jit
def _pivots(lo, hi, WAYS: tl.constexpr):
    # [ROWS, WAYS]: pivot j = lo + j * step - 1, capped at hi (pivot 0, lo - 1, is no pivot: the piece below lo)
    j = tl.arange(0, WAYS)[None, :].to(tl.int64)
    return tl.minimum(lo + j * _step(lo, hi, WAYS) - 1, hi)


@triton.jit
def _narrow(lo, hi, pivots, holds, WAYS: tl.constexpr):
    # the piece after the pivots where the predicate fails (pivot 0 counted as neither); a row of one key stays
    j = tl.arange(0, WAYS)[None, :]
    fails = tl.sum(((j > 0) & (pivots < hi) & ~holds).to(tl.int64), axis=1)[:, None]
    step = _step(lo, hi, WAYS)
    new_lo = lo + fails * step
    moving = lo < hi
    return tl.where(moving, new_lo, lo), tl.where(moving, tl.minimum(new_lo + step - 1, hi), hi)


@triton.jit
def _count_above(above, key, valid, lo, hi, WAYS: tl.constexpr):
    # column j of [ROWS, WAYS] += the tokens of this block above pivot j (keys in 32 bits: a pivot lies in [lo, hi])
    j = tl.arange(0, WAYS)[None, :]
    step = _step(lo, hi, WAYS)
    for way in tl.static_range(1, WAYS):
        pivot = tl.minimum(lo + way * step - 1, hi).to(tl.int32)
        count = tl.sum(((key > pivot) & valid).to(tl.int32), axis=1)[:, None]
        above = tl.where(j == way, above + count, above)
    return above


@triton.jit
def _mass_above(mass, e, key, min_p, k_key, lo, hi, WAYS: tl.constexpr):
    # column j of [ROWS, WAYS] += the kept mass of this block above pivot j, summed as the bisection summed it;
    # column 0 is the mass at or above lo, which in a search's first pass (lo = k_key) is the kept mass
    j = tl.arange(0, WAYS)[None, :]
    step = _step(lo, hi, WAYS)
    kept = (e >= min_p) & (key >= k_key.to(tl.int32))
    for way in tl.static_range(WAYS):
        if way == 0:
            counted = kept & (key >= lo.to(tl.int32))
        else:
            counted = kept & (key > tl.minimum(lo + way * step - 1, hi).to(tl.int32))
        mass = tl.where(j == way, mass + tl.sum(tl.where(counted, e, 0.0), axis=1)[:, None], mass)
    return mass


@triton.jit
def _scaled(logits_ptr, base, cols, inv_t, V: tl.constexpr):
    x = tl.load(logits_ptr + base + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
    return x, x * inv_t


@triton.jit(do_not_specialize=["M"])
def _sample_kernel(
    logits_ptr,
    temperature_ptr,
    top_k_ptr,
    top_p_ptr,
    min_p_ptr,
    seeds_ptr,
    offsets_ptr,
    out_ptr,
    logprob_ptr,
    top_values_ptr,
    top_ids_ptr,
    M,
    row_stride,
    V: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROWS: tl.constexpr,
    LOGPROB: tl.constexpr,
    TOP_N: tl.constexpr,
    WAYS: tl.constexpr,
    KEY_PASSES: tl.constexpr,
):
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    row = first + tl.minimum(lanes, count - 1).to(tl.int64)
    t = tl.load(temperature_ptr + row)
    inv_t = (1.0 / tl.where(t > 0, t, 1.0))[:, None]
    k = tl.load(top_k_ptr + row)
    k = tl.where((k <= 0) | (k > V), V + 1, k)
    p = tl.load(top_p_ptr + row)
    min_p = tl.load(min_p_ptr + row)[:, None]
    base = row[:, None] * row_stride

    # pass 1: the greedy token (ties to the lowest id), the largest z, and the counts above top-k's first pivots
    # (top-k's search needs no largest z: it starts at every key; see the comment on the searches)
    asks_k = tl.min(k) <= V  # no row of the program asks for top-k: its threshold stays the lowest key
    lo = tl.full([ROWS, 1], -(2**31), tl.int64)
    hi = tl.full([ROWS, 1], 2**31 - 1, tl.int64)
    above = tl.zeros([ROWS, WAYS], tl.int32)
    best = tl.full([ROWS], -float("inf"), tl.float32)
    best_id = tl.zeros([ROWS], tl.int64)
    z_max = tl.full([ROWS], -float("inf"), tl.float32)
    total = tl.zeros([ROWS], tl.float32)  # sum of exp(x - best), for the log-probabilities
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)[None, :]
        x, z = _scaled(logits_ptr, base, cols, inv_t, V)
        block_best = tl.max(x, axis=1)
        block_id = tl.min(tl.where(x == block_best[:, None], cols, V), axis=1).to(tl.int64)
        best_id = tl.where(block_best > best, block_id, best_id)
        if LOGPROB or TOP_N > 0:
            grown = tl.maximum(best, block_best)
            shift = tl.where(grown == -float("inf"), 0.0, grown)  # a row all -inf so far adds nothing
            total = total * tl.exp(best - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
        best = tl.maximum(best, block_best)
        z_max = tl.maximum(z_max, tl.max(z, axis=1))
        if asks_k:
            above = _count_above(above, _key(z), cols < V, lo, hi, WAYS)
    z_max = z_max[:, None]
    top = _key(z_max).to(tl.int64)

    # top-k: the smallest key t with fewer than k tokens above it
    lo, hi = _narrow(lo, hi, _pivots(lo, hi, WAYS), (above < k[:, None]), WAYS)
    for _search in range(KEY_PASSES - 1 if asks_k else 0):
        above = tl.zeros([ROWS, WAYS], tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)[None, :]
            _, z = _scaled(logits_ptr, base, cols, inv_t, V)
            above = _count_above(above, _key(z), cols < V, lo, hi, WAYS)
        lo, hi = _narrow(lo, hi, _pivots(lo, hi, WAYS), (above < k[:, None]), WAYS)
    k_key = lo

    # top-p, searched from k_key to one past the largest key: the smallest key t whose kept mass above it is below
    # top_p of the kept mass. Its first pass sums the kept mass too (the mass above its pivot 0, k_key - 1); a
    # program whose rows ask for no top-p (1.0 keeps every token of positive mass), or whose intervals are one key
    # each, reads the row no more.
    hi = tl.where(tl.min(p) < 1.0, tl.minimum(top + 1, 2**31 - 1), lo)
    limit = tl.full([ROWS, 1], -1.0, tl.float32)  # negative until the first pass sets it
    while tl.max(hi - lo) > 0:
        mass = tl.zeros([ROWS, WAYS], tl.float32)
        for start in range(0, V, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)[None, :]
            _, z = _scaled(logits_ptr, base, cols, inv_t, V)
            mass = _mass_above(mass, tl.exp(z - z_max), _key(z), min_p, k_key, lo, hi, WAYS)
        kept_mass = tl.sum(tl.where(tl.arange(0, WAYS)[None, :] == 0, mass, 0.0), axis=1)[:, None]
        limit = tl.where(limit < 0, p[:, None] * kept_mass, limit)
        pivots = _pivots(lo, hi, WAYS)
        lo, hi = _narrow(lo, hi, pivots, (mass < limit) | (pivots > top), WAYS)
    threshold = lo

    # the draw: the exponential race e / E over the kept tokens, E = -log(u), u hashed from (seed, offset, id)
    seeds = tl.load(seeds_ptr + row)
    offsets = tl.load(offsets_ptr + row)
    key1 = _mix(((offsets >> 32) & 0xFFFFFFFF) ^ 0x2545F491)
    key1 = _mix((offsets & 0xFFFFFFFF) ^ key1)
    key1 = _mix(((seeds >> 32) & 0xFFFFFFFF) ^ key1)
    key1 = _mix((seeds & 0xFFFFFFFF) ^ key1)
    key2 = _mix(key1 ^ 0x85EBCA6B)[:, None]
    key1 = key1[:, None]
    won = tl.full([ROWS], -1.0, tl.float32)
    won_id = tl.zeros([ROWS], tl.int64)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)[None, :]
        _, z = _scaled(logits_ptr, base, cols, inv_t, V)
        e = tl.exp(z - z_max)
        kept = (e >= min_p) & (_key(z) >= threshold) & (cols < V)
        bits = _mix(_mix(cols.to(tl.int64) ^ key1) ^ key2)
        u = ((bits >> 9) * 2 + 1).to(tl.float32) * 5.9604644775390625e-08
        score = tl.where(kept, e / -tl.log(u), -1.0)
        block_won = tl.max(score, axis=1)
        block_id = tl.min(tl.where(score == block_won[:, None], cols, V), axis=1).to(tl.int64)
        won_id = tl.where(block_won > won, block_id, won_id)
        won = tl.maximum(won, block_won)
    token = tl.where(t == 0, best_id, won_id)
    tl.store(out_ptr + row, token, mask=lanes < count)
    if LOGPROB or TOP_N > 0:  # vLLM's raw logprobs: log_softmax of the logits as given
        lse = best + tl.log(total)
        if LOGPROB:
            x_token = tl.load(logits_ptr + row * row_stride + token).to(tl.float32)
            tl.store(logprob_ptr + row, x_token - lse, mask=lanes < count)
        # the top n: each pass the largest (key, lowest id) strictly after the previous one in that order
        previous_key = tl.full([ROWS], 2**40, tl.int64)
        previous_id = tl.full([ROWS], -1, tl.int64)
        for rank in range(TOP_N):
            next_key = tl.full([ROWS], -(2**40), tl.int64)
            next_id = tl.full([ROWS], V, tl.int64)
            for start in range(0, V, BLOCK_V):
                cols = start + tl.arange(0, BLOCK_V)[None, :]
                x, _ = _scaled(logits_ptr, base, cols, inv_t, V)
                key = _key(x).to(tl.int64)
                after = (key < previous_key[:, None]) | ((key == previous_key[:, None]) & (cols > previous_id[:, None]))
                key = tl.where(after & (cols < V), key, -(2**40))
                block_key = tl.max(key, axis=1)
                block_id = tl.min(tl.where(key == block_key[:, None], cols, V), axis=1).to(tl.int64)
                better = (block_key > next_key) | ((block_key == next_key) & (block_id < next_id))
                next_id = tl.where(better, block_id, next_id)
                next_key = tl.where(better, block_key, next_key)
            x_next = tl.load(logits_ptr + row * row_stride + tl.minimum(next_id, V - 1)).to(tl.float32)
            tl.store(top_values_ptr + row * TOP_N + rank, x_next - lse, mask=lanes < count)
            tl.store(top_ids_ptr + row * TOP_N + rank, next_id, mask=lanes < count)
            previous_key, previous_id = next_key, next_id


#: Elements of one program's tile: a row block on the GPU; in the interpreter, many rows at once (its cost is per
#: operation, not per element).
TILE = 4096
INTERPRETER_TILE = 262144
#: Bits of the key a search pass settles: 2**SEARCH_BITS - 1 pivots a pass, ceil(32 / SEARCH_BITS) passes a search.
#: 1 is the bisection (32 passes of one pivot); 4 reads the row 8 times a search at 15 pivots a read.
SEARCH_BITS = 4


@spec.implementation(device_type=launch_device(_sample_kernel), strided_rows=True, writes_out=True)
def sample_tl(config: SampleConfig) -> Callable[..., None]:
    block = min(next_power_of_2(config.vocab), TILE)
    tile = INTERPRETER_TILE if interpreting(_sample_kernel) else TILE
    rows = max(1, tile // block) if block < TILE or interpreting(_sample_kernel) else 1
    rows = min(rows, 1024)
    launches = {
        (logprob, top): Launcher(
            _sample_kernel,
            {
                "V": config.vocab,
                "BLOCK_V": block,
                "ROWS": rows,
                "LOGPROB": logprob,
                "TOP_N": top,
                "WAYS": 2**SEARCH_BITS,
                "KEY_PASSES": cdiv(32, SEARCH_BITS),
            },
            num_warps=8 if block >= 2048 else 4,
        )
        for logprob in (False, True)
        for top in {0, config.top_n}
    }

    def sample(
        logits: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        seeds: torch.Tensor,
        offsets: torch.Tensor,
        logprob: torch.Tensor | None,
        top_logprobs: torch.Tensor | None,
        top_ids: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        m = logits.shape[0]
        write = logprob is not None and logprob.numel() > 0
        top = top_logprobs is not None and top_logprobs.numel() > 0 and top_ids is not None and top_ids.numel() > 0
        # a buffer left out: the kernel compiled without its stores is passed another pointer, never written
        launches[write, config.top_n if top else 0](
            (triton.cdiv(m, rows),),
            logits,
            temperature,
            top_k,
            top_p,
            min_p,
            seeds,
            offsets,
            out,
            logprob if write else out,
            top_logprobs if top else out,
            top_ids if top else out,
            m,
            logits.stride(0),
        )

    return sample
