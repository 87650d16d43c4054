"""A Llama-3-8B decoder layer end to end: torch eager, torch.compile and lazyops' kernels per backend, in one run.

    python benchmarks/bench_layer.py --ceiling             # on the H200: results/h200/layer.{md,json}
    python benchmarks/bench_layer.py --workloads prefill-1024,decode-16 --backend triton
    python benchmarks/bench_layer.py --smoke --ceiling --device cpu --out /tmp/l   # the script's logic, tiny shapes
    python benchmarks/bench_layer.py --plan plan.json      # adds the layer of lazyops' namespace resolving by a plan
    python benchmarks/bench_layer.py --hf                  # a 4-layer Hugging Face Llama: stock, patched, liger
    python benchmarks/bench_layer.py --moe qwen3-30b-a3b   # a MoE layer instead: results/h200/layer_qwen3_30b_a3b.*
    python benchmarks/bench_layer.py --fp8 block,channel --workloads prefill-8192 --backend triton --no-compile
    LAZYOPS_TRACE=t.jsonl LAZYOPS_TRACE_ARGS=1 python benchmarks/bench_layer.py --build-only   # the layer's trace

The layer (hidden 4096; 32 query and 8 KV heads of 128; MLP 14336; neox rope; random bf16 weights) in an engine's
order: rmsnorm, QKV GEMM, rope, attention, O GEMM, add_rmsnorm (the residual in place), gate-up GEMM, SiLU-and-mul,
down GEMM. Interleaved at each workload: ``torch eager`` (``F.rms_norm``, ``@``, rope, ``F.silu``), ``torch.compile``
of it (the baseline of every ratio), and per lazyops backend its kernels, and its norms, rope and activation around
cuBLAS's GEMMs, each also under ``torch.compile(fullgraph=True)``. Attention (:func:`attention_for`): SDPA for torch's
layers and the torch backend's, each other backend's KV-cache write and paged attention over the same numbers.
Prefill of 1024 and 8192 tokens (stream time), decode at batch 1, 16 and 64 over 1024 cached tokens (a step in a
CUDA graph); each layer first checked against torch's in float32. Goals: >= 1.15x torch.compile at prefill, >= 1.0x
at decode. ``--plan FILE``: also the layer of lazyops' namespace under ``LAZYOPS_PLAN=FILE LAZYOPS_PLAN_STRICT=1``;
``--build-only``: build those kernels and stop (the trace for ``bench_tune.py``). ``--ceiling``: at prefill, the layer's
*skeleton* per GEMM provider (GEMMs and attention only): torch.compile over the fastest is the *bound* of any lazyops
layer; the *floor* adds the memory-bound kernels' bytes (``examples(spec).traffic``) at the device's copy rate.
``--hf``: a Hugging Face ``LlamaForCausalLM`` of these shapes, 4 layers, bf16: stock (SDPA),
``lazyops.transformers.patch`` and liger-kernel's ``apply_liger_kernel_to_llama``, interleaved: prefill 2048 (stream
time), an eager decode step at batch 1 and 32 over 512 cached tokens (host time: eager decode is host-bound), and
``generate_batch`` (tokens/s; stock with each paged attention transformers has here), each first checked against stock's
logits (results ``hf.{md,json}``).
``--moe mixtral-8x7b|qwen3-30b-a3b`` (issue 36): that model's attention shapes (no Qwen3 q/k norms) and a sparse MoE
block for the MLP: the router's GEMM, the top-k (``moe_route_tl``; torch: softmax, ``topk``, renormalised) and the
experts (``fused_moe_tl``; torch: ``torch._grouped_mm`` over the assignments sorted by expert, no host read, so a
CUDA graph captures it); each layer judged against the float32 layer routed to the experts it chose (a bf16 near-tie
may pick another expert, as vLLM's does).
``--fp8 block,channel``: also each backend's layer from fp8 weights (:func:`fp8_ops`), against the fastest bf16 layer
(issue 35: >= 1.3x at prefill 8192); ``--no-compile``: no torch.compile twins (the compiles cost minutes).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_harness as harness

TITLE = "A Llama-3-8B decoder layer end to end"
EAGER, COMPILED = "torch eager", "torch.compile"
#: The row of ``--plan``: the layer's kernels from lazyops' namespace, resolved by the plan.
PLANNED = "lazyops plan"
GOALS = {"prefill": 1.15, "decode": 1.0}
#: ``--fp8``: the weights' scales -> (``matmul_fp8_tl``'s scales, the producers' dynamic scales); the block side.
FP8, FP8_BLOCK, FP8_GOAL = {"block": ("block", "group"), "channel": ("rowwise", "token")}, 128, 1.3
#: The fp8 layer against the float32 one on the bf16 weights: e4m3 rounds each GEMM operand, weights and
#: activations, by up to 2**-4 (about 2**-5.6 rms, normwise), through four GEMMs in a chain: judged at 2**-3.
FP8_TOLERANCE = 0.125
#: A layer chains about ten bf16 roundings where one kernel has one: judged at four times a kernel's tolerance.
TOLERANCE_FACTOR = 4
WORKLOADS, SMOKE_WORKLOADS = "prefill-1024,prefill-8192,decode-1,decode-16,decode-64", "prefill-16,decode-2"
#: The paged cache's block size (vLLM's default).
BLOCK_SIZE = 16


@dataclass(frozen=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    rope_rows: int
    context: int  # cached tokens per sequence at decode
    eps: float = 1e-5
    rope_theta: float = 500000.0
    experts: int = 0  # a MoE layer's (--moe): ``top_k`` of ``experts`` a token, each an MLP of ``mlp``
    top_k: int = 0

    def kernels(self, dtype: Any) -> dict[str, tuple[str, tuple[Any, ...]]]:
        """The layer's kernel configurations by role: ``{role: (kernel, factory arguments)}``."""
        hidden, q, kv, mlp = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.mlp
        moe = (self.experts, self.top_k)
        return {
            "rmsnorm": ("rmsnorm_tl", (hidden, dtype, self.eps)),
            "add_rmsnorm": ("add_rmsnorm_tl", (hidden, dtype, self.eps)),
            "rope": ("rope_tl", (self.head_dim, dtype, True)),
            "qkv": ("matmul_tl", (q + 2 * kv, hidden, dtype)),
            "o": ("matmul_tl", (hidden, q, dtype)),
        } | ({
            "router": ("matmul_tl", (self.experts, hidden, dtype)),
            "route": ("moe_route_tl", (*moe, dtype)),
            "experts": ("fused_moe_tl", (hidden, mlp, *moe, dtype)),
        } if self.experts else {
            "silu_and_mul": ("silu_and_mul_tl", (mlp, dtype)),
            "gate_up": ("matmul_tl", (2 * mlp, hidden, dtype)),
            "down": ("matmul_tl", (hidden, mlp, dtype)),
        })  # fmt: skip

    def gemms(self) -> list[str]:
        return [role for role, (kernel, _) in self.kernels(None).items() if kernel == "matmul_tl"]


