"""A Llama-3-8B decoder layer end to end: torch eager, torch.compile and lazyops' kernels per backend, in one run.

    python benchmarks/layer.py --ceiling             # on the H200: results/h200/layer.{md,json}
    python benchmarks/layer.py --workloads prefill-1024,decode-16 --backend triton
    python benchmarks/layer.py --smoke --ceiling --device cpu --out /tmp/l   # the script's logic, tiny shapes
    python benchmarks/layer.py --plan plan.json      # adds the layer of lazyops' namespace resolving by a plan
    LAZYOPS_TRACE=t.jsonl LAZYOPS_TRACE_ARGS=1 python benchmarks/layer.py --build-only   # the layer's trace

The layer (hidden 4096; 32 query and 8 KV heads of 128; MLP 14336; neox rope over a float32 cos/sin cache), in an
engine's order: rmsnorm, QKV GEMM, rope, attention, O GEMM, add_rmsnorm (the residual, updated in place), gate-up
GEMM, SiLU-and-mul, down GEMM. The layer input is the residual stream; the layer returns ``(mlp output, input +
attention output)``. Weights are random bf16 scaled by 1/sqrt(fan-in).

Implementations, interleaved at each workload: ``torch eager`` (``F.rms_norm``, ``@``, vLLM's native rope,
``F.silu``), ``torch.compile`` of it (the baseline every ratio is taken against), and per lazyops backend that runs
here: its kernels (GEMMs included), the same under ``torch.compile(fullgraph=True)``, and its norms, rope and
activation around the torch backend's GEMMs (cuBLAS: the engine's usual mix), also compiled.

Attention is :func:`attention_for`'s: the one place where a backend's attention kernels enter the layer. Torch's
layers (and the torch backend's, whose paged attention reads lengths on the host, which a CUDA graph cannot
capture) use ``F.scaled_dot_product_attention`` over a contiguous KV cache; every other backend its own
``kv_cache_write_tl`` and ``paged_attention_tl`` over a paged cache of 16-token blocks holding the same numbers.

Workloads: prefill of 1024 and 8192 tokens (stream time, ``do_bench``, the L2 flushed) and decode at batch 1, 16 and
64 over 1024 cached tokens (per step inside a CUDA graph: 50 steps captured, 20 replays). Each implementation's
output and residual are first checked against the torch layer in float32 (four times a kernel's bf16 tolerance:
a layer chains about ten roundings); a wrong one is an error, not a figure. Goals: lazyops >= 1.15x torch.compile
at prefill, >= 1.0x at decode.

``--plan FILE`` adds ``lazyops plan`` (and its compiled twin): the layer's kernels taken from lazyops' namespace
(``lazyops.rmsnorm_tl(...)``, as an engine takes them) with ``LAZYOPS_PLAN=FILE`` and ``LAZYOPS_PLAN_STRICT=1`` (a
plan that does not apply here stops the run rather than measure the default), so each configuration comes from the
backend ``lazyops tune`` chose for it; the result's header names where each one resolved. ``--build-only`` builds
those namespace kernels and stops: under ``LAZYOPS_TRACE`` and ``LAZYOPS_TRACE_ARGS=1``, the layer's trace, which
``lazyops tune --from-trace`` reads (``benchmarks/tune.py`` does both).

``--ceiling`` adds, at prefill, the layer's *skeleton* per GEMM provider: the same layer with its GEMMs and its
attention, every memory-bound kernel made free (timed as a layer: a layer runs faster than the sum of its parts
timed alone). No kernels around those GEMMs and that attention beat the fastest skeleton, so torch.compile's time
over it is the *bound* of any lazyops layer; the *floor* adds each memory-bound kernel's bytes (``spec.traffic``)
at the device's copy rate.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

EAGER, COMPILED = "torch eager", "torch.compile"
#: The row of ``--plan``: the layer's kernels from lazyops' namespace, resolved by the plan.
PLANNED = "lazyops plan"
GOALS = {"prefill": 1.15, "decode": 1.0}
#: A layer chains about ten bf16 roundings where one kernel has one: judged at four times a kernel's tolerance.
TOLERANCE_FACTOR = 4
WORKLOADS = "prefill-1024,prefill-8192,decode-1,decode-16,decode-64"
MEMORY_BOUND = ("rmsnorm", "rope", "add_rmsnorm", "silu_and_mul")


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

    @property
    def q_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim


LLAMA3_8B = Shape(hidden=4096, heads=32, kv_heads=8, head_dim=128, mlp=14336, rope_rows=8192, context=1024)
SMOKE = Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, mlp=512, rope_rows=64, context=16)


@dataclass(frozen=True)
class Attention:
    """The layer's attention: the seam where a backend's attention kernels come in.

    - ``cache(batch, generator) -> tensors``: the KV cache of ``batch`` sequences holding ``shape.context`` cached
      tokens and room for one more, in whatever layout the attention reads (contiguous here; pages and a block table
      for a paged kernel); it travels as the decode step's trailing inputs.
    - ``prefill(q, k, v) -> out``: causal attention over one sequence; ``q [T, Hq * D]``, ``k``, ``v [T, Hkv * D]``
      (views of the QKV output), ``out [T, Hq * D]``.
    - ``decode(q, k, v, *cache) -> out``: each sequence's new token (``q [B, Hq * D]``, ``k``, ``v [B, Hkv * D]``)
      written into its cache, then attended over it: ``out [B, Hq * D]``.
    """

    name: str
    cache: Callable[..., tuple[Any, ...]]
    prefill: Callable[..., Any]
    decode: Callable[..., Any]
    #: the common contiguous cache (``cache``'s of torch's layers: every implementation is judged on the same
    #: numbers) in this attention's own layout, made once, outside the timing; None: it reads that one as it is
    adopt: Callable[..., tuple[Any, ...]] | None = None


def sdpa_attention(shape: Shape, dtype: Any, device: str) -> Attention:
    """``F.scaled_dot_product_attention`` (GQA by ``enable_gqa``) over a contiguous ``[B, Hkv, context + 1, D]``
    cache whose last slot takes the new token."""
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


#: The paged cache's block size (vLLM's default).
BLOCK_SIZE = 16


def paged_attention(name: str, factory: Callable[[str], Any], shape: Shape, dtype: Any, device: str) -> Attention:
    """lazyops' ``kv_cache_write_tl`` and ``paged_attention_tl`` (from ``factory(kernel name)``) over a paged cache of
    16-token blocks, scattered by a fixed permutation as an engine's allocator leaves them: at decode each
    sequence's new token written into its slot, then attended over its ``context + 1`` tokens; at prefill the
    sequence's tokens written into a cache of their own (made once per token count), then attended causally."""
    import torch

    heads, kv_heads, head_dim, context = shape.heads, shape.kv_heads, shape.head_dim, shape.context
    write = factory("kv_cache_write_tl")(kv_heads, head_dim, dtype, block_size=BLOCK_SIZE)
    attend = factory("paged_attention_tl")(
        heads, kv_heads, head_dim, dtype, block_size=BLOCK_SIZE, max_seq_len=max(8192, context + 1)
    )
    per_sequence = -(-(context + 1) // BLOCK_SIZE)
    prefill_caches: dict[int, tuple[Any, ...]] = {}

    def pages(batch: int, blocks: int) -> tuple[Any, Any]:
        """A block table of ``batch`` rows of ``blocks`` scattered block ids, and its inverse order."""
        order = torch.randperm(batch * blocks, generator=torch.Generator().manual_seed(2))
        return order.view(batch, blocks).to(torch.int32).to(device), order

    def adopt(k_cache: Any, v_cache: Any) -> tuple[Any, ...]:
        batch = k_cache.shape[0]
        table, order = pages(batch, per_sequence)

        def paged(cache: Any) -> Any:
            padded = torch.zeros(batch, kv_heads, per_sequence * BLOCK_SIZE, head_dim, dtype=dtype, device=device)
            padded[:, :, : context + 1] = cache
            blocks = padded.view(batch, kv_heads, per_sequence, BLOCK_SIZE, head_dim).permute(0, 2, 3, 1, 4)
            ordered = blocks.reshape(batch * per_sequence, BLOCK_SIZE, kv_heads, head_dim)
            scattered = torch.empty_like(ordered)
            scattered[order.to(device)] = ordered
            return scattered

        seq_lens = torch.full((batch,), context + 1, dtype=torch.int32, device=device)
        starts = torch.arange(batch + 1, dtype=torch.int32, device=device)
        slots = (table[:, context // BLOCK_SIZE].long() * BLOCK_SIZE + context % BLOCK_SIZE).contiguous()
        return paged(k_cache), paged(v_cache), table, seq_lens, starts, slots

    def prefill(q: Any, k: Any, v: Any) -> Any:
        tokens = q.shape[0]
        cache = prefill_caches.get(tokens)
        if cache is None:  # an engine's cache exists before its prefill: made once, outside the timing
            blocks = -(-tokens // BLOCK_SIZE)
            table, _ = pages(1, blocks)
            size = (blocks, BLOCK_SIZE, kv_heads, head_dim)
            cache = prefill_caches[tokens] = (
                torch.empty(size, dtype=dtype, device=device),
                torch.empty(size, dtype=dtype, device=device),
                table,
                torch.tensor([tokens], dtype=torch.int32, device=device),
                torch.tensor([0, tokens], dtype=torch.int32, device=device),
                (
                    table[0].long().repeat_interleave(BLOCK_SIZE) * BLOCK_SIZE
                    + torch.arange(BLOCK_SIZE, device=device).repeat(blocks)
                )[:tokens].contiguous(),
            )
        key_cache, value_cache, table, seq_lens, starts, slots = cache
        write(k, v, key_cache, value_cache, slots)
        return attend(q, key_cache, value_cache, table, seq_lens, starts)

    def decode(q: Any, k: Any, v: Any, *cache: Any) -> Any:
        key_cache, value_cache, table, seq_lens, starts, slots = cache
        write(k, v, key_cache, value_cache, slots)
        return attend(q, key_cache, value_cache, table, seq_lens, starts)

    contiguous = sdpa_attention(shape, dtype, device)
    return Attention(name, contiguous.cache, prefill, decode, adopt)


def attention_for(backend: str | None, shape: Shape, dtype: Any, device: str) -> Attention:
    """The attention of ``backend``'s layer: torch's SDPA over a contiguous cache for torch's layers (``None``) and
    for the torch backend (its paged attention reads the lengths on the host, which a CUDA graph cannot capture);
    lazyops' paged attention and KV-cache write for every other backend (``"namespace"``: from lazyops' namespace,
    each configuration where the settings in force send it)."""
    if backend is None or backend == "torch":
        return sdpa_attention(shape, dtype, device)
    if backend == "namespace":
        import lazyops

        return paged_attention("lazyops paged attention", lambda kernel: getattr(lazyops, kernel), shape, dtype, device)
    return paged_attention(
        f"lazyops {backend} paged attention", lambda kernel: harness.factory(backend, kernel), shape, dtype, device
    )


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

    def rmsnorm(x: Any, weight: Any) -> Any:
        return F.rms_norm(x, (hidden,), weight, eps)

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

    def mm(a: Any, b: Any) -> Any:
        return a @ b

    return Ops(rmsnorm, add_rmsnorm, rope, silu_and_mul, mm, mm, mm, mm, attention)


def lazyops_ops(backend: str, shape: Shape, dtype: Any, attention: Attention) -> Ops:
    """Every kernel from ``backend``'s own factories (``lazyops.<backend>.<kernel>``), built once."""
    return ops_from(lambda kernel: harness.factory(backend, kernel), shape, dtype, attention)


def namespace_ops(shape: Shape, dtype: Any, attention: Attention) -> Ops:
    """Every kernel from lazyops' namespace (``lazyops.<kernel>``), as an engine takes them: each configuration
    resolved by the configuration in force (``LAZYOPS_BACKEND``, ``LAZYOPS_PLAN``), and traced by ``LAZYOPS_TRACE``."""
    import lazyops

    return ops_from(lambda kernel: getattr(lazyops, kernel), shape, dtype, attention)


def ops_from(factory: Callable[[str], Any], shape: Shape, dtype: Any, attention: Attention) -> Ops:
    """The layer's kernels, each built once from ``factory(kernel name)``."""
    add_rmsnorm = factory("add_rmsnorm_tl")(shape.hidden, dtype, shape.eps)
    matmul = factory("matmul_tl")

    def add_rmsnorm_in_place(x: Any, residual: Any, weight: Any) -> tuple[Any, Any]:
        return add_rmsnorm(x, residual, weight), residual

    return Ops(
        rmsnorm=factory("rmsnorm_tl")(shape.hidden, dtype, shape.eps),
        add_rmsnorm=add_rmsnorm_in_place,
        # query and key go in as the views of the QKV output they are, rotated where they lie, as engines call it
        rope=factory("rope_tl")(shape.head_dim, dtype, True),
        silu_and_mul=factory("silu_and_mul_tl")(shape.mlp, dtype),
        qkv=matmul(shape.q_size + 2 * shape.kv_size, shape.hidden, dtype),
        o=matmul(shape.hidden, shape.q_size, dtype),
        gate_up=matmul(2 * shape.mlp, shape.hidden, dtype),
        down=matmul(shape.hidden, shape.mlp, dtype),
        attention=attention,
    )


def with_gemms(ops: Ops, gemms: Ops) -> Ops:
    """``ops`` with the four GEMMs of ``gemms``: a backend's norms, rope and activation around another's GEMMs."""
    return dataclasses.replace(ops, qkv=gemms.qkv, o=gemms.o, gate_up=gemms.gate_up, down=gemms.down)


def skeleton(gemms: Ops) -> Ops:
    """``gemms``' GEMMs and attention, every memory-bound kernel free (no GPU work): the layer's bound."""

    def silu_and_mul(x: Any) -> Any:
        return x.new_empty((x.shape[0], x.shape[-1] // 2))

    return dataclasses.replace(
        gemms,
        rmsnorm=lambda x, weight: x,
        add_rmsnorm=lambda x, residual, weight: (x, residual),
        rope=lambda positions, query, key, cache: (query, key),
        silu_and_mul=silu_and_mul,
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
    return {
        "input_norm": norm(),
        "qkv": linear(shape.hidden, shape.q_size + 2 * shape.kv_size),
        "o": linear(shape.q_size, shape.hidden),
        "post_norm": norm(),
        "gate_up": linear(shape.hidden, 2 * shape.mlp),
        "down": linear(shape.mlp, shape.hidden),
        "cos_sin_cache": torch.cat([angles.cos(), angles.sin()], dim=-1).float().to(device),
    }


def make_inputs(shape: Shape, phase: str, tokens: int, attention: Attention, dtype: Any, device: str) -> tuple:
    """``(hidden, positions)`` at prefill; ``(hidden, positions, *cache)`` at decode (the new token's position is
    ``shape.context``)."""
    import torch

    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(tokens, shape.hidden, generator=g).to(dtype).to(device)
    if phase == "prefill":
        return hidden, torch.arange(tokens, device=device)
    positions = torch.full((tokens,), shape.context, dtype=torch.long, device=device)
    return hidden, positions, *attention.cache(tokens, g)


def make_layer(ops: Ops, weights: dict[str, Any], shape: Shape, phase: str) -> Callable[..., Any]:
    """One decoder layer step: ``layer(hidden, positions[, *cache]) -> (out, residual)``."""
    sizes = [shape.q_size, shape.kv_size, shape.kv_size]
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
    ops: Callable[[], Ops] | None  # None: cannot run here (``problem`` says why)
    compiled: bool = False
    problem: str | None = None


def implementations(
    shape: Shape, dtype: Any, device: str, status: dict, ceiling: bool, plan: bool = False
) -> list[Impl]:
    """What to time; each implementation's kernels are built once and shared by every workload and its compiled
    twin. ``plan``: the layer of lazyops' namespace too (``LAZYOPS_PLAN`` set by ``main``)."""
    import functools

    natural = functools.cache(lambda: torch_ops(shape, attention_for(None, shape, dtype, device)))
    impls = [Impl(EAGER, "peer", natural), Impl(COMPILED, "peer", natural, compiled=True)]
    if plan:
        planned = functools.cache(lambda: namespace_ops(shape, dtype, attention_for("namespace", shape, dtype, device)))
        impls += [Impl(PLANNED, "lazyops", planned), Impl(f"{PLANNED} + torch.compile", "lazyops", planned, True)]
    skeletons = [Impl("skeleton, cuBLAS GEMMs", "skeleton", lambda: skeleton(natural()))] if ceiling else []
    for backend, problem in status.items():
        own = functools.cache(lambda b=backend: lazyops_ops(b, shape, dtype, attention_for(b, shape, dtype, device)))
        variants = [(f"lazyops {backend}", own)]
        if backend != "torch":  # the engine's usual mix: this backend's other kernels around cuBLAS's GEMMs
            variants.append(
                (f"lazyops {backend}, cuBLAS GEMMs", functools.cache(lambda o=own: with_gemms(o(), natural())))
            )
        for label, ops in variants:
            impls.append(Impl(label, "lazyops", None if problem else ops, False, problem))
            impls.append(Impl(f"{label} + torch.compile", "lazyops", None if problem else ops, True, problem))
        if ceiling and not problem and backend != "torch":
            skeletons.append(Impl(f"skeleton, lazyops {backend} GEMMs", "skeleton", lambda o=own: skeleton(o())))
    return impls + skeletons


def case(impl: Impl, weights: dict, shape: Shape, phase: str, inputs: tuple, check: Callable, dynamo: str) -> Any:
    """The harness case of ``impl`` at one workload: the layer built (compiled), run once on fresh inputs and judged
    by ``check`` (skeletons are not judged: they skip work on purpose), then timed on its own copy of the inputs."""

    def setup(workload: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
        import torch

        if impl.ops is None:
            raise RuntimeError(f"unavailable: {impl.problem}")
        ops = impl.ops()
        if phase == "decode" and ops.attention.adopt is not None:  # this attention's own cache, same numbers
            hidden, positions, *cache = inputs
            own_inputs = (hidden, positions, *ops.attention.adopt(*cache))
        else:
            own_inputs = inputs
        layer = make_layer(ops, weights, shape, phase)
        if impl.compiled:
            fullgraph = impl.kind == "lazyops"  # lazyops' kernels are custom operators under the compiler
            layer = torch.compile(harness.engine().own_code(layer), fullgraph=fullgraph, dynamic=False, backend=dynamo)
        with torch.no_grad():
            got = layer(*clone(own_inputs))
        if impl.kind != "skeleton":
            check(impl.name, got)
        return layer, [clone(own_inputs)]

    return harness.Case(impl.name, impl.kind, setup)


def clone(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies: lazyops updates the residual (the input) in place, every decode step writes its cache slot."""
    return tuple(t.clone() for t in inputs)


def traffic_bytes(shape: Shape, tokens: int, dtype: Any) -> int:
    """The bytes the layer's memory-bound kernels must move at ``tokens``, from their specs."""
    from lazyops.specs import spec

    rope_geometry = {"query_heads": shape.heads, "key_heads": shape.kv_heads, "rotary_dim": shape.head_dim}
    parts = [
        ("rmsnorm_tl", (shape.hidden, dtype), {}),
        ("add_rmsnorm_tl", (shape.hidden, dtype), {}),
        ("silu_and_mul_tl", (shape.mlp, dtype), {}),
        ("rope_tl", (shape.head_dim, dtype), rope_geometry),
    ]
    return sum(spec(name).traffic(spec(name).bind(*args), tokens, geometry).bytes for name, args, geometry in parts)


def float32_reference(shape: Shape, weights: dict[str, Any], inputs: tuple[Any, ...], phase: str, device: str) -> Any:
    """torch's layer in float32 on the weights and inputs upcast: what every implementation is judged against."""
    import torch

    ops = torch_ops(shape, attention_for(None, shape, torch.float32, device))
    wide = {name: tensor.float() for name, tensor in weights.items()}
    with torch.no_grad():
        return make_layer(ops, wide, shape, phase)(*(t.float() if t.is_floating_point() else t for t in clone(inputs)))


def measure_workload(phase: str, tokens: int, impls: list[Impl], shape: Shape, device: str, smoke: bool) -> list[dict]:
    """Every implementation at one workload, interleaved: a row each, with its relative errors and × torch.compile."""
    import torch

    from lazyops.testing import TOLERANCE, relative_error

    dtype, cuda, name = torch.bfloat16, device.startswith("cuda"), f"{phase}-{tokens}"
    tolerance = TOLERANCE_FACTOR * TOLERANCE[dtype]
    weights = make_weights(shape, dtype, device)
    inputs = make_inputs(shape, phase, tokens, attention_for(None, shape, dtype, device), dtype, device)
    reference = float32_reference(shape, weights, inputs, phase, device)
    errors: dict[str, tuple[float, float]] = {}

    def check(impl: str, got: Any) -> None:
        errors[impl] = (relative_error(got[0], reference[0]), relative_error(got[1], reference[1]))
        if not max(errors[impl]) <= tolerance:  # NaN too
            raise ValueError(f"wrong result: relative errors {errors[impl][0]:.1e} / {errors[impl][1]:.1e}")

    chosen = [impl for impl in impls if impl.kind != "skeleton" or phase == "prefill"]
    cases = [case(impl, weights, shape, phase, inputs, check, "inductor" if cuda else "eager") for impl in chosen]
    mode = "graph" if cuda and phase == "decode" else "stream"
    timed = harness.measure(cases, name, mode, device, rounds=1 if smoke else 3, round_s=0.002 if smoke else 0.06)
    rows = []
    for impl in chosen:
        row = {"workload": name, "phase": phase, "tokens": tokens, "impl": impl.name, "kind": impl.kind, "mode": mode}
        row.update(timed[impl.name])
        row["error_out"], row["error_residual"] = errors.get(impl.name, (None, None))
        rows.append(row)
    baseline = next((row.get("us") for row in rows if row["impl"] == COMPILED), None)
    for row in rows:
        if row.get("us") and baseline:
            row["vs_compile"] = baseline / row["us"]
    return rows


def bound(rows: list[dict], shape: Shape, tokens: int, copy: Any) -> dict:
    """The ceiling at a prefill workload: the fastest skeleton, the bound over torch.compile, the floor."""
    import torch

    workload = rows[0]["workload"]
    compile_us = next((row.get("us") for row in rows if row["impl"] == COMPILED), None)
    fastest = min(
        (row for row in rows if row["kind"] == "skeleton" and row.get("us")), key=lambda row: row["us"], default=None
    )
    if fastest is None or not compile_us or not copy.rate:
        return {"workload": workload, "kind": "bound", "error": "torch.compile, a skeleton or the copy did not run"}
    moved = traffic_bytes(shape, tokens, torch.bfloat16)
    floor_us = fastest["us"] + moved / copy.rate / 1e3
    return {
        "workload": workload,
        "kind": "bound",
        "compile_us": compile_us,
        "fastest": fastest["impl"],
        "skeleton_us": fastest["us"],
        "bound": compile_us / fastest["us"],
        "memory_bound_bytes": moved,
        "copy_gbs": copy.rate,
        "floor_us": floor_us,
        "floor": compile_us / floor_us,
    }


def use_plan(path: Path) -> None:
    """Make lazyops resolve by the plan in ``path``, strictly: a plan that does not apply here (another device or
    version) is an error, not a layer of the default backends measured under the plan's name."""
    import os

    if not path.is_file():
        sys.exit(f"--plan {path}: no such file; make one with `lazyops tune --from-trace TRACE --output {path}`")
    os.environ["LAZYOPS_PLAN"] = str(path)
    os.environ["LAZYOPS_PLAN_STRICT"] = "1"


def resolved(shape: Shape, dtype: Any) -> list[str]:
    """Where each kernel configuration of the layer resolves: ``rmsnorm_tl(n=4096, ...): triton (plan)``."""
    import lazyops
    from lazyops.specs import spec

    calls = [
        ("rmsnorm_tl", (shape.hidden, dtype, shape.eps)),
        ("add_rmsnorm_tl", (shape.hidden, dtype, shape.eps)),
        ("rope_tl", (shape.head_dim, dtype, True)),
        ("silu_and_mul_tl", (shape.mlp, dtype)),
        ("matmul_tl", (shape.q_size + 2 * shape.kv_size, shape.hidden, dtype)),
        ("matmul_tl", (shape.hidden, shape.q_size, dtype)),
        ("matmul_tl", (2 * shape.mlp, shape.hidden, dtype)),
        ("matmul_tl", (shape.hidden, shape.mlp, dtype)),
    ]
    found = []
    for kernel, args in calls:
        resolution = lazyops.which(kernel, *args)
        found.append(f"{spec(kernel).bind(*args).label}: {resolution.backend} ({resolution.reason})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--workloads", help=f"comma list of prefill-<tokens>, decode-<batch> (default {WORKLOADS})")
    parser.add_argument("--ceiling", action="store_true", help="the skeletons, the bound and the floor at prefill")
    parser.add_argument("--name", default="layer", help="the result files' stem (default layer)")
    parser.add_argument("--plan", type=Path, help="also time the layer of lazyops' namespace under this plan")
    parser.add_argument(
        "--build-only", action="store_true", help="build the namespace's kernels and stop (record a trace with it)"
    )
    options = parser.parse_args(argv)
    if options.plan:
        use_plan(options.plan)
    device = harness.start(options)
    import torch

    from lazyops.testing import TOLERANCE

    shape = SMOKE if options.smoke else LLAMA3_8B
    workloads = [
        _workload(text) for text in (options.workloads or (SMOKE_WORKLOADS if options.smoke else WORKLOADS)).split(",")
    ]
    longest = max([tokens for phase, tokens in workloads if phase == "prefill"] + [shape.context + 1])
    shape = dataclasses.replace(shape, rope_rows=max(shape.rope_rows, 1 << (longest - 1).bit_length()))
    if options.build_only:
        namespace_ops(shape, torch.bfloat16, attention_for(None, shape, torch.bfloat16, device))
        print("built the layer's kernels from lazyops' namespace:", ", ".join(resolved(shape, torch.bfloat16)))
        return 0
    status = harness.backends(options.backend)
    status = {name: problem for name, problem in status.items() if problem is None or options.backend}
    impls = implementations(shape, torch.bfloat16, device, status, options.ceiling, plan=options.plan is not None)
    env = harness.environment(device) | {"shape": dataclasses.asdict(shape)}
    env["tolerance"] = TOLERANCE_FACTOR * TOLERANCE[torch.bfloat16]
    env["backends"] = {name: problem or "runs" for name, problem in harness.backends(options.backend).items()}
    env["attention"] = {
        name or "torch": attention_for(name, shape, torch.bfloat16, device).name for name in [None, *status]
    }
    if options.plan:
        env["plan"] = {"file": str(options.plan), "resolved": resolved(shape, torch.bfloat16)}
    copy = harness.engine().copy_ceiling(16 if options.smoke else 256, device=device) if options.ceiling else None
    out, started, rows, bounds = options.out or harness.folder(device), time.perf_counter(), [], []
    for phase, tokens in workloads:
        measured = measure_workload(phase, tokens, impls, shape, device, options.smoke)
        rows += measured
        if copy is not None and phase == "prefill":
            bounds.append(bound(measured, shape, tokens, copy))
        for row in measured:
            print(f"{row['workload']} {row['impl']}: {row.get('us') or row.get('error')}", flush=True)
        env["elapsed_s"] = round(time.perf_counter() - started)
        written = harness.write(out, options.name, TITLE, env, rows + bounds, render(rows, bounds, env, copy))
    print(f"wrote {written} and its .json in {time.perf_counter() - started:.0f} s")
    return 0 if all("wrong result" not in row.get("error", "") for row in rows) else 1


TITLE = "A Llama-3-8B decoder layer end to end"
SMOKE_WORKLOADS = "prefill-16,decode-2"


def _workload(text: str) -> tuple[str, int]:
    phase, _, count = text.partition("-")
    if phase not in GOALS or not count.isdigit() or int(count) < 1:
        sys.exit(f"--workloads: {text!r} is not prefill-<tokens> or decode-<batch>, e.g. prefill-1024,decode-16")
    return phase, int(count)


def render(rows: list[dict], bounds: list[dict], env: dict, copy: Any) -> list[str]:
    workloads = list(dict.fromkeys(row["workload"] for row in rows))
    shape = env["shape"]
    lines = [
        f"Hidden {shape['hidden']}; {shape['heads']} query + {shape['kv_heads']} KV heads of {shape['head_dim']}; "
        f"MLP {shape['mlp']}; bf16; decode over {shape['context']} cached tokens. Prefill: stream time (`do_bench`, "
        "L2 flushed); decode on CUDA: a layer step in a CUDA graph (50 captured, 20 replays). Each implementation "
        f"first checked against the torch layer in float32 (relative error ≤ {env['tolerance']:.1e}); "
        f"{env.get('elapsed_s', 0)} s in all. Attention: "
        + ", ".join(f"{name}: {kind}" for name, kind in env["attention"].items())
        + ". Backends: "
        + ", ".join(f"{name} ({state})" for name, state in env["backends"].items())
        + ".",
        "",
        harness.NOISY_NOTE,
        "",
        "## µs per layer (× torch.compile: its µs over this row's, > 1 is faster)",
        "",
    ]
    by_impl: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_impl.setdefault(row["impl"], {})[row["workload"]] = row
    lines += harness.table(
        ["implementation", *workloads],
        [[impl, *(_time_cell(cells.get(w)) for w in workloads)] for impl, cells in by_impl.items()],
    )
    lines += ["## Goals: lazyops ≥ 1.15× torch.compile at prefill, ≥ 1.0× at decode", ""]
    lines += harness.table(
        ["workload", "goal", "best lazyops", "× torch.compile", ""], [_goal(rows, w) for w in workloads]
    )
    if bounds:
        lines += [
            f"## The bound at prefill (`--ceiling`; copy rate {copy.rate:,.0f} GB/s)",
            "",
            "The skeleton: the layer with its GEMMs and attention, every memory-bound kernel free. Bound: "
            "torch.compile's µs over the fastest skeleton's, the most any kernels around those GEMMs can give. "
            "Floor: that skeleton plus the memory-bound kernels' bytes at the copy rate.",
            "",
        ]
        lines += harness.table(
            ["workload", "torch.compile µs", "fastest skeleton", "µs", "bound", "floor µs", "floor ×"],
            [_bound_cells(b) for b in bounds],
        )
    lines += ["## Relative error against the float32 layer (output / residual)", ""]
    lines += harness.table(
        ["implementation", *workloads],
        [[impl, *(_error_cell(cells.get(w)) for w in workloads)] for impl, cells in by_impl.items()],
    )
    errors = sorted({(row["impl"], row["error"][:200]) for row in rows if "error" in row})
    if errors:
        lines += ["## What did not run", "", *(f"- {impl}: {error}" for impl, error in errors), ""]
    return lines


def _time_cell(row: dict | None) -> str:
    if row is None:
        return ""
    if "error" in row:
        return "error"
    ratio = f" ({row['vs_compile']:.2f}×)" if row.get("vs_compile") else ""
    return harness.figure(row.get("us"), 1, row.get("noisy")) + ratio


def _error_cell(row: dict | None) -> str:
    if row is None or row.get("error_out") is None:
        return "—"
    return f"{row['error_out']:.1e} / {row['error_residual']:.1e}"


def _goal(rows: list[dict], workload: str) -> list[str]:
    ours = [r for r in rows if r["workload"] == workload and r["kind"] == "lazyops" and r.get("vs_compile")]
    best = max(ours, key=lambda r: r["vs_compile"], default=None)
    target = GOALS[workload.split("-", maxsplit=1)[0]]
    if best is None:
        return [workload, f"≥ {target}", "—", "—", "not measured"]
    verdict = "met" if best["vs_compile"] >= target else "not met"
    return [workload, f"≥ {target}", best["impl"], f"{best['vs_compile']:.2f}", verdict]


def _bound_cells(b: dict) -> list[str]:
    if "error" in b:
        return [b["workload"], b["error"], "", "", "", "", ""]
    return [
        b["workload"],
        harness.figure(b["compile_us"]),
        b["fastest"],
        harness.figure(b["skeleton_us"]),
        harness.figure(b["bound"], 2),
        harness.figure(b["floor_us"]),
        harness.figure(b["floor"], 2),
    ]


if __name__ == "__main__":
    sys.exit(main())
