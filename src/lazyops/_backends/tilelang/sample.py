"""Sampling in TileLang (the spec: ``lazyops.specs.sample``): Triton's algorithm, pass for pass, and its hash.

A thread block owns ``rows`` whole rows and walks each row in passes of ``cols`` tokens (a row of ``V <= 4096``
is one pass, and several rows share a block). Every filter keeps ``{i: z_i >= threshold}``: min-p compares
``exp(z - z_max)`` with ``min_p``; top-k's and top-p's thresholds are found by bisecting over the 32-bit ordered
key of ``z`` (the float's bits, negatives' magnitude flipped), 32 passes each, counting the tokens (top-k) or
summing the kept mass (top-p) above the midpoint; a block none of whose rows asks for top-k (or top-p) skips
those passes. The draw is the exponential race ``argmax(e / -log(u))`` over the kept tokens. Why a bisection and
what it costs (up to 67 reads of a row): ``docs/decisions/012-sampling-thresholds.md``.

Each lane of the block keeps its own running result across the passes (the largest value and its first id, a
count, a sum), and the lanes are reduced once a pass: a block reduction a pass, not one per ``cols`` tokens.

**The same draws as Triton's.** The uniforms are the spec's hash, bit for bit: lowbias32 of (seed, offset, token
id), written here in uint32 arithmetic (a product wraps at 2**32 where torch and Triton mask an int64 one: the
same bits). The thresholds are the same keys found by the same bisection, ``z`` is ``x * (1 / t)`` as in Triton
and greedy and the race take the lowest id of a tie. So for the same float32 logits the tokens are Triton's (and
the torch backend's) except where a sum or an exponential rounds differently: the counts are exact, but the kept
mass is summed lane by lane here and block by block in Triton, and ``exp``/``log`` are CUDA's ``exp2f``/``logf``
against Triton's approximate instructions, so a top-p or min-p boundary, or two races, within a rounding of each
other can part them (``tests/kernels/test_sample.py::test_the_backends_draw_the_same_tokens`` holds them equal
on its fixed draw). One difference is deliberate: a row without top-p keeps every token whatever the other rows
of its block ask, where Triton's program bisects all its rows once one asks, which can cut a top-p-free row's
tokens too small to change a float32 sum of its mass (its draw would then depend on the batch around it).

Log-probabilities (``logprobs=True``): the first pass also sums ``exp(x - max)`` of the raw logits per lane
(rescaled as the lane's maximum grows), the sampled token's logit is read once more, and the top ``n`` are found in
``n`` passes, each taking the largest (key, lowest id) after the previous one, as Triton does. Four program
variants (with or without the sampled token's log-probability, with or without the top ``n``); a variant without
a buffer is passed a placeholder it never writes.

Declined (to Triton): a vocabulary over 2**24 tokens (the top-k counts are float32 sums, exact below it; the spec
asks for 262144). What a GPU must still confirm: nothing here has run on one. CI lowers every variant for
sm_90a (``tests/kernels/test_tilelang_lowering.py``); TileLang 0.1.15 cannot run it on the CPU (``target="c"``
lowers no block reduction of a fragment). ``make gpu-sampling-check`` runs the kit and ``tests/kernels/test_sample.py``
over it on a GPU.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func.

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._rows import next_power_of_two, vector_elements
from lazyops._backends.tilelang._runtime import (
    ALIGNMENT,
    F32,
    INDEX,
    compiled,
    direct,
    refuse_unsupported,
    tl_dtype,
)
from lazyops.specs.sample import SampleConfig, spec

#: Tokens a block holds a pass (``rows * cols``), over ``THREADS`` threads: 16 a thread, as Triton's 4096 over 8
#: warps.
TILE = 4096
THREADS = 256
#: Rows a block of a narrow vocabulary: the top-k and top-p passes are skipped only when no row of the block asks
#: for them, so a block of many rows would rarely skip them.
MAX_ROWS = 32
#: The widest vocabulary served: the top-k counts are float32 sums, exact up to 2**24.
MAX_VOCAB = 2**24
#: exp(x) = exp2(x * log2(e)), as Triton lowers ``tl.exp``.
LOG2E = 1.4426950408889634
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
#: The spec's hash constants (``lazyops._backends.torch.sample``).
MIX_1, MIX_2 = 0x7FEB352D, 0x846CA68B
OFFSET_SALT, SECOND_SALT = 0x2545F491, 0x85EBCA6B
#: The program variants: (the sampled token's log-probability, the top ``n``).
PLAIN = (False, False)


@dataclass(frozen=True)
class SamplePlan:
    rows: int  #: rows a block
    cols: int  #: tokens of a row a pass (a power of two; lanes past V are masked)
    threads: int
    chunks: int  #: passes over ``cols`` that cover a row


def plan_sampling(vocab: int) -> SamplePlan:
    cols = min(next_power_of_two(vocab), TILE)
    rows = min(max(1, TILE // cols), MAX_ROWS)
    threads = min(THREADS, max(32, rows * cols // 16))
    return SamplePlan(rows, cols, threads, -(-vocab // cols))


def lane_layout(plan: SamplePlan, vec: int) -> Any:
    """Where the block's ``[rows, cols]`` lanes live: runs of ``vec`` tokens of a row (16 bytes of the logits) dealt
    to the threads in turn, so that a pass reads each row in vectors, coalesced. Fixed, not inferred: left to
    TileLang 0.1.15, the layout of a program without log-probabilities put a whole row in every thread when a block
    holds several rows."""
    from tilelang.layout import Fragment

    def forward(i: Any, j: Any) -> tuple[Any, Any]:
        flat = i * plan.cols + j
        return (flat // vec) % plan.threads, flat // (vec * plan.threads) * vec + flat % vec

    return Fragment((plan.rows, plan.cols), forward_fn=forward)


@T.macro
def _mix(x: Any) -> Any:
    """The spec's lowbias32 in uint32: a product wraps at 2**32 where torch and Triton mask an int64 one."""
    h = x ^ (x >> T.uint32(16))
    h = h * T.uint32(MIX_1)
    h = h ^ (h >> T.uint32(15))
    h = h * T.uint32(MIX_2)
    return h ^ (h >> T.uint32(16))