LLAMA3_8B = Shape(hidden=4096, heads=32, kv_heads=8, head_dim=128, mlp=14336, rope_rows=8192, context=1024)
SMOKE = Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, mlp=512, rope_rows=64, context=16)
MEMORY_BOUND = ("rmsnorm", "add_rmsnorm", "rope", "silu_and_mul")
#: --moe: each model's layer (Mixtral's and Qwen3-MoE's rope theta; Qwen3-30B-A3B's query width 4096 over hidden 2048)
MOE = {
    "mixtral-8x7b": dataclasses.replace(LLAMA3_8B, rope_theta=1e6, experts=8, top_k=2),
    "qwen3-30b-a3b": Shape(2048, 32, 4, 128, 768, 8192, 1024, eps=1e-6, rope_theta=1e6, experts=128, top_k=8),
}
SMOKE_MOE = dataclasses.replace(SMOKE, mlp=64, experts=8, top_k=2)


@dataclass(frozen=True)
class Attention:
    """The layer's attention, the seam where a backend's attention kernels come in: ``cache(batch, generator)``,
    contiguous ``[B, Hkv, context + 1, D]`` keys and values (the decode step's trailing inputs); ``prefill(q, k, v)``,
    causal over one sequence (``q [T, Hq * D]``, ``k``, ``v [T, Hkv * D]``); ``decode(q, k, v, *cache)``, the new
    tokens written into the cache, then attended over it; ``adopt(*cache)``: that cache in this attention's own
    layout, the same numbers, made once outside the timing (None: it reads the contiguous one)."""

    name: str
    cache: Callable[..., tuple[Any, ...]]
    prefill: Callable[..., Any]
    decode: Callable[..., Any]
    adopt: Callable[..., tuple[Any, ...]] | None = None


