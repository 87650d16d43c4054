"""A Llama-3-8B decoder layer end to end: torch eager, torch.compile and lazyops' kernels per backend, in one run.

    python benchmarks/bench_layer.py --ceiling             # on the H200: results/h200/layer.{md,json}
    python benchmarks/bench_layer.py --workloads prefill-1024,decode-16 --backend triton
    python benchmarks/bench_layer.py --smoke --ceiling --device cpu --out /tmp/l   # the script's logic, tiny shapes
    python benchmarks/bench_layer.py --plan plan.json      # adds the layer of lazyops' namespace resolving by a plan
    python benchmarks/bench_layer.py --hf                  # a 4-layer Hugging Face Llama: stock, patched, liger
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
layer; the *floor* adds the memory-bound kernels' bytes (``spec.traffic``) at the device's copy rate. ``--hf``: a
Hugging Face ``LlamaForCausalLM`` of these shapes, 4 layers, bf16: stock (SDPA), ``lazyops.transformers.patch`` and
liger-kernel's ``apply_liger_kernel_to_llama``, interleaved: prefill 2048 (stream time), an eager decode step at batch 1
and 32 over 512 cached tokens (host time: eager decode is host-bound), and ``generate_batch`` (tokens/s; stock with
each paged attention transformers has here), each first checked against stock's logits (results ``hf.{md,json}``).
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

    def kernels(self, dtype: Any) -> dict[str, tuple[str, tuple[Any, ...]]]:
        """The layer's kernel configurations by role: ``{role: (kernel, factory arguments)}``."""
        hidden, q, kv, mlp = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.mlp
        return {
            "rmsnorm": ("rmsnorm_tl", (hidden, dtype, self.eps)),
            "add_rmsnorm": ("add_rmsnorm_tl", (hidden, dtype, self.eps)),
            "rope": ("rope_tl", (self.head_dim, dtype, True)),
            "silu_and_mul": ("silu_and_mul_tl", (mlp, dtype)),
            "qkv": ("matmul_tl", (q + 2 * kv, hidden, dtype)),
            "o": ("matmul_tl", (hidden, q, dtype)),
            "gate_up": ("matmul_tl", (2 * mlp, hidden, dtype)),
            "down": ("matmul_tl", (hidden, mlp, dtype)),
        }


LLAMA3_8B = Shape(hidden=4096, heads=32, kv_heads=8, head_dim=128, mlp=14336, rope_rows=8192, context=1024)
SMOKE = Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, mlp=512, rope_rows=64, context=16)
MEMORY_BOUND, GEMMS = ("rmsnorm", "add_rmsnorm", "rope", "silu_and_mul"), ("qkv", "o", "gate_up", "down")


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
    silu_and_mul: Callable[..., Any]
    qkv: Callable[..., Any]
    o: Callable[..., Any]
    gate_up: Callable[..., Any]
    down: Callable[..., Any]
    attention: Attention


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

    return Ops(rmsnorm, add_rmsnorm, rope, silu_and_mul, mm, mm, mm, mm, attention)


def lazyops_ops(backend: str, shape: Shape, dtype: Any, attention: Attention) -> Ops:
    """Every kernel from ``backend``'s own factories (``lazyops.<backend>.<kernel>``; ``"namespace"``: lazyops'
    namespace, as an engine takes them, resolved by ``LAZYOPS_BACKEND``/``LAZYOPS_PLAN``, traced by
    ``LAZYOPS_TRACE``), each built once. Query and key go into rope as the views of the QKV output they are."""
    source = None if backend == "namespace" else backend
    built = {role: harness.factory(source, kernel)(*args) for role, (kernel, args) in shape.kernels(dtype).items()}
    add_rmsnorm = built["add_rmsnorm"]
    built["add_rmsnorm"] = lambda x, residual, weight: (add_rmsnorm(x, residual, weight), residual)
    return Ops(**built, attention=attention)


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
    gemms = {role: shape.kernels(dtype)[role][1] for role in GEMMS}  # matmul_tl(n, k): a weight [k, n]
    weights |= {role: linear(k, n) for role, (n, k, _) in gemms.items()}
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

    def back(attended: Any, hidden: Any) -> tuple[Any, Any]:
        h, residual = ops.add_rmsnorm(ops.o(attended, w["o"]), hidden, w["post_norm"])
        return ops.down(ops.silu_and_mul(ops.gate_up(h, w["gate_up"])), w["down"]), residual

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
    shape: Shape, dtype: Any, device: str, status: dict[str, str | None], ceiling: bool, plan: bool = False
) -> list[Impl]:
    """What to time; ``plan``: the layer of lazyops' namespace too (``LAZYOPS_PLAN`` set by ``main``)."""

    def ops_of(backend: str, problem: str | None = None) -> Callable[[], Ops]:
        def build() -> Ops:
            if problem:
                raise RuntimeError(f"unavailable: {problem}")
            return lazyops_ops(backend, shape, dtype, attention_for(backend, shape, dtype, device))

        return functools.cache(build)

    natural = functools.cache(lambda: torch_ops(shape, attention_for(None, shape, dtype, device)))
    variants = [(EAGER, "peer", natural)] + ([(PLANNED, "lazyops", ops_of("namespace"))] if plan else [])
    skeletons = [Impl("skeleton, cuBLAS GEMMs", "skeleton", lambda: skeleton(natural()))] if ceiling else []
    for backend, problem in status.items():
        own = ops_of(backend, problem)
        variants.append((f"lazyops {backend}", "lazyops", own))
        if backend != "torch":  # the engine's usual mix: this backend's other kernels around cuBLAS's GEMMs
            mixed = functools.cache(lambda o=own: dataclasses.replace(o(), **{g: getattr(natural(), g) for g in GEMMS}))
            variants.append((f"lazyops {backend}, cuBLAS GEMMs", "lazyops", mixed))
        if ceiling and not problem and backend != "torch":
            skeletons.append(Impl(f"skeleton, lazyops {backend} GEMMs", "skeleton", lambda o=own: skeleton(o())))
    compiled = [Impl(COMPILED if n == EAGER else f"{n} + torch.compile", k, ops, True) for n, k, ops in variants]
    return [impl for pair in zip([Impl(*v) for v in variants], compiled, strict=True) for impl in pair] + skeletons