@T.macro
def _key(z: Any) -> Any:
    """A float32's bits as an int32 ordered like the float (negatives' magnitude bits flipped)."""
    bits = T.reinterpret(z, "int32")
    return T.if_then_else(bits < 0, bits ^ INT32_MAX, bits)


def sample_program(vocab: int, dtype: str, logprob: bool = False, top_n: int = 0) -> Any:
    """The TileLang program ``main(logits, temperature, top_k, top_p, min_p, seeds, offsets, out, logprob,
    top_logprobs, top_ids)`` for a dynamic request count ``M``: ``logits[M, vocab]`` at a row stride, the parameters
    and ``out`` ``[M]``, ``logprob`` ``[M]`` (written where ``logprob``), ``top_logprobs``/``top_ids``
    ``[M, max(top_n, 1)]`` (written where ``top_n``)."""
    plan = plan_sampling(vocab)
    rows, cols, chunks = plan.rows, plan.cols, plan.chunks
    width = max(top_n, 1)
    sums = logprob or top_n > 0  # the log-sum-exp of the raw logits
    M = T.dynamic("M", INDEX)
    x_stride = T.dynamic("x_stride", INDEX)
    vec = vector_elements(vocab, dtype)
    neg_inf = -T.infinity(F32)
    layout = lane_layout(plan, vec)

    def logit(logits: Any, request: Any, col: Any) -> Any:
        # a lane past the row reads nothing and holds -inf
        return T.if_then_else(col < vocab, T.cast(logits[request, col], F32), neg_inf)

    @T.prim_func
    def main(
        logits: T.StridedTensor((M, vocab), (x_stride, 1), dtype),
        temperature: T.Tensor((M,), F32),
        top_k: T.Tensor((M,), "int64"),
        top_p: T.Tensor((M,), F32),
        min_p: T.Tensor((M,), F32),
        seeds: T.Tensor((M,), "int64"),
        offsets: T.Tensor((M,), "int64"),
        out: T.Tensor((M,), "int64"),
        logprob_out: T.Tensor((M,), F32),
        top_values: T.Tensor((M, width), F32),
        top_ids: T.Tensor((M, width), "int64"),
    ):
        T.assume(x_stride % vec == 0)
        with T.Kernel(T.ceildiv(M, rows), threads=plan.threads) as block:
            # each lane's running result across the passes (reduced over the lanes once a pass)
            lane_value = T.alloc_fragment((rows, cols), F32)
            lane_id = T.alloc_fragment((rows, cols), "int32")
            lane_sum = T.alloc_fragment((rows, cols), F32)
            # a row's parameters and results
            inv_t = T.alloc_fragment((rows,), F32)
            k = T.alloc_fragment((rows,), "int32")
            floor = T.alloc_fragment((rows,), F32)  # min_p
            best = T.alloc_fragment((rows,), F32)
            best_id = T.alloc_fragment((rows,), "int32")
            z_max = T.alloc_fragment((rows,), F32)
            total = T.alloc_fragment((rows,), F32)
            lo = T.alloc_fragment((rows,), "int64")
            hi = T.alloc_fragment((rows,), "int64")
            mid = T.alloc_fragment((rows,), "int32")
            k_key = T.alloc_fragment((rows,), "int32")
            threshold = T.alloc_fragment((rows,), "int32")
            limit = T.alloc_fragment((rows,), F32)
            reduced = T.alloc_fragment((rows,), F32)
            reduced_id = T.alloc_fragment((rows,), "int32")
            key1 = T.alloc_fragment((rows,), "uint32")
            key2 = T.alloc_fragment((rows,), "uint32")
            if top_n:
                lane_key = T.alloc_fragment((rows, cols), "int32")
                previous_key = T.alloc_fragment((rows,), "int32")
                previous_id = T.alloc_fragment((rows,), "int32")
                reduced_key = T.alloc_fragment((rows,), "int32")
            lanes = {lane_value: layout, lane_id: layout, lane_sum: layout}
            if top_n:
                lanes[lane_key] = layout
            T.annotate_layout(lanes)
            asks_top_k = T.alloc_var("int32", init=0)
            asks_top_p = T.alloc_var("int32", init=0)

            for r in T.serial(rows):  # rows past M repeat the last one, as in every loop below
                request = T.min(block * rows + r, M - 1)
                if top_k[request] >= 1 and top_k[request] <= vocab:
                    asks_top_k = 1
                if top_p[request] < T.float32(1):
                    asks_top_p = 1

            # pass 1: the greedy token (ties to the lowest id), the row's maximum, and each lane's sum of exp(x - max)
            T.fill(lane_value, neg_inf)
            T.clear(lane_id)
            T.clear(lane_sum)
            for c in T.serial(chunks):
                for i, j in T.Parallel(rows, cols):
                    col = c * cols + j
                    x = logit(logits, T.min(block * rows + i, M - 1), col)
                    if sums:
                        grown = T.max(lane_value[i, j], x)
                        lane_sum[i, j] = T.if_then_else(
                            grown == neg_inf,  # a lane all -inf so far adds nothing
                            T.float32(0),
                            lane_sum[i, j] * T.exp2((lane_value[i, j] - grown) * LOG2E) + T.exp2((x - grown) * LOG2E),
                        )
                    lane_id[i, j] = T.if_then_else(x > lane_value[i, j], col, lane_id[i, j])
                    lane_value[i, j] = T.max(lane_value[i, j], x)
            T.reduce_max(lane_value, best, dim=1)
            if sums:
                for i, j in T.Parallel(rows, cols):
                    lane_sum[i, j] = T.if_then_else(
                        lane_value[i, j] == neg_inf,
                        T.float32(0),
                        lane_sum[i, j] * T.exp2((lane_value[i, j] - best[i]) * LOG2E),
                    )
                T.reduce_sum(lane_sum, total, dim=1)
            for i, j in T.Parallel(rows, cols):
                lane_id[i, j] = T.if_then_else(lane_value[i, j] == best[i], lane_id[i, j], vocab)
            T.reduce_min(lane_id, best_id, dim=1)
            # the row's parameters, in the loop over the reduced maximum: so laid out as it is, where each row's lanes
            # are (read first, their layout would be inferred alone, and could hold a whole row in each thread)
            for i in T.Parallel(rows):
                request = T.min(block * rows + i, M - 1)
                t = temperature[request]
                inv_t[i] = T.float32(1) / T.if_then_else(t > T.float32(0), t, T.float32(1))
                asked = top_k[request]
                k[i] = T.if_then_else(asked <= 0 or asked > vocab, vocab + 1, T.cast(asked, "int32"))
                floor[i] = min_p[request]
                z_max[i] = best[i] * inv_t[i]  # max(x * s) exactly: rounding x * s is monotonic in x for s > 0
                lo[i] = INT32_MIN
                hi[i] = T.cast(_key(z_max[i]), "int64")
                if top_n:  # before the first of the top n: every token
                    previous_key[i] = INT32_MAX
                    previous_id[i] = -1

            # top-k: the smallest key t with fewer than k tokens above it (no row asks: the lowest key, all kept)
            if asks_top_k != 0:
                for _step in T.serial(32):
                    for i in T.Parallel(rows):
                        mid[i] = T.cast(lo[i] + ((hi[i] - lo[i]) >> 1), "int32")
                    T.clear(lane_sum)
                    for c in T.serial(chunks):
                        for i, j in T.Parallel(rows, cols):
                            col = c * cols + j
                            z = logit(logits, T.min(block * rows + i, M - 1), col) * inv_t[i]
                            key = _key(z)
                            above = col < vocab and key > mid[i]
                            lane_sum[i, j] += T.if_then_else(above, T.float32(1), T.float32(0))
                    T.reduce_sum(lane_sum, reduced, dim=1)
                    for i in T.Parallel(rows):
                        fewer = reduced[i] < T.cast(k[i], F32)
                        hi[i] = T.if_then_else(fewer, T.cast(mid[i], "int64"), hi[i])
                        lo[i] = T.if_then_else(fewer, lo[i], T.cast(mid[i], "int64") + 1)
            for i in T.Parallel(rows):
                k_key[i] = T.cast(lo[i], "int32")

            # the mass min-p and top-k keep
            T.clear(lane_sum)
            for c in T.serial(chunks):
                for i, j in T.Parallel(rows, cols):
                    col = c * cols + j
                    z = logit(logits, T.min(block * rows + i, M - 1), col) * inv_t[i]
                    e = T.exp2((z - z_max[i]) * LOG2E)
                    key = _key(z)
                    kept = col < vocab and e >= floor[i] and key >= k_key[i]
                    lane_sum[i, j] += T.if_then_else(kept, e, T.float32(0))
            T.reduce_sum(lane_sum, reduced, dim=1)
            for i in T.Parallel(rows):
                limit[i] = top_p[T.min(block * rows + i, M - 1)] * reduced[i]
                lo[i] = INT32_MIN
                hi[i] = T.cast(_key(z_max[i]), "int64")

            # top-p: the smallest key t whose kept mass above it is below top_p of the kept mass
            if asks_top_p != 0:
                for _step in T.serial(32):
                    for i in T.Parallel(rows):
                        mid[i] = T.cast(lo[i] + ((hi[i] - lo[i]) >> 1), "int32")
                    T.clear(lane_sum)
                    for c in T.serial(chunks):
                        for i, j in T.Parallel(rows, cols):
                            col = c * cols + j
                            z = logit(logits, T.min(block * rows + i, M - 1), col) * inv_t[i]
                            e = T.exp2((z - z_max[i]) * LOG2E)
                            key = _key(z)
                            counted = col < vocab and e >= floor[i] and key >= k_key[i] and key > mid[i]
                            lane_sum[i, j] += T.if_then_else(counted, e, T.float32(0))
                    T.reduce_sum(lane_sum, reduced, dim=1)
                    for i in T.Parallel(rows):
                        below = reduced[i] < limit[i]
                        hi[i] = T.if_then_else(below, T.cast(mid[i], "int64"), hi[i])
                        lo[i] = T.if_then_else(below, lo[i], T.cast(mid[i], "int64") + 1)
            for i in T.Parallel(rows):
                request = T.min(block * rows + i, M - 1)
                # a row without top-p keeps every token whatever the block's other rows ask: bisected with them, the
                # tokens too small to change a float32 sum of its mass would be cut
                top_p_key = T.if_then_else(top_p[request] < T.float32(1), T.cast(lo[i], "int32"), INT32_MIN)
                threshold[i] = T.max(top_p_key, k_key[i])
                first = _mix(T.cast(offsets[request] >> 32, "uint32") ^ T.uint32(OFFSET_SALT))
                first = _mix(T.cast(offsets[request], "uint32") ^ first)
                first = _mix(T.cast(seeds[request] >> 32, "uint32") ^ first)
                first = _mix(T.cast(seeds[request], "uint32") ^ first)
                key1[i] = first
                key2[i] = _mix(first ^ T.uint32(SECOND_SALT))

            # the draw: the exponential race e / E over the kept tokens, E = -log(u), u hashed from (seed, offset, id)
            T.fill(lane_value, T.float32(-1))
            T.clear(lane_id)
            for c in T.serial(chunks):
                for i, j in T.Parallel(rows, cols):
                    col = c * cols + j
                    z = logit(logits, T.min(block * rows + i, M - 1), col) * inv_t[i]
                    e = T.exp2((z - z_max[i]) * LOG2E)
                    key = _key(z)
                    kept = col < vocab and e >= floor[i] and key >= threshold[i]
                    bits = _mix(_mix(T.cast(col, "uint32") ^ key1[i]) ^ key2[i])
                    u = T.cast((bits >> T.uint32(9)) * T.uint32(2) + T.uint32(1), F32) * T.float32(2.0**-24)
                    score = T.if_then_else(kept, e / -T.log(u), T.float32(-1))
                    lane_id[i, j] = T.if_then_else(score > lane_value[i, j], col, lane_id[i, j])
                    lane_value[i, j] = T.max(lane_value[i, j], score)
            T.reduce_max(lane_value, reduced, dim=1)
            for i, j in T.Parallel(rows, cols):
                lane_id[i, j] = T.if_then_else(lane_value[i, j] == reduced[i], lane_id[i, j], vocab)
            T.reduce_min(lane_id, reduced_id, dim=1)
            for i in T.Parallel(rows):
                request = block * rows + i
                greedy = temperature[T.min(request, M - 1)] == T.float32(0)
                # within the row whatever the logits (a NaN matches no lane's value)
                token = T.min(T.if_then_else(greedy, best_id[i], reduced_id[i]), vocab - 1)
                if request < M:
                    out[request] = T.cast(token, "int64")
                    if logprob:  # vLLM's raw logprobs: log_softmax of the logits as given
                        logprob_out[request] = T.cast(logits[request, token], F32) - (best[i] + T.log(total[i]))

            if top_n:
                # each pass the largest (key, lowest id) strictly after the previous one in that order
                for rank in T.serial(top_n):
                    T.fill(lane_key, INT32_MIN)
                    T.fill(lane_id, vocab)
                    for c in T.serial(chunks):
                        for i, j in T.Parallel(rows, cols):
                            col = c * cols + j
                            key = _key(logit(logits, T.min(block * rows + i, M - 1), col))
                            after = key < previous_key[i] or (key == previous_key[i] and col > previous_id[i])
                            take = col < vocab and after and key > lane_key[i, j]
                            lane_id[i, j] = T.if_then_else(take, col, lane_id[i, j])
                            lane_key[i, j] = T.if_then_else(take, key, lane_key[i, j])
                    T.reduce_max(lane_key, reduced_key, dim=1)
                    for i, j in T.Parallel(rows, cols):
                        lane_id[i, j] = T.if_then_else(lane_key[i, j] == reduced_key[i], lane_id[i, j], vocab)
                    T.reduce_min(lane_id, reduced_id, dim=1)
                    for i in T.Parallel(rows):
                        request = block * rows + i
                        if request < M:
                            x_next = T.cast(logits[request, T.min(reduced_id[i], vocab - 1)], F32)
                            top_values[request, rank] = x_next - (best[i] + T.log(total[i]))
                            top_ids[request, rank] = T.cast(reduced_id[i], "int64")
                    for i in T.Parallel(rows):  # apart from the stores, which one thread makes
                        previous_key[i] = reduced_key[i]
                        previous_id[i] = reduced_id[i]

    return main