def sdpa_attention(shape: Shape, dtype: Any, device: str) -> Attention:
    """``F.scaled_dot_product_attention`` (``enable_gqa``) over the contiguous cache, its last slot the new token's."""
    import torch
    import torch.nn.functional as F

    heads, kv_heads, head_dim, context = shape.heads, shape.kv_heads, shape.head_dim, shape.context

    def cache(batch: int, generator: Any) -> tuple[Any, ...]:
        size = (batch, kv_heads, context + 1, head_dim)
        return tuple(torch.randn(size, generator=generator).to(dtype).to(device) for _ in range(2))

    def prefill(q: Any, k: Any, v: Any) -> Any:
        tokens = q.shape[0]
        q, k, v = (t.view(tokens, -1, head_dim).transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.squeeze(0).transpose(0, 1).reshape(tokens, heads * head_dim)

    def decode(q: Any, k: Any, v: Any, k_cache: Any, v_cache: Any) -> Any:
        batch = q.shape[0]
        k_cache[:, :, context].copy_(k.view(batch, kv_heads, head_dim))
        v_cache[:, :, context].copy_(v.view(batch, kv_heads, head_dim))
        out = F.scaled_dot_product_attention(q.view(batch, heads, 1, head_dim), k_cache, v_cache, enable_gqa=True)
        return out.reshape(batch, heads * head_dim)

    return Attention("F.scaled_dot_product_attention", cache, prefill, decode)


def paged_attention(backend: str | None, shape: Shape, dtype: Any, device: str) -> Attention:
    """lazyops' ``kv_cache_write_tl`` and ``paged_attention_tl`` of ``backend`` (None: lazyops' namespace) over a
    paged cache (``harness.paged``): the new tokens written into their slots, then attended over; at prefill into a
    cache of their own, made once per token count outside the timing."""
    import torch

    kv_heads, head_dim, context = shape.kv_heads, shape.head_dim, shape.context
    write = harness.factory(backend, "kv_cache_write_tl")(kv_heads, head_dim, dtype, block_size=BLOCK_SIZE)
    attend = harness.factory(backend, "paged_attention_tl")(
        shape.heads, kv_heads, head_dim, dtype, block_size=BLOCK_SIZE, max_seq_len=max(8192, context + 1)
    )

    def adopt(k_cache: Any, v_cache: Any, new: int = 1) -> tuple[Any, ...]:
        """What the write and the attention take: the paged cache and the slots of each sequence's last ``new``."""
        paged, length = harness.paged(k_cache, v_cache, BLOCK_SIZE, new), k_cache.shape[2]
        positions = torch.arange(length - new, length, device=device)
        slots = paged[2][:, positions // BLOCK_SIZE].long() * BLOCK_SIZE + positions % BLOCK_SIZE
        return *paged, slots.flatten().contiguous()

    def decode(q: Any, k: Any, v: Any, *cache: Any) -> Any:
        key_cache, value_cache, table, seq_lens, starts, slots = cache
        write(k, v, key_cache, value_cache, slots)
        return attend(q, key_cache, value_cache, table, seq_lens, starts)

    prefill_caches: dict[int, tuple[Any, ...]] = {}  # a dict, not functools.cache: dynamo reads it as constants

    def prefill(q: Any, k: Any, v: Any) -> Any:
        tokens = q.shape[0]
        if tokens not in prefill_caches:  # an engine's cache exists before its prefill: made once, outside the timing
            empty = torch.zeros(1, kv_heads, tokens, head_dim, dtype=dtype, device=device)
            prefill_caches[tokens] = adopt(empty, empty, new=tokens)
        return decode(q, k, v, *prefill_caches[tokens])

    name = f"lazyops {backend or 'namespace'} paged attention"
    return Attention(name, sdpa_attention(shape, dtype, device).cache, prefill, decode, adopt)


def attention_for(backend: str | None, shape: Shape, dtype: Any, device: str) -> Attention:
    """The attention of ``backend``'s layer: SDPA for torch's layers (``None``) and the torch backend (it reads lengths
    on the host, which a CUDA graph cannot capture); lazyops' paged attention for every other (and the namespace)."""
    if backend is None or backend == "torch":
        return sdpa_attention(shape, dtype, device)
    return paged_attention(None if backend == "namespace" else backend, shape, dtype, device)


@dataclass(frozen=True)
class Ops:
    """The kernels a layer is built from; each takes and returns what lazyops' kernels do, except ``add_rmsnorm``,
    which returns ``(normed, residual)`` whether it updates the residual in place or not."""

    rmsnorm: Callable[..., Any]
    add_rmsnorm: Callable[..., Any]
    rope: Callable[..., Any]
    qkv: Callable[..., Any]
    o: Callable[..., Any]
    attention: Attention
    silu_and_mul: Callable[..., Any] | None = None  # the dense MLP's
    gate_up: Callable[..., Any] | None = None
    down: Callable[..., Any] | None = None
    router: Callable[..., Any] | None = None  # the MoE block's; route(logits) -> (weights, ids)
    route: Callable[..., Any] | None = None
    experts: Callable[..., Any] | None = None
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # the weights as these ops take them


def torch_ops(shape: Shape, attention: Attention) -> Ops:
    """The natural torch composition, in whatever dtype it is given (bf16 timed, float32 the reference)."""
    import torch
    import torch.nn.functional as F

    hidden, eps, head_dim, half = shape.hidden, shape.eps, shape.head_dim, shape.head_dim // 2

    def add_rmsnorm(x: Any, residual: Any, weight: Any) -> tuple[Any, Any]:
        residual = x + residual
        return F.rms_norm(residual, (hidden,), weight, eps), residual

    def rotate(x: Any, cos: Any, sin: Any) -> Any:
        heads = x.unflatten(-1, (-1, head_dim))
        x1, x2 = heads[..., :half], heads[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)

    def rope(positions: Any, query: Any, key: Any, cos_sin_cache: Any) -> tuple[Any, Any]:
        cos, sin = cos_sin_cache[positions].to(query.dtype).unsqueeze(-2).chunk(2, dim=-1)
        return rotate(query, cos, sin), rotate(key, cos, sin)

    def silu_and_mul(x: Any) -> Any:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def rmsnorm(x: Any, weight: Any) -> Any:
        return F.rms_norm(x, (hidden,), weight, eps)

    def mm(a: Any, b: Any) -> Any:
        return a @ b

    def experts(x: Any, w13: Any, w2: Any, weights: Any, ids: Any) -> Any:
        """torch._grouped_mm over the assignments sorted by expert; float32 (the reference): the spec's loop."""
        if x.dtype == torch.float32:
            from lazyops.specs import spec

            moe = spec("fused_moe_tl")
            return moe.reference(moe.bind(*shape.kernels(x.dtype)["experts"][1]), x, w13, w2, weights, ids)[0]
        return harness.grouped_mm_experts(x, w13, w2, weights, ids, shape.experts)

    moe = {"router": mm, "route": lambda logits: routing(logits, shape.top_k), "experts": experts}
    return Ops(rmsnorm, add_rmsnorm, rope, mm, mm, attention, silu_and_mul, mm, mm, **moe)


def routing(logits: Any, top_k: int, ids: Any = None) -> tuple[Any, Any]:
    """The softmax's ``top_k`` experts, renormalised (Mixtral's and Qwen3-30B-A3B's router); given ``ids`` (those a
    layer chose), theirs, where they are distinct and hold 99 % of the top-k's probability (a near-tie's swap)."""
    import torch

    probabilities = torch.softmax(logits.float(), dim=-1)
    weights, best = probabilities.topk(top_k, dim=-1)
    if ids is not None:
        chosen, distinct = probabilities.gather(-1, ids.long()), ids.sort(-1).values.diff(dim=-1).ne(0).all()
        if not (distinct and (chosen.sum(-1) >= 0.99 * weights.sum(-1)).all()):
            raise ValueError("wrong result: the experts chosen are not the router's top-k")
        weights, best = chosen, ids
    return weights / weights.sum(-1, keepdim=True), best


def lazyops_ops(backend: str, shape: Shape, dtype: Any, attention: Attention) -> Ops:
    """Every kernel from ``backend``'s own factories (``lazyops.<backend>.<kernel>``; ``"namespace"``: lazyops'
    namespace, as an engine takes them, resolved by ``LAZYOPS_BACKEND``/``LAZYOPS_PLAN``, traced by
    ``LAZYOPS_TRACE``), each built once. Query and key go into rope as the views of the QKV output they are."""
    source = None if backend == "namespace" else backend
    built = {role: harness.factory(source, kernel)(*args) for role, (kernel, args) in shape.kernels(dtype).items()}
    add_rmsnorm, route = built["add_rmsnorm"], built.get("route")
    built["add_rmsnorm"] = lambda x, residual, weight: (add_rmsnorm(x, residual, weight), residual)
    if route is not None:  # moe_route_tl writes into outputs of the caller's
        import torch

        size = (shape.top_k,)
        built["route"] = lambda logits: route(
            logits, logits.new_empty(*logits.shape[:-1], *size, dtype=torch.float32),
            logits.new_empty(*logits.shape[:-1], *size, dtype=torch.int32),
        )  # fmt: skip
    return Ops(**built, attention=attention)


def fp8_ops(backend: str, shape: Shape, dtype: Any, attention: Attention, fp8: str) -> Ops:
    """``backend``'s layer from fp8 weights (``fp8``: ``"block"``, 128x128 blocks, or ``"channel"`` scales; quantised
    once a workload by the torch backend's ``quant_fp8_tl``, a block a row of a blocked view): its norms, SiLU-and-mul
    and attention's output quantised by the fp8 producers (dynamic 1x128-group or per-token scales), each returning
    ``(values, scales)``, every GEMM ``matmul_fp8_tl``; rope and attention as the bf16 layer's."""
    import torch

    gemm, act = FP8[fp8]
    make, side = functools.partial(harness.factory, None if backend == "namespace" else backend), FP8_BLOCK

    def producer(kernel: Any, width: int) -> Callable[..., Any]:
        def produce(x: Any, *args: Any) -> tuple[Any, Any]:
            scale = torch.empty(x.shape[0], 1 if act == "token" else width // side, device=x.device)
            return kernel(x, *args, scale), scale

        return produce

    def product(role: str, quantise: Callable[..., Any] | None = None) -> Callable[..., Any]:
        kernel = make("matmul_fp8_tl")(*shape.kernels(dtype)[role][1], gemm)

        def run(x: Any, w: tuple[Any, Any]) -> Any:
            a, scale_a = quantise(x) if quantise else x
            return kernel(a, w[0], scale_a, w[1])

        return run

    def quantised(weights: dict[str, Any]) -> dict[str, Any]:
        out = dict(weights)
        for role in shape.gemms():
            n, k = weights[role].shape[1], weights[role].shape[0]
            w = weights[role].t() if fp8 == "channel" else weights[role].t().reshape(n // side, side, k // side, side)
            rows = w.contiguous() if fp8 == "channel" else w.permute(0, 2, 1, 3).reshape(-1, side * side).contiguous()
            scale = torch.empty(rows.shape[0], 1, device=w.device)
            values = harness.factory("torch", "quant_fp8_tl")(rows.shape[1], dtype, "token")(rows, scale)
            if fp8 == "block":
                values = values.view(n // side, k // side, side, side).permute(0, 2, 1, 3).reshape(n, k)
            out[role] = (values.contiguous(), scale if fp8 == "channel" else scale.view(n // side, k // side))
        return out

    hidden, mlp, query = shape.hidden, shape.mlp, shape.heads * shape.head_dim
    add_rmsnorm = producer(make("add_rmsnorm_fp8_tl")(hidden, dtype, shape.eps, scales=act), hidden)
    return dataclasses.replace(
        lazyops_ops(backend, shape, dtype, attention),
        rmsnorm=producer(make("rmsnorm_fp8_tl")(hidden, dtype, shape.eps, scales=act), hidden),
        add_rmsnorm=lambda x, residual, weight: (add_rmsnorm(x, residual, weight), residual),
        silu_and_mul=producer(make("silu_and_mul_fp8_tl")(mlp, dtype, act), mlp),
        qkv=product("qkv"),
        o=product("o", producer(make("quant_fp8_tl")(query, dtype, act), query)),
        gate_up=product("gate_up"),
        down=product("down"),
        prepare=quantised,
    )


def skeleton(gemms: Ops) -> Ops:
    """``gemms``' GEMMs and attention, every memory-bound kernel free (no GPU work): the layer's bound."""
    return dataclasses.replace(
        gemms,
        rmsnorm=lambda x, weight: x,
        add_rmsnorm=lambda x, residual, weight: (x, residual),
        rope=lambda positions, query, key, cache: (query, key),
        silu_and_mul=lambda x: x.new_empty((x.shape[0], x.shape[-1] // 2)),
    )


def make_weights(shape: Shape, dtype: Any, device: str) -> dict[str, Any]:
    """Random weights, ``[in, out]`` as ``matmul_tl`` takes them, scaled by 1/sqrt(fan-in); the rope cache."""
    import torch

    g = torch.Generator().manual_seed(0)

    def linear(fan_in: int, fan_out: int) -> Any:
        return (torch.randn(fan_in, fan_out, generator=g) * fan_in**-0.5).to(dtype).to(device)

    def norm() -> Any:
        return (1 + 0.1 * torch.randn(shape.hidden, generator=g)).to(dtype).to(device)

    half = shape.head_dim // 2
    inv_freq = 1.0 / shape.rope_theta ** (torch.arange(half, dtype=torch.float64) / half)
    angles = torch.outer(torch.arange(shape.rope_rows, dtype=torch.float64), inv_freq)
    weights = {"input_norm": norm(), "post_norm": norm()}
    gemms = {role: shape.kernels(dtype)[role][1] for role in shape.gemms()}  # matmul_tl(n, k): a weight [k, n]
    weights |= {role: linear(k, n) for role, (n, k, _) in gemms.items()}
    if shape.experts:  # the experts' stacks as Hugging Face holds them, drawn where they run (Mixtral's: 2.8 GB)
        device_g, e, h, i = torch.Generator(device).manual_seed(0), shape.experts, shape.hidden, shape.mlp
        for name, size in (("w13", (e, 2 * i, h)), ("w2", (e, h, i))):
            weights[name] = torch.randn(size, generator=device_g, device=device, dtype=dtype) * size[-1] ** -0.5
    return weights | {"cos_sin_cache": torch.cat([angles.cos(), angles.sin()], dim=-1).float().to(device)}


def make_inputs(shape: Shape, phase: str, tokens: int, dtype: Any, device: str) -> tuple[Any, ...]:
    """``(hidden, positions)`` at prefill; ``(hidden, positions, *cache)`` at decode (the new token at
    ``shape.context``)."""
    import torch

    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(tokens, shape.hidden, generator=g).to(dtype).to(device)
    if phase == "prefill":
        return hidden, torch.arange(tokens, device=device)
    positions = torch.full((tokens,), shape.context, dtype=torch.long, device=device)
    return hidden, positions, *sdpa_attention(shape, dtype, device).cache(tokens, g)


def make_layer(ops: Ops, weights: dict[str, Any], shape: Shape, phase: str) -> Callable[..., Any]:
    """One decoder layer step: ``layer(hidden, positions[, *cache]) -> (out, residual)``."""
    sizes = [shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.kv_heads * shape.head_dim]
    w, attention = weights, ops.attention

    def front(hidden: Any, positions: Any) -> tuple[Any, Any, Any]:
        q, k, v = ops.qkv(ops.rmsnorm(hidden, w["input_norm"]), w["qkv"]).split(sizes, dim=-1)
        q, k = ops.rope(positions, q, k, w["cos_sin_cache"])
        return q, k, v

    def back(attended: Any, hidden: Any) -> tuple[Any, ...]:
        """``(out, residual)``; a MoE layer's ``(out, residual, topk_ids)``: the experts it chose, judged by."""
        h, residual = ops.add_rmsnorm(ops.o(attended, w["o"]), hidden, w["post_norm"])
        if not shape.experts:
            return ops.down(ops.silu_and_mul(ops.gate_up(h, w["gate_up"])), w["down"]), residual
        weights, ids = ops.route(ops.router(h, w["router"]))
        return ops.experts(h, w["w13"], w["w2"], weights, ids), residual, ids

    def prefill(hidden: Any, positions: Any) -> tuple[Any, Any]:
        return back(attention.prefill(*front(hidden, positions)), hidden)

    def decode(hidden: Any, positions: Any, *cache: Any) -> tuple[Any, Any]:
        return back(attention.decode(*front(hidden, positions), *cache), hidden)

    return prefill if phase == "prefill" else decode


@dataclass(frozen=True)
class Impl:
    name: str
    kind: str  # "lazyops", "peer" or "skeleton"
    ops: Callable[[], Ops]  # built once, shared by every workload and the compiled twin; raises where it cannot run
    compiled: bool = False


def implementations(
    shape: Shape, dtype: Any, device: str, status: dict[str, str | None], ceiling: bool, plan: bool = False,
    fp8: tuple[str, ...] = (), compiled: bool = True,
) -> list[Impl]:  # fmt: skip
    """What to time; ``plan``: the layer of lazyops' namespace too (``LAZYOPS_PLAN`` set by ``main``); ``fp8``: each
    backend's fp8 layers (no compiled twin); ``compiled``: every other's torch.compile twin."""

    def ops_of(backend: str, problem: str | None = None, fp8_mode: str = "") -> Callable[[], Ops]:
        def build() -> Ops:
            if problem:
                raise RuntimeError(f"unavailable: {problem}")
            attention = attention_for(backend, shape, dtype, device)
            if fp8_mode:
                return fp8_ops(backend, shape, dtype, attention, fp8_mode)
            return lazyops_ops(backend, shape, dtype, attention)

        return functools.cache(build)

    natural = functools.cache(lambda: torch_ops(shape, attention_for(None, shape, dtype, device)))
    variants = [(EAGER, "peer", natural)] + ([(PLANNED, "lazyops", ops_of("namespace"))] if plan else [])
    skeletons = [Impl("skeleton, cuBLAS GEMMs", "skeleton", lambda: skeleton(natural()))] if ceiling else []
    gemms = shape.gemms()
    for backend, problem in status.items():
        own = ops_of(backend, problem)
        variants.append((f"lazyops {backend}", "lazyops", own))
        if backend != "torch":  # the engine's usual mix: this backend's other kernels around cuBLAS's GEMMs
            mixed = functools.cache(lambda o=own: dataclasses.replace(o(), **{g: getattr(natural(), g) for g in gemms}))
            variants.append((f"lazyops {backend}, cuBLAS GEMMs", "lazyops", mixed))
        if ceiling and not problem and backend != "torch":
            skeletons.append(Impl(f"skeleton, lazyops {backend} GEMMs", "skeleton", lambda o=own: skeleton(o())))
    twins = [Impl(COMPILED if n == EAGER else f"{n} + torch.compile", k, ops, True) for n, k, ops in variants]
    fp8_layers = [Impl(f"lazyops {b}, fp8 {m}", "fp8", ops_of(b, p, m)) for b, p in status.items() for m in fp8]
    fp8_layers += [Impl(f"{PLANNED}, fp8 {m}", "fp8", ops_of("namespace", None, m)) for m in fp8 if plan]
    pairs = zip([Impl(*v) for v in variants], twins if compiled else [None] * len(twins), strict=True)
    return [impl for pair in pairs for impl in pair if impl is not None] + fp8_layers + skeletons


def case(impl: Impl, weights: dict[str, Any], shape: Shape, phase: str, inputs: tuple[Any, ...]) -> Any:
    """The harness case of ``impl`` at one workload: the layer built (compiled) on its own copy of the inputs."""

    def setup(workload: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
        import torch

        ops = impl.ops()
        own = inputs
        if phase == "decode" and ops.attention.adopt is not None:  # this attention's own cache, same numbers
            own = (*inputs[:2], *ops.attention.adopt(*inputs[2:]))
        layer = make_layer(ops, ops.prepare(weights) if ops.prepare else weights, shape, phase)
        if impl.compiled:
            dynamo = "inductor" if inputs[0].is_cuda else "eager"
            fullgraph = impl.kind == "lazyops"  # lazyops' kernels are custom operators under the compiler
            layer = torch.compile(harness.engine().own_code(layer), fullgraph=fullgraph, dynamic=False, backend=dynamo)
        return layer, [clone(own)]

    return harness.Case(impl.name, impl.kind, setup)


def clone(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies: lazyops updates the residual (the input) in place, every decode step writes its cache slot."""
    return tuple(t.clone() for t in inputs)


def measure_workload(
    phase: str, tokens: int, impls: list[Impl], shape: Shape, device: str, stream: bool = False
) -> list[dict[str, Any]]:
    """Every implementation at one workload, interleaved: a row each, with its relative errors and × torch.compile."""
    import torch

    from lazyops.testing import TOLERANCE

    dtype, name = torch.bfloat16, f"{phase}-{tokens}"
    weights = make_weights(shape, dtype, device)
    inputs = make_inputs(shape, phase, tokens, dtype, device)
    reference_ops = torch_ops(shape, attention_for(None, shape, torch.float32, device))
    wide = {key: tensor.float() for key, tensor in weights.items()}
    upcast = [t.float() if t.is_floating_point() else t for t in clone(inputs)]

    def reference(ids: Any = None) -> Any:  # torch's layer in float32 on the weights and inputs upcast
        routed = {"route": lambda logits: routing(logits, shape.top_k, ids)} if ids is not None else {}
        with torch.no_grad():  # a MoE layer's: routed to the experts of the layer judged
            return make_layer(dataclasses.replace(reference_ops, **routed), wide, shape, phase)(*upcast)[:2]

    expected = reference() if not shape.experts else None
    errors: dict[str, list[float]] = {}

    def check(case: Any, got: Any) -> None:  # skeletons skip work on purpose: not judged
        if case.kind != "skeleton":
            tolerance = FP8_TOLERANCE if case.kind == "fp8" else TOLERANCE_FACTOR * TOLERANCE[dtype]
            truth = expected or reference(got[2])
            errors[case.name] = harness.judge(got[:2], truth, tolerance)

    chosen = [impl for impl in impls if impl.kind != "skeleton" or phase == "prefill"]
    cases = [case(impl, weights, shape, phase, inputs) for impl in chosen]
    mode = "graph" if device.startswith("cuda") and phase == "decode" and not stream else "stream"
    timed = harness.measure(cases, name, mode, device, round_s=0.06, check=check)
    rows = [
        {"workload": name, "phase": phase, "tokens": tokens, "impl": impl, "mode": mode} | t
        for impl, t in timed.items()
    ]
    baseline = timed.get(COMPILED, {}).get("us")
    for row in rows:
        row["error_out"], row["error_residual"] = errors.get(row["impl"], (None, None))
        row["vs_compile"] = baseline / row["us"] if row.get("us") and baseline else None
    return rows


def bound(rows: list[dict[str, Any]], shape: Shape, tokens: int, copy: Any) -> dict[str, Any]:
    """The ceiling at a prefill workload: the fastest skeleton, the bound over torch.compile, the floor."""
    import torch

    from lazyops.testing import examples

    workload = rows[0]["workload"]
    compile_us = next((row.get("us") for row in rows if row["impl"] == COMPILED), None)
    skeletons = [row for row in rows if row["kind"] == "skeleton" and row.get("us")]
    fastest = min(skeletons, key=lambda row: row["us"], default=None)
    if fastest is None or not compile_us or not copy.rate:
        return {"workload": workload, "kind": "bound", "error": "torch.compile, a skeleton or the copy did not run"}
    rope = {"query_heads": shape.heads, "key_heads": shape.kv_heads, "rotary_dim": shape.head_dim}
    moved = 0
    kernels = shape.kernels(torch.bfloat16)
    for role in (role for role in MEMORY_BOUND if role in kernels):  # the bytes the memory-bound kernels must move
        kernel, args = kernels[role]
        moved += (of := examples(kernel)).traffic(of.spec.bind(*args), tokens, rope if role == "rope" else {}).bytes
    floor_us = fastest["us"] + moved / copy.rate / 1e3
    skeleton = {"fastest": fastest["impl"], "skeleton_us": fastest["us"], "bound": compile_us / fastest["us"]}
    floor = {"memory_bound_bytes": moved, "copy_gbs": copy.rate, "floor_us": floor_us, "floor": compile_us / floor_us}
    return {"workload": workload, "kind": "bound", "compile_us": compile_us, **skeleton, **floor}


def resolved(shape: Shape, dtype: Any) -> list[str]:
    """Where each kernel configuration of the layer resolves: ``rmsnorm_tl(n=4096, ...): triton (plan)``."""
    import lazyops
    from lazyops.specs import spec

    resolutions = [
        (spec(kernel).bind(*args), lazyops.which(kernel, *args)) for kernel, args in shape.kernels(dtype).values()
    ]
    return [f"{config.label}: {where.backend} ({where.reason})" for config, where in resolutions]


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--workloads", help=f"comma list of prefill-<tokens>, decode-<batch> (default {WORKLOADS})")
    parser.add_argument("--ceiling", action="store_true", help="the skeletons, the bound and the floor at prefill")
    parser.add_argument("--name", help="the result files' stem (default layer; --moe's: layer_<model>)")
    parser.add_argument("--moe", choices=MOE, help="that MoE model's layer instead of Llama-3-8B's (issue 36)")
    parser.add_argument("--plan", type=Path, help="also time the layer of lazyops' namespace under this plan")
    parser.add_argument("--build-only", action="store_true", help="build the namespace's kernels and stop")
    parser.add_argument("--hf", action="store_true", help="a Hugging Face Llama: stock, lazyops' patch, liger's")
    parser.add_argument("--fp8", default="", help="comma list of block,channel: the layers from fp8 weights too")
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile twins")
    parser.add_argument("--only", action="append", help="an implementation to time, the rest left out (repeatable)")
    parser.add_argument("--decode-stream", action="store_true", help="time decode in stream, not in a CUDA graph")
    options = parser.parse_args(argv)
    if options.hf:
        return hugging_face(options, harness.start(options))
    if options.plan:  # strictly: a plan that does not apply here is an error, not the default measured by its name
        if not options.plan.is_file():
            make = f"make one with `lazyops tune --from-trace TRACE --output {options.plan}`"
            sys.exit(f"--plan {options.plan}: no such file; {make}")
        os.environ.update(LAZYOPS_PLAN=str(options.plan), LAZYOPS_PLAN_STRICT="1")
    device = harness.start(options)
    import torch

    from lazyops.testing import TOLERANCE

    shape, dtype = SMOKE if options.smoke else LLAMA3_8B, torch.bfloat16
    title, options.name = TITLE, options.name or (f"layer_{options.moe.replace('-', '_')}" if options.moe else "layer")
    if options.moe:
        shape, title = SMOKE_MOE if options.smoke else MOE[options.moe], f"A {options.moe} MoE decoder layer end to end"
    chosen = options.workloads or (SMOKE_WORKLOADS if options.smoke else WORKLOADS)
    workloads = [_workload(text) for text in chosen.split(",")]
    longest = max([tokens for phase, tokens in workloads if phase == "prefill"] + [shape.context + 1])
    shape = dataclasses.replace(shape, rope_rows=max(shape.rope_rows, 1 << (longest - 1).bit_length()))
    fp8 = tuple(mode for mode in options.fp8.split(",") if mode)
    if set(fp8) - set(FP8):
        sys.exit(f"--fp8: {options.fp8!r} is not a comma list of {', '.join(FP8)}")
    if options.build_only:  # with --fp8, the fp8 layers' kernels too: their configurations in the trace
        lazyops_ops("namespace", shape, dtype, attention_for(None, shape, dtype, device))
        for mode in fp8:
            fp8_ops("namespace", shape, dtype, attention_for(None, shape, dtype, device), mode)
        print("built the layer's kernels from lazyops' namespace:", ", ".join(resolved(shape, dtype)))
        return 0
    everything = harness.backends(options.backend)
    status = {name: problem for name, problem in everything.items() if problem is None or options.backend}
    impls = implementations(
        shape, dtype, device, status, options.ceiling, options.plan is not None, fp8, not options.no_compile
    )
    if options.only:  # a row that poisons the device (an assert in a graph's replay) is found by leaving rows out
        wanted, names = set(options.only), [impl.name for impl in impls]
        if wanted - set(names):
            sys.exit(f"--only: {', '.join(sorted(wanted - set(names)))} not among this run's rows: {', '.join(names)}")
        impls = [impl for impl in impls if impl.name in wanted]
    env = harness.environment(device, everything) | {"shape": dataclasses.asdict(shape)}
    env["tolerance"] = TOLERANCE_FACTOR * TOLERANCE[dtype]
    env["attention"] = {name or "torch": attention_for(name, shape, dtype, device).name for name in [None, *status]}
    if options.plan:
        env["plan"] = {"file": str(options.plan), "resolved": resolved(shape, dtype)}
    copy = harness.engine().copy_ceiling(16 if options.smoke else 256, device=device) if options.ceiling else None
    rows, bounds = [], []
    for phase, tokens in workloads:
        rows += (measured := measure_workload(phase, tokens, impls, shape, device, options.decode_stream))
        bounds += [bound(measured, shape, tokens, copy)] if copy is not None and phase == "prefill" else []
        written = harness.write(options.out, options.name, title, env, rows + bounds, render(rows, bounds, env, copy))
    print(f"wrote {written} and its .json")
    return 0 if all("wrong result" not in row.get("error", "") for row in rows) else 1


def _workload(text: str) -> tuple[str, int]:
    phase, _, count = text.partition("-")
    if phase not in GOALS or not count.isdigit() or int(count) < 1:
        sys.exit(f"--workloads: {text!r} is not prefill-<tokens> or decode-<batch>, e.g. prefill-1024,decode-16")
    return phase, int(count)


def render(rows: list[dict[str, Any]], bounds: list[dict[str, Any]], env: dict[str, Any], copy: Any) -> list[str]:
    workloads, shape = list(dict.fromkeys(row["workload"] for row in rows)), env["shape"]
    by_impl: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_impl.setdefault(row["impl"], {})[row["workload"]] = row
    lines = [
        f"Hidden {shape['hidden']}; {shape['heads']} query + {shape['kv_heads']} KV heads of {shape['head_dim']}; "
        + (f"{shape['top_k']} of {shape['experts']} experts of " if shape["experts"] else "MLP ")
        + f"{shape['mlp']}; bf16; decode over {shape['context']} cached tokens. Prefill: stream time (`do_bench`, "
        "L2 flushed); decode on CUDA: a layer step in a CUDA graph (50 captured, 20 replays). Each implementation "
        f"first checked against the torch layer in float32 (relative error ≤ {env['tolerance']:.1e}). Attention: "
        + ", ".join(f"{name}: {kind}" for name, kind in env["attention"].items())
        + ".",
        "",
        "## µs per layer (× torch.compile: its µs over this row's, > 1 is faster)",
        "",
        *harness.table(
            ["implementation", *workloads],
            [[impl, *(_time_cell(cells.get(w)) for w in workloads)] for impl, cells in by_impl.items()],
        ),
        "## Goals: lazyops ≥ 1.15× torch.compile at prefill, ≥ 1.0× at decode",
        "",
        *harness.table(
            ["workload", "goal", "best lazyops", "× torch.compile", ""], [_goal(rows, w) for w in workloads]
        ),
    ]
    if bounds:
        lines += [
            f"## The bound at prefill (`--ceiling`; copy rate {copy.rate:,.0f} GB/s)",
            "",
            "The skeleton: the layer with its GEMMs and attention, every memory-bound kernel free. Bound: "
            "torch.compile's µs over the fastest skeleton's, the most any kernels around those GEMMs can give. "
            "Floor: that skeleton plus the memory-bound kernels' bytes at the copy rate.",
            "",
            *harness.table(
                ["workload", "torch.compile µs", "fastest skeleton", "µs", "bound", "floor µs", "floor ×"],
                [_bound_cells(b) for b in bounds],
            ),
        ]
    if any(row["kind"] == "fp8" for row in rows):
        lines += [
            f"## fp8 (issue 35): ≥ {FP8_GOAL}× the fastest bf16 layer at prefill (each judged at {FP8_TOLERANCE})",
            "",
            *harness.table(["workload", "fp8 layer", "µs", "fastest bf16 layer", "µs", "×", ""], _fp8_goal(rows)),
        ]
    errors = [[impl, *(_error_cell(cells.get(w)) for w in workloads)] for impl, cells in by_impl.items()]
    return [
        *lines,
        "## Relative error against the float32 layer (output / residual)",
        "",
        *harness.table(["implementation", *workloads], errors),
    ]


def _time_cell(row: dict[str, Any] | None) -> str:
    if row is None or "error" in row:
        return "" if row is None else "error"
    ratio = f" ({row['vs_compile']:.2f}×)" if row.get("vs_compile") else ""
    return harness.figure(row.get("us"), 1, row.get("noisy")) + ratio


def _error_cell(row: dict[str, Any] | None) -> str:
    return (
        "—" if row is None or row.get("error_out") is None else f"{row['error_out']:.1e} / {row['error_residual']:.1e}"
    )


def _goal(rows: list[dict[str, Any]], workload: str) -> list[str]:
    ours = [r for r in rows if r["workload"] == workload and r["kind"] == "lazyops" and r.get("vs_compile")]
    best, target = max(ours, key=lambda r: r["vs_compile"], default=None), GOALS[workload.split("-", maxsplit=1)[0]]
    if best is None:
        return [workload, f"≥ {target}", "—", "—", "not measured"]
    verdict = "met" if best["vs_compile"] >= target else "not met"
    return [workload, f"≥ {target}", best["impl"], f"{best['vs_compile']:.2f}", verdict]


def _fp8_goal(rows: list[dict[str, Any]]) -> list[list[Any]]:
    cells = []
    for row in (r for r in rows if r["kind"] == "fp8"):
        bf16 = [
            r for r in rows if r["workload"] == row["workload"] and r["kind"] in ("lazyops", "peer") and r.get("us")
        ]
        best = min(bf16, key=lambda r: r["us"], default=None)
        ratio = best["us"] / row["us"] if best and row.get("us") else None
        verdict = "" if ratio is None or row["phase"] != "prefill" else "met" if ratio >= FP8_GOAL else "not met"
        fastest = [best["impl"], harness.figure(best["us"], 1)] if best else ["—", ""]
        figures = [harness.figure(row.get("us"), 1) if row.get("us") else "error", *fastest]
        cells.append([row["workload"], row["impl"], *figures, f"{ratio:.2f}" if ratio else "—", verdict])
    return cells


def _bound_cells(b: dict[str, Any]) -> list[Any]:
    if "error" in b:
        return [b["workload"], b["error"], "", "", "", "", ""]
    keys = (("compile_us", 1), ("fastest", 0), ("skeleton_us", 1), ("bound", 2), ("floor_us", 1), ("floor", 2))
    return [b["workload"], *(b[key] if key == "fastest" else harness.figure(b[key], digits) for key, digits in keys)]


#: The models, named for what runs (a patched model's attention modules keep the patch's implementation whatever
#: the model's config is set to).
HF_PEERS = {"stock (SDPA)": None, "lazyops patch (lazyops attention)": "lazyops", "liger-kernel patch (SDPA)": "liger"}
STOCK = next(iter(HF_PEERS))
#: ``generate_batch``'s runs: ``{row: (model, attention implementation set first, None: the model's own)}``.
HF_BATCH = {
    "stock, attention sdpa": (STOCK, "sdpa"),
    "stock, attention paged|eager": (STOCK, "paged|eager"),
    "lazyops patch, its attention (lazyops)": ("lazyops patch (lazyops attention)", None),
    "liger-kernel patch, attention sdpa": ("liger-kernel patch (SDPA)", "sdpa"),
}


def hf_models(options: Any, device: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Three copies of one random ``LlamaForCausalLM`` (bf16), two patched; ``{name: model}``, each one's
    ``apply_rotary_pos_emb`` (lazyops and liger replace the module's global: set before each call), the config."""
    import copy

    import torch
    from transformers.models.llama import modeling_llama

    import transformers

    s = SMOKE if options.smoke else LLAMA3_8B
    config = transformers.LlamaConfig(
        vocab_size=128 if options.smoke else 128256, hidden_size=s.hidden, intermediate_size=s.mlp,
        num_hidden_layers=2 if options.smoke else 4, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim, rms_norm_eps=s.eps, rope_theta=s.rope_theta, max_position_embeddings=8192,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        stock = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval().requires_grad_(False)
    models, ropes, original = {}, {}, modeling_llama.apply_rotary_pos_emb
    for name, how in HF_PEERS.items():
        model = stock if how is None else copy.deepcopy(stock)
        try:
            if how == "lazyops":
                import lazyops.transformers

                print(lazyops.transformers.patch(model), flush=True)
            elif how == "liger":
                from liger_kernel.transformers import apply_liger_kernel_to_llama

                apply_liger_kernel_to_llama(fused_linear_cross_entropy=False, model=model)
        except ImportError as error:
            models[name] = error
            continue
        models[name], ropes[name] = model, modeling_llama.apply_rotary_pos_emb
        modeling_llama.apply_rotary_pos_emb = original
    return models, ropes, config


def hf_case(name: str, model: Any, rope: Any, phase: str, batch: int, context: int) -> Any:
    """The harness case of one model: prefill (``batch`` prompts of ``context``) or one eager decode step over a
    ``DynamicCache`` of ``context`` tokens, cropped back after each step (as ``generate`` pays it: the cat)."""

    def setup(config: Any) -> tuple[Any, ...]:
        import torch
        from transformers.models.llama import modeling_llama

        if isinstance(model, Exception):
            raise model
        ids = torch.randint(0, model.config.vocab_size, (batch, context), generator=torch.Generator().manual_seed(1))
        ids = ids.to(model.device)

        def prefill(ids: Any) -> Any:
            modeling_llama.apply_rotary_pos_emb = rope
            return (model(ids, use_cache=False, logits_to_keep=1).logits,)

        if phase == "prefill":
            return prefill, [(ids,)]
        with torch.no_grad():
            cache = model(ids, use_cache=True, logits_to_keep=1).past_key_values
        step_ids = ids[:, -1:]

        def decode(step: Any) -> Any:
            modeling_llama.apply_rotary_pos_emb = rope
            logits = model(step, past_key_values=cache, use_cache=True).logits
            cache.crop(-1)  # the step's token: each call decodes after the same context
            return (logits,)

        return decode, [(step_ids,)]

    return harness.Case(name, "peer" if name == STOCK else "lazyops", setup)


def attention_used(model: Any) -> str:
    """The attention implementations ``model``'s attention modules are configured with: what a run really used."""
    found = {m.config._attn_implementation for m in model.modules() if type(m).__name__.endswith("Attention")}
    return ", ".join(sorted(str(name) for name in found))


def hf_batch(models: dict[str, Any], ropes: dict[str, Any], smoke: bool, write: Any) -> list[dict[str, Any]]:
    """``generate_batch`` throughput, interleaved rounds (``write(rows)`` after each): :data:`HF_BATCH`'s runs, each
    row with the attention its model's modules used."""
    import time

    import torch
    from transformers.models.llama import modeling_llama

    from transformers import GenerationConfig

    count, prompt, new = (3, 8, 4) if smoke else (64, 256, 128)
    vocab = next(m for m in models.values() if not isinstance(m, Exception)).config.vocab_size
    draw = [torch.randint(0, vocab, (prompt,), generator=torch.Generator().manual_seed(i)) for i in range(count)]
    prompts = [ids.tolist() for ids in draw]
    generation = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=-1, pad_token_id=0)
    runs = dict(HF_BATCH)
    samples: dict[str, list[float]] = {label: [] for label in runs}
    errors: dict[str, str] = {}
    used: dict[str, str] = {}
    for round_ in range(1 if smoke else 3):
        for label in list(runs)[round_ % len(runs) :] + list(runs)[: round_ % len(runs)]:
            name, attention = runs[label]
            model = models[name]
            if label in errors or isinstance(model, Exception):
                errors.setdefault(label, f"not installed here: {model}")
                continue
            try:
                if attention is not None:
                    model.set_attn_implementation(attention)
                used[label] = attention_used(model)
                modeling_llama.apply_rotary_pos_emb = ropes[name]
                started = time.perf_counter()
                with torch.no_grad():
                    out = model.generate_batch(inputs=prompts, generation_config=generation, progress_bar=False)
                if model.device.type == "cuda":
                    torch.cuda.synchronize(model.device)
                elapsed = time.perf_counter() - started
                made = sum(len(result.generated_tokens) for result in out.values())
                if made != count * new:  # transformers logs a failed request and goes on: not a figure
                    raise RuntimeError(f"{made} of {count * new} tokens generated (a request failed)")
                samples[label].append(made / elapsed)
            except Exception as error:  # noqa: BLE001 - one failing configuration is its row
                errors[label] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
            finally:
                if attention is not None:
                    model.set_attn_implementation("sdpa")
        rows = []
        for label, sample in samples.items():
            values = sorted(sample)
            figures = {"tokens_per_s": values[len(values) // 2], "low": values[0], "high": values[-1]} if values else {}
            rows.append(
                {"workload": "generate_batch", "impl": label, "attention": used.get(label, "")}
                | figures
                | ({"error": errors[label]} if label in errors else {})
            )
        write(rows)
    return rows


def _hf_time(row: dict[str, Any]) -> str:
    if "us" not in row:
        return "" if "tokens_per_s" in row else str(row.get("error", ""))
    ratio = f" ({row['vs_stock']:.2f}×)" if row.get("vs_stock") else ""
    return harness.figure(row["us"], 1, row.get("noisy")) + ratio


def _hf_rate(row: dict[str, Any]) -> str:
    return f"{row['tokens_per_s']:,.0f} [{row['low']:,.0f}–{row['high']:,.0f}]" if "tokens_per_s" in row else ""


def hugging_face(options: Any, device: str) -> int:
    import torch

    models, ropes, config = hf_models(options, device)
    context, rows = 16 if options.smoke else 512, []
    env = harness.environment(device) | {"model": config.to_diff_dict(), "dtype": str(torch.bfloat16)}

    def write(more: list[dict[str, Any]]) -> Any:  # as rows complete: a run cut at its time limit keeps them
        header = ["workload", "implementation", "µs (× stock)", "tokens/s [spread]", "attention used"]
        cells = [[r["workload"], r["impl"], _hf_time(r), _hf_rate(r), r.get("attention", "")] for r in rows + more]
        body = ["Prefill: stream time; decode: host time of back-to-back eager steps; generate_batch: 3 interleaved "
                "rounds, median [lowest–highest].", "", *harness.table(header, cells)]  # fmt: skip
        title = "A Hugging Face Llama on lazyops (lazyops.transformers.patch)"
        return harness.write(options.out, "hf", title, env, rows + more, body)

    workloads = [("prefill", 1, 16 if options.smoke else 2048), ("decode", 1, context), ("decode", 32, context)]
    for phase, batch, tokens in workloads:
        cases = [hf_case(name, models[name], ropes.get(name), phase, batch, tokens) for name in HF_PEERS]
        reference: list[Any] = []

        def check(
            case: Any, got: Any, reference: list[Any] = reference
        ) -> None:  # stock first: the others judged by it
            if not reference:
                reference.append(got)
            else:
                harness.judge([g.float() for g in got], [r.float() for r in reference[0]], 0.05)

        mode = "stream" if phase == "prefill" else "host"
        workload = f"{phase}-{tokens if phase == 'prefill' else batch}"
        timed = harness.measure(cases, workload, mode, device, calls=50, check=check)
        stock = timed.get(STOCK, {}).get("us")
        rows += [
            {"workload": workload, "impl": impl, "vs_stock": stock / t["us"] if stock and t.get("us") else None}
            | t
            | ({"attention": attention_used(models[impl])} if not isinstance(models[impl], Exception) else {})
            for impl, t in timed.items()
        ]
        write([])
    rows += hf_batch(models, ropes, options.smoke, write)
    print(f"wrote {write([])} and its .json")
    return 0 if all("wrong result" not in str(row.get("error", "")) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
