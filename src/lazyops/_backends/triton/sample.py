"""Sampling (the spec: ``lazyops.specs.sample``): the thresholds of min-p, top-k and top-p without a sort.

Every filter keeps ``{i: z_i >= threshold}``. min-p's is a comparison with the row's maximum; top-k's and top-p's
are found by bisecting over the 32-bit ordered key of ``z`` (the float's bits, negatives flipped): 32 steps, each
a pass over the row counting the tokens (top-k) or summing the mass (top-p) above the midpoint. The draw is the
exponential race over the kept tokens with the spec's hashed uniforms. Rows of a program are bisected together.
Why a bisection and what it costs: ``docs/decisions/012-sampling-thresholds.md``.

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

from lazyops._backends.triton._common import interpreting, launch_device, next_power_of_2, program_rows
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
    # a float's bits as an int ordered like the float (negatives' magnitude bits flipped), in 64 bits
    bits = z.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)


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

    # pass 1: the greedy token (ties to the lowest id) and the largest z
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
    z_max = z_max[:, None]
    top = _key(z_max)

    # top-k: the smallest key t with fewer than k tokens above it
    lo = tl.full([ROWS, 1], -(2**31), tl.int64)
    hi = top
    searches = 32 if tl.min(k) <= V else 0  # no row of the program asks for top-k: its threshold stays the lowest
    for _search in range(searches):
        mid = lo + (hi - lo) // 2
        above = tl.zeros([ROWS, 1], tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)[None, :]
            _, z = _scaled(logits_ptr, base, cols, inv_t, V)
            above += tl.sum(((_key(z) > mid) & (cols < V)).to(tl.int32), axis=1)[:, None]
        fewer = above < k[:, None]
        hi = tl.where(fewer, mid, hi)
        lo = tl.where(fewer, lo, mid + 1)
    k_key = lo

    # the mass min-p and top-k keep
    kept_mass = tl.zeros([ROWS, 1], tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)[None, :]
        _, z = _scaled(logits_ptr, base, cols, inv_t, V)
        e = tl.exp(z - z_max)
        kept = (e >= min_p) & (_key(z) >= k_key)
        kept_mass += tl.sum(tl.where(kept, e, 0.0), axis=1)[:, None]
    limit = p[:, None] * kept_mass

    # top-p: the smallest key t whose kept mass above it is below top_p of the kept mass
    lo = tl.full([ROWS, 1], -(2**31), tl.int64)
    hi = top
    searches = 32 if tl.min(p) < 1.0 else 0  # no row asks for top-p (1.0 keeps every token of positive mass)
    for _search in range(searches):
        mid = lo + (hi - lo) // 2
        mass = tl.zeros([ROWS, 1], tl.float32)
        for start in range(0, V, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)[None, :]
            _, z = _scaled(logits_ptr, base, cols, inv_t, V)
            e = tl.exp(z - z_max)
            key = _key(z)
            counted = (e >= min_p) & (key >= k_key) & (key > mid)
            mass += tl.sum(tl.where(counted, e, 0.0), axis=1)[:, None]
        below = mass < limit
        hi = tl.where(below, mid, hi)
        lo = tl.where(below, lo, mid + 1)
    threshold = tl.maximum(lo, k_key)

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
                key = _key(x)
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


@spec.implementation(device_type=launch_device(_sample_kernel), strided_rows=True, writes_out=True)
def sample_tl(config: SampleConfig) -> Callable[..., None]:
    block = min(next_power_of_2(config.vocab), TILE)
    tile = INTERPRETER_TILE if interpreting(_sample_kernel) else TILE
    rows = max(1, tile // block) if block < TILE or interpreting(_sample_kernel) else 1
    rows = min(rows, 1024)
    launches = {
        (logprob, top): Launcher(
            _sample_kernel,
            {"V": config.vocab, "BLOCK_V": block, "ROWS": rows, "LOGPROB": logprob, "TOP_N": top},
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