def variants(config: SampleConfig) -> tuple[tuple[bool, bool], ...]:
    """The (log-probability, top ``n``) variants a factory compiles: a call may leave any buffer out."""
    if not config.logprobs:
        return (PLAIN,)
    return tuple((logprob, top) for logprob in (False, True) for top in ((False, True) if config.top_n else (False,)))


def unsupported(config: SampleConfig) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does)."""
    if config.vocab > MAX_VOCAB:
        return f"vocab={config.vocab} is over {MAX_VOCAB}: the top-k counts are float32 sums, exact up to 2**24"
    return None


def programs(config: SampleConfig) -> dict[Any, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant (log-probability, top ``n``)."""
    refuse_unsupported(spec.name, config, unsupported(config))
    dtype = tl_dtype(config.dtype)

    def build(logprob: bool, top: bool) -> Callable[[], Any]:
        return lambda: sample_program(config.vocab, dtype, logprob, config.top_n if top else 0)

    return {variant: build(*variant) for variant in variants(config)}


def sample_launch(config: SampleConfig, kernels: dict[tuple[bool, bool], Any]) -> Callable[..., None]:
    """The launch ``sample(logits, *params, logprob, top_logprobs, top_ids, out)`` of the compiled programs, by
    variant (:func:`variants`)."""
    multiple = vector_elements(config.vocab, tl_dtype(config.dtype))

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
        write = logprob is not None and logprob.numel() > 0
        top = top_logprobs is not None and top_logprobs.numel() > 0 and top_ids is not None and top_ids.numel() > 0
        # a buffer left out: the variant compiled without its stores is passed a placeholder of its dtype and shape
        args = (
            logits,
            temperature,
            top_k,
            top_p,
            min_p,
            seeds,
            offsets,
            out,
            logprob if write else temperature,
            top_logprobs if top else temperature.view(-1, 1),
            top_ids if top else out.view(-1, 1),
        )
        kernel = kernels[write, top]
        if logits.data_ptr() % ALIGNMENT or logits.stride(0) % multiple:
            _launch_dense(kernel, args, multiple, write, top)
            return
        for arg in args[1:8]:  # the parameters and out: the program takes them dense (the buffers must be)
            if not arg.is_contiguous():
                _launch_dense(kernel, args, multiple, write, top)
                return
        kernel(*args)

    return sample


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def sample_tl(config: SampleConfig) -> Callable[..., None]:
    return sample_launch(
        config, {variant: direct(kernel) for variant, kernel in compiled(config.label, programs(config)).items()}
    )


def _launch_dense(kernel: Any, args: tuple[Any, ...], multiple: int, write: bool, top: bool) -> None:
    """The launch through copies of what the program cannot take as it lies (rare): logits misaligned or at a row
    stride off the 16-byte vector multiple, a strided parameter or ``out``; what is written copied back. The
    placeholders are made again from the copies, so that no placeholder is copied back over a result."""
    logits, *params, out = args[:8]
    if logits.data_ptr() % ALIGNMENT or logits.stride(0) % multiple:
        logits = logits.clone(memory_format=torch.contiguous_format)
    params = [param.contiguous() for param in params]
    target = out.contiguous()
    temperature = params[0]
    kernel(
        logits,
        *params,
        target,
        args[8] if write else temperature,
        args[9] if top else temperature.view(-1, 1),
        args[10] if top else target.view(-1, 1),
    )
    if target is not out:
        out.copy_(target)
