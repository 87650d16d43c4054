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
what it costs: ``docs/decisions/012-sampling-thresholds.md``; the split path (below) and what a GPU showed of it:
``docs/decisions/015-sampling-split-path.md``.

Log-probabilities (``logprobs=True``): the first pass also sums ``exp(x - max)`` of the raw logits (online, the
sum rescaled as the maximum grows), the sampled token's logit is read once more, and the top ``n`` are found in
``n`` passes, each taking the largest (logit key, lowest id) below the previous one: ``n`` more reads of the row
(vLLM gathers them with a ``torch.topk``; a few passes suit the ``n`` of 0 to 20 engines serve).

The one-program kernel takes the vocabulary at run time, unspecialized (``do_not_specialize``, as the row count): its
row loops have a run-time bound, so it compiles once per block size, dtype and log-probability variant (and whether
the row stride is a multiple of 16, as every row kernel), not per vocabulary (the GPU conformance draws vocabularies
of 2 to 300 a case; an engine has one). The split path's kernels (below) take it at compile time, with ``CHUNKS``,
which their folds unroll.

Two paths (issue 37). One program a row (above) leaves most of a GPU idle at a batch below its SM count: each row's
passes run one after another on one SM. There a call takes the **split path**: each row is cut into chunks, one of the
one-program kernel's blocks each (4096 elements on a GPU: 32 chunks a row at V = 128256), and each pass is one launch
over (rows, chunks), 18 launches whatever the parameters: the scan (pass 1, and each chunk's top ``n``), 7 top-k passes,
8 top-p passes, the draw, and a finish that folds each row's chunk winners into its token (and log-probabilities). A
program reads its chunk once a launch, and its row's partials from the launch before: the counts or masses above the
pivots (``[CHUNKS, 16]``, 2 KB a row at 32 chunks) and the interval (two keys) which that launch's chunk 0 wrote into a
slot of its own, so no launch reads what it writes and nothing is added atomically; a row that asks for nothing in a
pass (greedy, no top-k or top-p, a settled interval) reads no logits in it. The chunks' masses are added one by one in
the one-program kernel's order, each chunk's sum being that kernel's block sum, so both paths compute the same floats
and draw the same tokens (top-p included), and a row's token does not depend on the batch that picks the path. The top
``n`` log-probabilities: the scan finds each chunk's top ``n`` in its tile (the row's top ``n`` that lie in a chunk are
among its chunk's) and the finish merges a row's ``CHUNKS * n`` candidates in the one-program kernel's order, so both
paths write the same ids, and values ``x - lse`` within a rounding of the normaliser. What the split path does not take:
a top ``n`` whose candidates outnumber a block's elements (``n`` over 128 at 32 chunks: the finish holds them in one
tile), a row of one block, and batches of at least the SM count (``SPLIT_BELOW``). Scratch (about 33 KB a row at 32
chunks, every pass's counts and masses kept, and 16 bytes a candidate of the top ``n``: 10 KB at ``n = 20``) is
allocated per call on the logits' device; the path is chosen from shapes and the factory's flags, never from a value on
the device, so a call can be captured in a CUDA graph. It trades one SM's serial passes for 18 launches of a few µs
each; on an H100 (Triton 3.6) its pass kernel first took 110 µs a launch, a layout conversion of the chunk's tile per
pivot, which ``_row_value`` removes (decision 015; the fixed kernel's time is not yet measured).
``SPLIT_GROUP`` (off by default) also puts a batch of at least the SM count on the split path, a group of that many
rows at a time, so that every pass after a group's first reads its rows from L2; ``bench_kernels.py --sampling`` times
it beside the rule, which decides where the default should lie.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


#: A key below every float's (a 32-bit key widened to 64 bits): a column struck out of a top n, or one past V.
NO_KEY = tl.constexpr(-(2**40))


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
def _scaled(logits_ptr, base, cols, inv_t, V):
    # V, here and in _race, a plain parameter: the one-program kernel's run-time int, the split kernels' constexpr
    x = tl.load(logits_ptr + base + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
    return x, x * inv_t


@triton.jit
def _rows(M, ROWS: tl.constexpr):
    # the program's rows ([ROWS], in 64 bits; past M the last row again) and which of them are in M
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    return first + tl.minimum(lanes, count - 1).to(tl.int64), lanes < count


@triton.jit
def _inverse_temperature(t):
    # [ROWS, 1]: 1 / t, and 1 for a greedy row (t = 0), whose z is then its logits
    return (1.0 / tl.where(t > 0, t, 1.0))[:, None]


@triton.jit
def _race_keys(seeds, offsets):
    # the spec's two keys of a request's uniforms, from its seed and offset ([ROWS] -> two [ROWS, 1])
    key1 = _mix(((offsets >> 32) & 0xFFFFFFFF) ^ 0x2545F491)
    key1 = _mix((offsets & 0xFFFFFFFF) ^ key1)
    key1 = _mix(((seeds >> 32) & 0xFFFFFFFF) ^ key1)
    key1 = _mix((seeds & 0xFFFFFFFF) ^ key1)
    return key1[:, None], _mix(key1 ^ 0x85EBCA6B)[:, None]


@triton.jit
def _race(z, z_max, cols, min_p, threshold, key1, key2, V):
    # a block's winner of the exponential race e / E over its kept tokens, E = -log(u), u hashed from (seed,
    # offset, id), and its id (ties to the lowest); [ROWS] each, -1.0 where the block keeps nothing
    e = tl.exp(z - z_max)
    kept = (e >= min_p) & (_key(z) >= threshold) & (cols < V)
    bits = _mix(_mix(cols.to(tl.int64) ^ key1) ^ key2)
    u = ((bits >> 9) * 2 + 1).to(tl.float32) * 5.9604644775390625e-08
    score = tl.where(kept, e / -tl.log(u), -1.0)
    block_won = tl.max(score, axis=1)
    return block_won, tl.min(tl.where(score == block_won[:, None], cols, V), axis=1).to(tl.int64)


@triton.jit(do_not_specialize=["M", "V"])
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
    V,  # at run time, unspecialized: one binary for every vocabulary of a block size
    BLOCK_V: tl.constexpr,
    ROWS: tl.constexpr,
    LOGPROB: tl.constexpr,
    TOP_N: tl.constexpr,
    WAYS: tl.constexpr,
    KEY_PASSES: tl.constexpr,
):
    row, live = _rows(M, ROWS)
    t = tl.load(temperature_ptr + row)
    inv_t = _inverse_temperature(t)
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
    key1, key2 = _race_keys(tl.load(seeds_ptr + row), tl.load(offsets_ptr + row))
    won = tl.full([ROWS], -1.0, tl.float32)
    won_id = tl.zeros([ROWS], tl.int64)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)[None, :]
        _, z = _scaled(logits_ptr, base, cols, inv_t, V)
        block_won, block_id = _race(z, z_max, cols, min_p, threshold, key1, key2, V)
        won_id = tl.where(block_won > won, block_id, won_id)
        won = tl.maximum(won, block_won)
    token = tl.where(t == 0, best_id, won_id)
    tl.store(out_ptr + row, token, mask=live)
    if LOGPROB or TOP_N > 0:  # vLLM's raw logprobs: log_softmax of the logits as given
        lse = best + tl.log(total)
        if LOGPROB:
            x_token = tl.load(logits_ptr + row * row_stride + token).to(tl.float32)
            tl.store(logprob_ptr + row, x_token - lse, mask=live)
        # the top n: each pass the largest (key, lowest id) strictly after the previous one in that order
        previous_key = tl.full([ROWS], 2**40, tl.int64)
        previous_id = tl.full([ROWS], -1, tl.int64)
        for rank in range(TOP_N):
            next_key = tl.full([ROWS], NO_KEY, tl.int64)
            next_id = tl.full([ROWS], V, tl.int64)
            for start in range(0, V, BLOCK_V):
                cols = start + tl.arange(0, BLOCK_V)[None, :]
                x, _ = _scaled(logits_ptr, base, cols, inv_t, V)
                key = _key(x).to(tl.int64)
                after = (key < previous_key[:, None]) | ((key == previous_key[:, None]) & (cols > previous_id[:, None]))
                key = tl.where(after & (cols < V), key, NO_KEY)
                block_key = tl.max(key, axis=1)
                block_id = tl.min(tl.where(key == block_key[:, None], cols, V), axis=1).to(tl.int64)
                better = (block_key > next_key) | ((block_key == next_key) & (block_id < next_id))
                next_id = tl.where(better, block_id, next_id)
                next_key = tl.where(better, block_key, next_key)
            x_next = tl.load(logits_ptr + row * row_stride + tl.minimum(next_id, V - 1)).to(tl.float32)
            tl.store(top_values_ptr + row * TOP_N + rank, x_next - lse, mask=live)
            tl.store(top_ids_ptr + row * TOP_N + rank, next_id, mask=live)
            previous_key, previous_id = next_key, next_id


# -- the split path: each row's passes spread over programs ----------------------------------------------------------
# A call is a fixed sequence of launches over a grid (row blocks, CHUNKS), a chunk being one of the one-program
# kernel's blocks and a row block one row on a GPU (ROWS = 1: the one-program kernel's tile there) or many in the
# interpreter (whose cost is per operation): the scan, KEY_PASSES - 1 top-k passes, KEY_PASSES top-p passes and the
# draw, then the finish over rows. Each program reads the partials of its rows that the launch before wrote
# ([B, CHUNKS, WAYS] counts or masses, a few KB a row), reduces them to the interval that launch narrowed, and writes
# its own chunk's partials; chunk 0 also writes the interval into this launch's state slot ([B, 2]: lo, hi), which
# the next launch reads. No launch reads a buffer it writes, and nothing is added atomically.
KEYS, FIRST_MASS, MASS, DRAW = (tl.constexpr(phase) for phase in range(4))  # PHASE, read by the kernel


@triton.jit
def _split_rows(M, ROWS: tl.constexpr, CHUNKS: tl.constexpr, BLOCK_V: tl.constexpr):
    # program (row block, chunk)'s rows, which of them are in M, its chunk, the chunk's slot in each row's partials
    # ([ROWS]) and its columns ([1, BLOCK_V])
    row, live = _rows(M, ROWS)
    chunk = tl.program_id(1)
    return row, live, chunk, row * CHUNKS + chunk, chunk * BLOCK_V + tl.arange(0, BLOCK_V)[None, :]


@triton.jit
def _largest(key, ids, V: tl.constexpr):
    # [ROWS] each: the largest of each row's keys and the lowest of its ids there (ties to the lowest id)
    top = tl.max(key, axis=1)
    return top, tl.min(tl.where(key == top[:, None], ids, V), axis=1).to(tl.int64)


@triton.jit
def _fold(partials_ptr, row, mask, zero, CHUNKS: tl.constexpr, WAYS: tl.constexpr):
    # [ROWS, WAYS]: each row's partials added one chunk after another from zero, chunk 0 first. For top-p's masses
    # the order is the point: a chunk is a block of the one-program kernel and its partial that kernel's block sum
    # (the same tl.sum over the same [1, BLOCK_V] tile on a GPU), which that kernel adds to its running mass in this
    # order, so both paths compute the same floats, and a row's threshold and token do not depend on the path (which
    # the batch size picks). A tree over the chunks would round otherwise. Counts are integers: any order.
    j = tl.arange(0, WAYS)[None, :]
    total = zero
    for chunk in tl.static_range(CHUNKS):
        total += tl.load(partials_ptr + (row[:, None] * CHUNKS + chunk) * WAYS + j, mask=mask, other=0)
    return total


@triton.jit
def _fold_z_max(z_max_ptr, row, CHUNKS: tl.constexpr):
    # [ROWS, 1]: each row's largest z, its chunks' maxima taken in the one-program kernel's order (which of a -0.0
    # and a +0.0 is the maximum, and so the largest key, follows the order)
    z_max = tl.load(z_max_ptr + row * CHUNKS)
    for chunk in tl.static_range(1, CHUNKS):
        z_max = tl.maximum(z_max, tl.load(z_max_ptr + row * CHUNKS + chunk))
    return z_max[:, None]


@triton.jit
def _row_value(x, ROWS: tl.constexpr):
    # [ROWS, 1] as a program's row tile takes it. At one row a program (a GPU) the value becomes a scalar: Triton 3.6
    # gives a [1, 1] computed from the partials' loads a layout of its own and, broadcast against the [1, BLOCK_V]
    # tile, converts the broadcast tile through shared memory (each thread storing the whole block), once a pivot:
    # 44,791 lines of SASS and 16,417 shared stores for a MASS pass, 110 µs a launch on an H100 where the scan
    # took 5. A scalar broadcasts in any layout.
    if ROWS == 1:
        return tl.max(tl.reshape(x, [1]), axis=0)
    else:
        return x


@triton.jit
def _keep_state(state_ptr, row, live, chunk, lo, hi):
    # chunk 0 of each row writes the row's interval for the next launch (every chunk of the row computed the same)
    if chunk == 0:
        tl.store(state_ptr + row * 2, tl.reshape(lo, [lo.shape[0]]), mask=live)
        tl.store(state_ptr + row * 2 + 1, tl.reshape(hi, [hi.shape[0]]), mask=live)


@triton.jit(do_not_specialize=["M"])
def _split_scan_kernel(
    logits_ptr,
    temperature_ptr,
    top_k_ptr,
    best_ptr,
    best_id_ptr,
    z_max_ptr,
    total_ptr,
    counts_ptr,
    state_ptr,
    top_keys_ptr,
    top_ids_ptr,
    M,
    row_stride,
    V: tl.constexpr,
    BLOCK_V: tl.constexpr,
    CHUNKS: tl.constexpr,
    ROWS: tl.constexpr,
    WAYS: tl.constexpr,
    LOGPROB: tl.constexpr,
    TOP_N: tl.constexpr,
):
    # pass 1 over a chunk: its largest logit and that logit's first id, its largest z, its sum of exp(x - largest)
    # (for the log-probabilities), its top n (below), and its counts above top-k's first pivots; the search's first
    # interval
    row, live, chunk, partial, cols = _split_rows(M, ROWS, CHUNKS, BLOCK_V)
    t = tl.load(temperature_ptr + row)
    inv_t = _inverse_temperature(t)
    k = tl.load(top_k_ptr + row)
    x, z = _scaled(logits_ptr, row[:, None] * row_stride, cols, inv_t, V)
    best, best_id = _largest(x, cols, V)
    tl.store(best_ptr + partial, best, mask=live)
    tl.store(best_id_ptr + partial, best_id, mask=live)
    tl.store(z_max_ptr + partial, tl.max(z, axis=1), mask=live)
    if LOGPROB or TOP_N > 0:
        shift = tl.where(best == -float("inf"), 0.0, best)
        tl.store(total_ptr + partial, tl.sum(tl.exp(x - shift[:, None]), axis=1), mask=live)
    if TOP_N > 0:
        # the chunk's n largest (key, lowest id), the one-program kernel's order: a token of the row's top n is in
        # its chunk's, so the finish merges these [CHUNKS, n]. The chunk is in registers: each rank takes the
        # largest left and strikes it out. A chunk of fewer than n tokens pads with keys below every logit's.
        key = tl.where(cols < V, _key(x).to(tl.int64), NO_KEY)
        for rank in range(TOP_N):
            chunk_key, chunk_id = _largest(key, cols, V)
            tl.store(top_keys_ptr + partial * TOP_N + rank, chunk_key, mask=live)
            tl.store(top_ids_ptr + partial * TOP_N + rank, chunk_id, mask=live)
            key = tl.where(cols == chunk_id[:, None], NO_KEY, key)
    lo = tl.full([ROWS, 1], -(2**31), tl.int64)
    hi = tl.full([ROWS, 1], 2**31 - 1, tl.int64)
    asks = live & (k > 0) & (k <= V) & (t != 0)  # a greedy row or one without top-k counts nothing
    if tl.max(asks.to(tl.int32)) > 0:
        above = _count_above(tl.zeros([ROWS, WAYS], tl.int32), _key(z), cols < V, lo, hi, WAYS)
        tl.store(counts_ptr + partial[:, None] * WAYS + tl.arange(0, WAYS)[None, :], above, mask=asks[:, None])
    _keep_state(state_ptr, row, live, chunk, lo, hi)


@triton.jit(do_not_specialize=["M"])
def _split_pass_kernel(
    logits_ptr,
    temperature_ptr,
    top_k_ptr,
    top_p_ptr,
    min_p_ptr,
    seeds_ptr,
    offsets_ptr,
    z_max_ptr,
    state_ptr,
    next_state_ptr,
    k_state_ptr,
    partials_ptr,
    kept_ptr,
    out_ptr,
    out_id_ptr,
    M,
    row_stride,
    V: tl.constexpr,
    BLOCK_V: tl.constexpr,
    CHUNKS: tl.constexpr,
    ROWS: tl.constexpr,
    WAYS: tl.constexpr,
    PHASE: tl.constexpr,
):
    # A pass over a chunk: the interval of the launch before (state_ptr) narrowed by its partials (partials_ptr),
    # then this chunk's partials (out_ptr): counts above top-k's pivots (KEYS), masses above top-p's (FIRST_MASS,
    # the first, which also sets top-p's interval from top-k's key; MASS), or the race's winner and its id (DRAW, on
    # the final threshold). k_state_ptr is top-p's first slot (its lo: top-k's key); kept_ptr top-p's first masses
    # (column 0: the kept mass). Rows that ask for nothing this pass (greedy, no top-k, no top-p, or an interval of
    # one key) read no logits.
    # (the values that meet the chunk's tile pass through _row_value: scalars at one row a program)
    row, live, chunk, partial, cols = _split_rows(M, ROWS, CHUNKS, BLOCK_V)
    j = tl.arange(0, WAYS)[None, :]
    t = tl.load(temperature_ptr + row)
    inv_t = _row_value(_inverse_temperature(t), ROWS)
    base = row[:, None] * row_stride
    lo = tl.load(state_ptr + row * 2)[:, None]
    hi = tl.load(state_ptr + row * 2 + 1)[:, None]
    if PHASE <= FIRST_MASS:  # KEYS, FIRST_MASS: narrowed by counts (integers, added in any order)
        k = tl.load(top_k_ptr + row)
        asks = (live & (k > 0) & (k <= V) & (t != 0))[:, None]
        above = _fold(partials_ptr, row, asks, tl.zeros([ROWS, WAYS], tl.int32), CHUNKS, WAYS)
        lo, hi = _narrow(lo, hi, _pivots(lo, hi, WAYS), above < tl.where(asks, k[:, None], V + 1), WAYS)
        if PHASE == KEYS:  # noqa: SIM102 - a compile-time branch around a run-time one
            if tl.max(asks.to(tl.int32)) > 0:
                _, z = _scaled(logits_ptr, base, cols, inv_t, V)
                row_lo, row_hi = _row_value(lo, ROWS), _row_value(hi, ROWS)
                above = _count_above(tl.zeros([ROWS, WAYS], tl.int32), _key(z), cols < V, row_lo, row_hi, WAYS)
                tl.store(out_ptr + partial[:, None] * WAYS + j, above, mask=asks)
    if PHASE != KEYS:
        p = tl.load(top_p_ptr + row)[:, None]
        min_p = _row_value(tl.load(min_p_ptr + row)[:, None], ROWS)
        z_max = _row_value(_fold_z_max(z_max_ptr, row, CHUNKS), ROWS)
        top = _key(z_max).to(tl.int64)
        if PHASE == FIRST_MASS:  # top-p searches from top-k's key to one past the largest key
            k_key = lo
            hi = tl.where((p < 1.0) & (t != 0)[:, None], tl.minimum(top + 1, 2**31 - 1), lo)
        else:
            k_key = tl.load(k_state_ptr + row * 2)[:, None]
            moving = lo < hi
            mass = _fold(partials_ptr, row, moving, tl.zeros([ROWS, WAYS], tl.float32), CHUNKS, WAYS)
            kept = _fold(kept_ptr, row, moving & (j == 0), tl.zeros([ROWS, WAYS], tl.float32), CHUNKS, WAYS)
            limit = p * tl.sum(kept, axis=1)[:, None]
            pivots = _pivots(lo, hi, WAYS)
            lo, hi = _narrow(lo, hi, pivots, (mass < limit) | (pivots > top), WAYS)
        unsettled = live[:, None] & (lo < hi)
        if PHASE == DRAW:
            drawing = live & (t != 0)  # a greedy row's token is the scan's
            if tl.max(drawing.to(tl.int32)) > 0:
                key1, key2 = _race_keys(tl.load(seeds_ptr + row), tl.load(offsets_ptr + row))
                key1, key2 = _row_value(key1, ROWS), _row_value(key2, ROWS)
                _, z = _scaled(logits_ptr, base, cols, inv_t, V)
                won, won_id = _race(z, z_max, cols, min_p, _row_value(lo, ROWS), key1, key2, V)
                tl.store(out_ptr + partial, won, mask=drawing)
                tl.store(out_id_ptr + partial, won_id, mask=drawing)
        elif tl.max(unsettled.to(tl.int32)) > 0:
            _, z = _scaled(logits_ptr, base, cols, inv_t, V)
            row_lo, row_hi, row_k_key = _row_value(lo, ROWS), _row_value(hi, ROWS), _row_value(k_key, ROWS)
            e = tl.exp(z - z_max)
            mass = _mass_above(tl.zeros([ROWS, WAYS], tl.float32), e, _key(z), min_p, row_k_key, row_lo, row_hi, WAYS)
            tl.store(out_ptr + partial[:, None] * WAYS + j, mass, mask=unsettled)
    _keep_state(next_state_ptr, row, live, chunk, lo, hi)


@triton.jit(do_not_specialize=["M"])
def _split_finish_kernel(
    logits_ptr,
    temperature_ptr,
    best_ptr,
    best_id_ptr,
    total_ptr,
    won_ptr,
    won_id_ptr,
    top_keys_ptr,
    top_ids_ptr,
    out_ptr,
    logprob_ptr,
    top_values_ptr,
    top_out_ids_ptr,
    M,
    row_stride,
    V: tl.constexpr,
    CHUNKS: tl.constexpr,
    ROWS: tl.constexpr,
    LOGPROB: tl.constexpr,
    TOP_N: tl.constexpr,
    CANDIDATES: tl.constexpr,
):
    # each row's chunks folded in order, as the one-program kernel folds its blocks: the greedy token, the race's
    # winner (ties to the lowest id: an earlier chunk keeps a tie), log_softmax's normaliser, and the top n
    row, live = _rows(M, ROWS)
    t = tl.load(temperature_ptr + row)
    best = tl.full([ROWS], -float("inf"), tl.float32)
    best_id = tl.zeros([ROWS], tl.int64)
    won = tl.full([ROWS], -1.0, tl.float32)
    won_id = tl.zeros([ROWS], tl.int64)
    total = tl.zeros([ROWS], tl.float32)
    for chunk in tl.static_range(CHUNKS):
        partial = row * CHUNKS + chunk
        block_best = tl.load(best_ptr + partial)
        best_id = tl.where(block_best > best, tl.load(best_id_ptr + partial), best_id)
        if LOGPROB or TOP_N > 0:  # each chunk's sum of exp(x - its largest) rescaled to the running largest
            grown = tl.maximum(best, block_best)
            shift = tl.where(grown == -float("inf"), 0.0, grown)
            share = tl.load(total_ptr + partial) * tl.exp(block_best - shift)
            total = total * tl.exp(best - shift) + tl.where(block_best == -float("inf"), 0.0, share)
        best = tl.maximum(best, block_best)
        block_won = tl.load(won_ptr + partial, mask=t != 0, other=-1.0)
        won_id = tl.where(block_won > won, tl.load(won_id_ptr + partial, mask=t != 0, other=0), won_id)
        won = tl.maximum(won, block_won)
    token = tl.where(t == 0, best_id, won_id)
    tl.store(out_ptr + row, token, mask=live)
    if LOGPROB or TOP_N > 0:
        lse = best + tl.log(total)
        if LOGPROB:
            x_token = tl.load(logits_ptr + row * row_stride + token).to(tl.float32)
            tl.store(logprob_ptr + row, x_token - lse, mask=live)
        # the top n: the row's CHUNKS * n candidates (the scan's, padded to CANDIDATES with keys below every
        # logit's) taken largest first, ties to the lowest id, each struck out once taken; values and ids as the
        # one-program kernel writes them. top_n <= V, so n real candidates are always left.
        if TOP_N > 0:
            c = tl.arange(0, CANDIDATES)[None, :]
            at = row[:, None] * (CHUNKS * TOP_N) + c
            key = tl.load(top_keys_ptr + at, mask=c < CHUNKS * TOP_N, other=NO_KEY)
            ids = tl.load(top_ids_ptr + at, mask=c < CHUNKS * TOP_N, other=V)
            for rank in range(TOP_N):
                _, next_id = _largest(key, ids, V)
                x_next = tl.load(logits_ptr + row * row_stride + tl.minimum(next_id, V - 1)).to(tl.float32)
                tl.store(top_values_ptr + row * TOP_N + rank, x_next - lse, mask=live)
                tl.store(top_out_ids_ptr + row * TOP_N + rank, next_id, mask=live)
                key = tl.where(ids == next_id[:, None], NO_KEY, key)


#: Elements of one program's tile: a row block on the GPU; in the interpreter, many rows at once (its cost is per
#: operation, not per element).
TILE = 4096
INTERPRETER_TILE = 262144
#: In the interpreter a row is cut into about this many blocks of at least INTERPRETER_BLOCK elements, so that the
#: tests' vocabularies of a few hundred take the split path in a few chunks (a block more costs the interpreter a
#: pass's operations again).
INTERPRETER_CHUNKS = 4
INTERPRETER_BLOCK = 128
#: Streaming multiprocessors the interpreter is taken to have: batches below it take the split path, in one row
#: block a launch (on a GPU a program takes one row: the one-program kernel's tile).
INTERPRETER_SMS = 16
#: Rows of one program of the split path's last launch, which only folds partials.
FINISH_ROWS = 32
#: Calls of fewer rows than this take the split path (where a row spans blocks and its top ``n`` fit a block); None: the
#: GPU's SM count (INTERPRETER_SMS in the interpreter). Read when a factory builds: 0 keeps every call on the
#: one-program path, a large number puts every call on the split path (the tests compare the two).
SPLIT_BELOW: int | None = None
#: Rows of one group of the split path: a call of more rows runs the split path on one group after another, each
#: group's rows read from L2 in every pass after the first (a group of 128 rows at V = 128256 in float32 is 64 MB;
#: 256 rows' 128 MB would come from HBM 17 times). None: a call of at least ``SPLIT_BELOW`` rows takes one program a
#: row (the rule until a GPU says otherwise: ``bench_kernels.py --sampling``'s candidates time both). Read when a
#: factory builds.
SPLIT_GROUP: int | None = None
#: Bits of the key a search pass settles: 2**SEARCH_BITS - 1 pivots a pass, ceil(32 / SEARCH_BITS) passes a search.
#: 1 is the bisection (32 passes of one pivot); 4 reads the row 8 times a search at 15 pivots a read.
SEARCH_BITS = 4


@spec.implementation(device_type=launch_device(_sample_kernel), strided_rows=True, writes_out=True)
def sample_tl(config: SampleConfig) -> Callable[..., None]:
    """The sampler for ``config``. A call of fewer rows than the GPU has SMs takes the split path, when a row spans
    more than one block and the chunks' top ``n`` candidates fit one block's tile: one program a row would leave
    SMs idle while each runs its row's passes alone. Either path draws the same tokens (the comment on ``_fold``)."""
    if SPLIT_GROUP is not None and SPLIT_GROUP < 1:  # refused at every vocabulary, split or not (one block: never)
        raise ValueError(
            f"SPLIT_GROUP={SPLIT_GROUP}: a group of the split path is at least one row; None keeps a call of "
            "at least SPLIT_BELOW rows on one program a row"
        )
    interpret = interpreting(_sample_kernel)
    if interpret:
        block = min(
            next_power_of_2(config.vocab),
            max(INTERPRETER_BLOCK, next_power_of_2(cdiv(config.vocab, INTERPRETER_CHUNKS))),
        )
    else:
        block = min(next_power_of_2(config.vocab), TILE)
    tile = INTERPRETER_TILE if interpret else TILE
    rows = max(1, tile // block) if block < TILE or interpret else 1
    rows = min(rows, 1024)
    ways, passes = 2**SEARCH_BITS, cdiv(32, SEARCH_BITS)
    launches = {
        (logprob, top): Launcher(
            _sample_kernel,
            {
                "BLOCK_V": block,
                "ROWS": rows,
                "LOGPROB": logprob,
                "TOP_N": top,
                "WAYS": ways,
                "KEY_PASSES": passes,
            },
            num_warps=8 if block >= 2048 else 4,
        )
        for logprob in (False, True)
        for top in {0, config.top_n}
    }
    chunks = cdiv(config.vocab, block)
    split = None
    # the finish merges a row's CHUNKS * n top-n candidates in one tile: at most a block's (n <= 128 at 32 chunks)
    if chunks > 1 and chunks * config.top_n <= block:
        below = SPLIT_BELOW
        if below is None:
            below = INTERPRETER_SMS if interpret else torch.cuda.get_device_properties().multi_processor_count
        split = _SplitPath(config, block, chunks, below, INTERPRETER_SMS if interpret else 1, SPLIT_GROUP)

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
        requests = (logits, temperature, top_k, top_p, min_p, seeds, offsets)
        if split is not None and m > 0 and (m < split.below or split.group):
            run = split if split.group is None or m <= split.group else split.in_groups
            run(*requests, logprob if write else None, top_logprobs if top else None, top_ids if top else None, out)
            return
        # a buffer left out: the kernel compiled without its stores is passed another pointer, never written
        launches[write, config.top_n if top else 0](
            (triton.cdiv(m, rows),),
            *requests,
            out,
            logprob if write else out,
            top_logprobs if top else out,
            top_ids if top else out,
            m,
            logits.stride(0),
            config.vocab,
        )

    return sample


class _SplitPath:
    """The split path's launches for one configuration (see the comment on the split kernels): a call allocates
    its scratch on the logits' device (sized by the batch: graph-safe with torch's caching allocator) and runs
    ``2 * KEY_PASSES + 2`` launches, whatever the parameters; a program with nothing to do in a pass reads its
    row's state and returns."""

    def __init__(
        self, config: SampleConfig, block: int, chunks: int, below: int, rows: int, group: int | None = None
    ) -> None:
        self.below, self.chunks, self.rows, self.group = below, chunks, rows, group
        self.top_n = config.top_n
        self.finish_rows = max(rows, FINISH_ROWS)
        self.ways, self.passes = 2**SEARCH_BITS, cdiv(32, SEARCH_BITS)
        shape = {"V": config.vocab, "BLOCK_V": block, "CHUNKS": chunks, "ROWS": rows, "WAYS": self.ways}
        warps = 8 if block >= 2048 else 4
        tops = {0, config.top_n}
        self.scan = {
            (logprob, top): Launcher(_split_scan_kernel, {**shape, "LOGPROB": logprob, "TOP_N": top}, num_warps=warps)
            for logprob in (False, True)
            for top in tops
        }
        self.phase = {
            phase: Launcher(_split_pass_kernel, {**shape, "PHASE": phase.value}, num_warps=warps)
            for phase in (KEYS, FIRST_MASS, MASS, DRAW)
        }
        # the finish takes the split launches' rows when it merges the top n (a [ROWS, CANDIDATES] tile of keys and
        # ids: one row a program on a GPU), FINISH_ROWS when it only folds partials
        self.finish = {
            (logprob, top): Launcher(
                _split_finish_kernel,
                {
                    "V": config.vocab,
                    "CHUNKS": chunks,
                    "ROWS": rows if top else self.finish_rows,
                    "LOGPROB": logprob,
                    "TOP_N": top,
                    "CANDIDATES": next_power_of_2(chunks * top) if top else 1,
                },
            )
            for logprob in (False, True)
            for top in tops
        }

    def in_groups(self, *tensors: Any) -> None:
        """A call's tensors (``__call__``'s arguments, each indexed by row first; a buffer left out: None) run
        ``group`` rows at a time, each group on views of them (a row's token is its own). Apart from ``__call__``,
        so that a call of one group pays no frame more."""
        m = tensors[0].shape[0]
        group = self.group or m
        for first in range(0, m, group):
            rows = slice(first, first + group)
            views: list[Any] = [None if tensor is None else tensor[rows] for tensor in tensors]
            self(*views)

    def __call__(
        self,
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
        m, chunks, passes, device = logits.shape[0], self.chunks, self.passes, logits.device
        # scan: each chunk's largest logit, largest z, exp sum and race winner; ids: the largest's and the winner's
        scan = torch.empty((4, m, chunks), dtype=torch.float32, device=device)
        ids = torch.empty((2, m, chunks), dtype=torch.int64, device=device)
        top = self.top_n if top_logprobs is not None and top_ids is not None else 0
        # each chunk's top n keys and ids; a call leaving the buffers out passes ids, never read
        candidates = torch.empty((2, m, chunks, top), dtype=torch.int64, device=device) if top else ids
        counts = torch.empty((passes, m, chunks, self.ways), dtype=torch.int32, device=device)
        masses = torch.empty((passes, m, chunks, self.ways), dtype=torch.float32, device=device)
        # a slot a launch: each row's interval (lo, hi) after it; top-p's first is top-k's key, the last the threshold
        state = torch.empty((2 * passes + 1, m, 2), dtype=torch.int64, device=device)
        stride = logits.stride(0)
        grid = (-(-m // self.rows), chunks)
        write = logprob is not None
        self.scan[write, top](
            grid,
            logits,
            temperature,
            top_k,
            scan[0],
            ids[0],
            scan[1],
            scan[2],
            counts[0],
            state[0],
            candidates[0],
            candidates[1],
            m,
            stride,
        )
        # (phase, the partials it reads, those it writes); loops, not comprehensions: a comprehension is a frame
        steps = []
        for i in range(1, passes):
            steps.append((KEYS, counts[i - 1], counts[i]))
        steps.append((FIRST_MASS, counts[-1], masses[0]))
        for i in range(1, passes):
            steps.append((MASS, masses[i - 1], masses[i]))
        steps.append((DRAW, masses[-1], scan[3]))
        params = (logits, temperature, top_k, top_p, min_p, seeds, offsets, scan[1])
        for slot, (phase, partials, written) in enumerate(steps, 1):
            self.phase[phase](
                grid,
                *params,
                state[slot - 1],
                state[slot],
                state[passes],
                partials,
                masses[0],
                written,
                ids[1],
                m,
                stride,
            )
        # a buffer left out: the finish compiled without its stores is passed another pointer, never written
        self.finish[write, top](
            (-(-m // (self.rows if top else self.finish_rows)),),
            logits,
            temperature,
            scan[0],
            ids[0],
            scan[2],
            scan[3],
            ids[1],
            candidates[0],
            candidates[1],
            out,
            logprob if write else out,
            top_logprobs if top else out,
            top_ids if top else out,
            m,
            stride,
        )