def case(impl: Impl, weights: dict[str, Any], shape: Shape, phase: str, inputs: tuple[Any, ...]) -> Any:
    """The harness case of ``impl`` at one workload: the layer built (compiled) on its own copy of the inputs."""

    def setup(workload: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
        import torch

        ops = impl.ops()
        own = inputs
        if phase == "decode" and ops.attention.adopt is not None:  # this attention's own cache, same numbers
            own = (*inputs[:2], *ops.attention.adopt(*inputs[2:]))
        layer = make_layer(ops, weights, shape, phase)
        if impl.compiled:
            dynamo = "inductor" if inputs[0].is_cuda else "eager"
            fullgraph = impl.kind == "lazyops"  # lazyops' kernels are custom operators under the compiler
            layer = torch.compile(harness.engine().own_code(layer), fullgraph=fullgraph, dynamic=False, backend=dynamo)
        return layer, [clone(own)]

    return harness.Case(impl.name, impl.kind, setup)


def clone(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies: lazyops updates the residual (the input) in place, every decode step writes its cache slot."""
    return tuple(t.clone() for t in inputs)


def measure_workload(phase: str, tokens: int, impls: list[Impl], shape: Shape, device: str) -> list[dict[str, Any]]:
    """Every implementation at one workload, interleaved: a row each, with its relative errors and × torch.compile."""
    import torch

    from lazyops.testing import TOLERANCE

    dtype, name = torch.bfloat16, f"{phase}-{tokens}"
    weights = make_weights(shape, dtype, device)
    inputs = make_inputs(shape, phase, tokens, dtype, device)
    reference_ops = torch_ops(shape, attention_for(None, shape, torch.float32, device))
    wide = {key: tensor.float() for key, tensor in weights.items()}
    with torch.no_grad():  # torch's layer in float32 on the weights and inputs upcast: what every one is judged by
        upcast = (t.float() if t.is_floating_point() else t for t in clone(inputs))
        reference = make_layer(reference_ops, wide, shape, phase)(*upcast)
    errors: dict[str, list[float]] = {}

    def check(case: Any, got: Any) -> None:  # skeletons skip work on purpose: not judged
        if case.kind != "skeleton":
            errors[case.name] = harness.judge(got, reference, TOLERANCE_FACTOR * TOLERANCE[dtype])

    chosen = [impl for impl in impls if impl.kind != "skeleton" or phase == "prefill"]
    cases = [case(impl, weights, shape, phase, inputs) for impl in chosen]
    mode = "graph" if device.startswith("cuda") and phase == "decode" else "stream"
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
    for role in MEMORY_BOUND:  # the bytes the layer's memory-bound kernels must move, from their specs
        kernel, args = shape.kernels(torch.bfloat16)[role]
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
    parser.add_argument("--name", default="layer", help="the result files' stem (default layer)")
    parser.add_argument("--plan", type=Path, help="also time the layer of lazyops' namespace under this plan")
    parser.add_argument("--build-only", action="store_true", help="build the namespace's kernels and stop")
    parser.add_argument("--hf", action="store_true", help="a Hugging Face Llama: stock, lazyops' patch, liger's")
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
    chosen = options.workloads or (SMOKE_WORKLOADS if options.smoke else WORKLOADS)
    workloads = [_workload(text) for text in chosen.split(",")]
    longest = max([tokens for phase, tokens in workloads if phase == "prefill"] + [shape.context + 1])
    shape = dataclasses.replace(shape, rope_rows=max(shape.rope_rows, 1 << (longest - 1).bit_length()))
    if options.build_only:
        lazyops_ops("namespace", shape, dtype, attention_for(None, shape, dtype, device))
        print("built the layer's kernels from lazyops' namespace:", ", ".join(resolved(shape, dtype)))
        return 0
    everything = harness.backends(options.backend)
    status = {name: problem for name, problem in everything.items() if problem is None or options.backend}
    impls = implementations(shape, dtype, device, status, options.ceiling, plan=options.plan is not None)
    env = harness.environment(device, everything) | {"shape": dataclasses.asdict(shape)}
    env["tolerance"] = TOLERANCE_FACTOR * TOLERANCE[dtype]
    env["attention"] = {name or "torch": attention_for(name, shape, dtype, device).name for name in [None, *status]}
    if options.plan:
        env["plan"] = {"file": str(options.plan), "resolved": resolved(shape, dtype)}
    copy = harness.engine().copy_ceiling(16 if options.smoke else 256, device=device) if options.ceiling else None
    rows, bounds = [], []
    for phase, tokens in workloads:
        rows += (measured := measure_workload(phase, tokens, impls, shape, device))
        bounds += [bound(measured, shape, tokens, copy)] if copy is not None and phase == "prefill" else []
        written = harness.write(options.out, options.name, TITLE, env, rows + bounds, render(rows, bounds, env, copy))
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
        f"MLP {shape['mlp']}; bf16; decode over {shape['context']} cached tokens. Prefill: stream time (`do_bench`, "
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
