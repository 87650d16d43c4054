"""A Llama-3-8B decoder layer end to end: torch eager, torch.compile and lazyops kernels per backend, in one run.

    python3 benchmarks/layer/decoder_layer.py --out DIR                  # on a CUDA machine
    python3 benchmarks/layer/decoder_layer.py --workloads prefill-1024,decode-16 --out DIR
    python3 benchmarks/layer/decoder_layer.py --smoke --out DIR          # tiny shapes: the script's logic, on a CPU

One layer, shaped as Llama-3-8B's (hidden 4096; 32 query and 8 KV heads of 128; MLP 14336; rope neox over a
float32 cos/sin cache of 8192 rows), in an engine's order: rmsnorm → QKV GEMM → rope → attention → O GEMM →
add_rmsnorm (the residual) → gate-up GEMM → SiLU-and-mul → down GEMM. Weights are random bf16, scaled by
1/√fan-in so every activation stays near unit size. Attention is ``F.scaled_dot_product_attention`` everywhere
(GQA through ``enable_gqa=True``, or ``--gqa repeat_interleave``): causal over the prompt at prefill; at decode,
the new token of each sequence over a KV cache of ``--context`` cached tokens (its key and value written into the
cache's last slot first). As in an engine's first layer, the layer input is the residual stream: the layer returns
``(mlp output, input + attention output)``; lazyops' add_rmsnorm updates the input in place to get there.

The implementations, side by side:

- ``torch eager``: the natural torch composition in bf16 (``F.rms_norm``, ``@``, vLLM's native rope, ``F.silu``);
- ``torch.compile``: the same, compiled (``dynamic=False``): the baseline every ratio is taken against;
- ``lazyops <backend>``: norm, rope, SiLU-and-mul and all four GEMMs from that backend (reached by registered name,
  as ``gpu_bench.py`` does), for each backend that runs here (those that cannot are listed with the reason);
- ``lazyops <backend> + torch.compile``: the same layer under ``torch.compile(fullgraph=True)`` (the kernels are
  ``torch.library`` custom ops while compiling); a failure to compile is recorded as that row's error.

Workloads: prefill of 1024 and 8192 tokens (batch 1), timed by ``triton.testing.do_bench`` medians (L2 flushed),
and decode at batch 1, 16 and 64, one layer step captured in a CUDA graph with static input buffers, timed by its
replays (CUDA events around ``--replays`` replays, the median of five such rounds). Each implementation's output
and residual are judged against the torch eager layer computed in float32 on the same inputs (relative error
‖out − ref‖ / ‖ref‖), within ``LAYER_TOLERANCE``. The goals: lazyops ≥ 1.15× torch.compile at prefill and ≥ 1.0×
at decode in graphs.

Writes ``decoder_layer.json`` and ``decoder_layer.md`` into DIR (default ``benchmarks/results`` on CUDA, a
temporary folder otherwise), rewritten after each workload, so a run cut short leaves what it measured.

``--smoke``: hidden 256, 4 + 2 heads of 64, MLP 512, prefill of 16 tokens and decode at batch 2 over 16 cached
tokens; on a CPU without CUDA graphs (decode is timed eagerly) and with dynamo's ``eager`` backend for the compiled
rows (the graph capture is checked, no code is generated). Triton joins in its interpreter when
``TRITON_INTERPRET=1`` is set before the run. Its timings mean nothing; it checks that every path runs and agrees.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # _environment
sys.path.append(str(ROOT / "src"))  # the checkout's lazyops, unless PYTHONPATH or an install names another

EAGER, COMPILED = "torch eager", "torch.compile"
#: lazyops ≥ this × torch.compile (its µs over ours) is the goal, per phase.
GOALS = {"prefill": 1.15, "decode": 1.0}
#: A layer chains about ten bf16 roundings (each input of each GEMM, norm, rope, attention), where one kernel has
#: one: judged against float32 within four times a kernel's bf16 tolerance, as ``compile_block.py`` judges a block.
TOLERANCE_FACTOR = 4


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
WORKLOADS = ("prefill-1024", "prefill-8192", "decode-1", "decode-16", "decode-64")
SMOKE_WORKLOADS = ("prefill-16", "decode-2")


@dataclass(frozen=True)
class Workload:
    phase: str  # "prefill" (tokens of one sequence) or "decode" (one new token for each of `tokens` sequences)
    tokens: int

    @property
    def name(self) -> str:
        return f"{self.phase}-{self.tokens}"

    @classmethod
    def parse(cls, text: str) -> Workload:
        phase, _, count = text.partition("-")
        if phase not in GOALS or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: a workload is prefill-<tokens> or decode-<batch>")
        return cls(phase, int(count))


@dataclass
class Row:
    """One implementation at one workload: its µs per layer, or the error that stopped it."""

    workload: str
    phase: str
    tokens: int
    impl: str
    kind: str  # "lazyops" or "peer"
    method: str  # how it was timed
    us: float | None = None
    vs_compile: float | None = None  # torch.compile's µs over this row's: >1 is faster
    error_out: float | None = None  # relative error of the layer output against the float32 layer
    error_residual: float | None = None
    correct: bool | None = None
    first_call_s: float | None = None  # the first call, compilation included
    # Host time per call, the clock stopped before the synchronize (stream-timed rows on CUDA): where it nears
    # ``us`` the row is bound by its launches, not its kernels.
    host_us: float | None = None
    error: str | None = None
    note: str | None = None


# --- the layer -------------------------------------------------------------------------------------------------


def make_weights(shape: Shape, dtype: Any, device: str, seed: int = 0) -> dict[str, Any]:
    """Random weights, ``[in, out]`` as ``matmul_tl`` takes them, scaled by 1/√fan-in; the float32 rope cache."""
    import torch

    g = torch.Generator().manual_seed(seed)

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


def make_inputs(shape: Shape, workload: Workload, dtype: Any, device: str, seed: int = 1) -> tuple[Any, ...]:
    """``(hidden, positions)`` at prefill; ``(hidden, positions, k_cache, v_cache)`` at decode, the caches
    ``[batch, kv_heads, context + 1, head_dim]`` holding ``context`` cached tokens and a slot for the new one."""
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(workload.tokens, shape.hidden, generator=g).to(dtype).to(device)
    if workload.phase == "prefill":
        return hidden, torch.arange(workload.tokens, device=device)
    positions = torch.full((workload.tokens,), shape.context, dtype=torch.long, device=device)
    cache = (workload.tokens, shape.kv_heads, shape.context + 1, shape.head_dim)
    k_cache = torch.randn(cache, generator=g).to(dtype).to(device)
    v_cache = torch.randn(cache, generator=g).to(dtype).to(device)
    return hidden, positions, k_cache, v_cache


@dataclass(frozen=True)
class Ops:
    """The kernels a layer is built from; every one takes and returns what lazyops' kernels do, except
    ``add_rmsnorm``, which returns ``(normed, residual)`` whether it updates the residual in place or not."""

    rmsnorm: Callable[..., Any]
    add_rmsnorm: Callable[..., Any]
    rope: Callable[..., Any]
    silu_and_mul: Callable[..., Any]
    qkv: Callable[..., Any]
    o: Callable[..., Any]
    gate_up: Callable[..., Any]
    down: Callable[..., Any]


def torch_ops(shape: Shape) -> Ops:
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
        # vLLM's RotaryEmbedding.forward_native: the cache rows cast to the activations' dtype, neox halves.
        cos, sin = cos_sin_cache[positions].to(query.dtype).unsqueeze(-2).chunk(2, dim=-1)
        return rotate(query, cos, sin), rotate(key, cos, sin)

    def silu_and_mul(x: Any) -> Any:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def mm(a: Any, b: Any) -> Any:
        return a @ b

    return Ops(rmsnorm, add_rmsnorm, rope, silu_and_mul, mm, mm, mm, mm)


def lazyops_ops(backend: str, shape: Shape, dtype: Any) -> Ops:
    """Every kernel from ``backend``'s own factories (the registry's, as ``gpu_bench.py`` reaches them), built once."""
    from lazyops._registry import Registry

    entry = Registry.discover()[backend]

    def factory(name: str) -> Any:
        return entry.kernel(name)

    rmsnorm = factory("rmsnorm_tl")(shape.hidden, dtype, shape.eps)
    add_rmsnorm = factory("add_rmsnorm_tl")(shape.hidden, dtype, shape.eps)
    rope = factory("rope_tl")(shape.head_dim, dtype, True)
    matmul = factory("matmul_tl")
    q_and_kv = shape.q_size + 2 * shape.kv_size

    def add_rmsnorm_in_place(x: Any, residual: Any, weight: Any) -> tuple[Any, Any]:
        return add_rmsnorm(x, residual, weight), residual

    return Ops(
        rmsnorm=rmsnorm,
        add_rmsnorm=add_rmsnorm_in_place,
        # query and key go in as the views of the QKV output they are (strided rows), rotated where they lie, as
        # engines call it; a backend whose launch cannot take strided rows gets copies from the spec's wrapper.
        rope=rope,
        silu_and_mul=factory("silu_and_mul_tl")(shape.mlp, dtype),
        qkv=matmul(q_and_kv, shape.hidden, dtype),
        o=matmul(shape.hidden, shape.q_size, dtype),
        gate_up=matmul(2 * shape.mlp, shape.hidden, dtype),
        down=matmul(shape.hidden, shape.mlp, dtype),
    )


def with_gemms(ops: Ops, gemms: Ops) -> Ops:
    """``ops`` with the four GEMMs of ``gemms``: a backend's norms, rope and activation around another's GEMMs."""
    return dataclasses.replace(ops, qkv=gemms.qkv, o=gemms.o, gate_up=gemms.gate_up, down=gemms.down)


def make_layer(ops: Ops, weights: dict[str, Any], shape: Shape, phase: str, gqa: str) -> Callable[..., Any]:
    """One decoder layer step: ``layer(hidden, positions[, k_cache, v_cache]) -> (out, residual)``."""
    import torch.nn.functional as F

    heads, kv_heads, head_dim, context = shape.heads, shape.kv_heads, shape.head_dim, shape.context
    sizes = [shape.q_size, shape.kv_size, shape.kv_size]
    w = weights
    repeat = heads // kv_heads

    def attend(q: Any, k: Any, v: Any, causal: bool) -> Any:
        if gqa == "enable_gqa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        k, v = k.repeat_interleave(repeat, dim=-3), v.repeat_interleave(repeat, dim=-3)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def front(hidden: Any, positions: Any) -> tuple[Any, Any, Any]:
        h = ops.rmsnorm(hidden, w["input_norm"])
        q, k, v = ops.qkv(h, w["qkv"]).split(sizes, dim=-1)
        q, k = ops.rope(positions, q, k, w["cos_sin_cache"])
        return q, k, v

    def back(attended: Any, hidden: Any) -> tuple[Any, Any]:
        h, residual = ops.add_rmsnorm(ops.o(attended, w["o"]), hidden, w["post_norm"])
        return ops.down(ops.silu_and_mul(ops.gate_up(h, w["gate_up"])), w["down"]), residual

    def prefill(hidden: Any, positions: Any) -> tuple[Any, Any]:
        tokens = hidden.shape[0]
        q, k, v = front(hidden, positions)
        q, k, v = (t.view(tokens, -1, head_dim).transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        attended = attend(q, k, v, causal=True).squeeze(0).transpose(0, 1).reshape(tokens, heads * head_dim)
        return back(attended, hidden)

    def decode(hidden: Any, positions: Any, k_cache: Any, v_cache: Any) -> tuple[Any, Any]:
        batch = hidden.shape[0]
        q, k, v = front(hidden, positions)
        k_cache[:, :, context].copy_(k.view(batch, kv_heads, head_dim))
        v_cache[:, :, context].copy_(v.view(batch, kv_heads, head_dim))
        attended = attend(q.view(batch, heads, 1, head_dim), k_cache, v_cache, causal=False)
        return back(attended.reshape(batch, heads * head_dim), hidden)

    return prefill if phase == "prefill" else decode


# --- what is timed ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Impl:
    name: str
    kind: str
    ops: Callable[[], Ops] | None  # None: cannot run here (``problem`` says why)
    compiled: bool = False
    problem: str | None = None


def implementations(shape: Shape, dtype: Any, backends: dict[str, str | None], compile_rows: bool) -> list[Impl]:
    """What to time: each implementation's kernels are built once (a factory call is warm-up), then shared by every
    workload and by its compiled twin."""
    natural = functools.cache(lambda: torch_ops(shape))
    impls = [Impl(EAGER, "peer", natural)]
    if compile_rows:
        impls.append(Impl(COMPILED, "peer", natural, compiled=True))
    for backend, problem in backends.items():

        @functools.cache
        def build(backend: str = backend) -> Ops:
            return lazyops_ops(backend, shape, dtype)

        impls.append(Impl(f"lazyops {backend}", "lazyops", None if problem else build, problem=problem))
        if compile_rows:
            name = f"lazyops {backend} + torch.compile"
            impls.append(Impl(name, "lazyops", None if problem else build, compiled=True, problem=problem))
        if backend != "torch" and "torch" in backends:
            # The engine's usual mix: this backend's norms, rope and activation, with the four GEMMs from lazyops'
            # torch backend (cuBLAS), so the row shows what the non-GEMM kernels gain or lose on their own.
            @functools.cache
            def mixed(backend: str = backend) -> Ops:
                cublas = lazyops_ops("torch", shape, dtype)
                return with_gemms(lazyops_ops(backend, shape, dtype), cublas)

            name = f"lazyops {backend}, matmul from lazyops torch (cuBLAS)"
            impls.append(Impl(name, "lazyops", None if problem else mixed, problem=problem))
            if compile_rows:
                impls.append(
                    Impl(
                        name + " + torch.compile", "lazyops", None if problem else mixed, compiled=True, problem=problem
                    )
                )
    return impls


def measure_workload(
    workload: Workload,
    impls: list[Impl],
    shape: Shape,
    dtype: Any,
    options: argparse.Namespace,
    record: Callable[[Row], None],
) -> None:
    """Every implementation at ``workload``: each row, once measured (or failed), goes to ``record``."""
    import torch

    from lazyops.testing import TOLERANCE, relative_error

    device = options.device
    cuda = device.startswith("cuda")
    tolerance = TOLERANCE_FACTOR * TOLERANCE[dtype]
    weights = make_weights(shape, dtype, device)
    inputs = make_inputs(shape, workload, dtype, device)
    reference = float32_reference(shape, weights, inputs, workload.phase, options.gqa)
    graphs = cuda and workload.phase == "decode"
    if graphs:
        method = f"CUDA graph of one layer step, median of 5 × {options.replays} replays"
    elif cuda:
        method = "triton.testing.do_bench median (L2 flushed)"
    else:
        method = f"perf_counter median of {options.repeats} calls (host; no CUDA graphs)"
    for impl in impls:
        row = Row(workload.name, workload.phase, workload.tokens, impl.name, impl.kind, method)
        if impl.compiled:
            row.note = f"torch.compile(fullgraph={impl.kind == 'lazyops'}, dynamic=False, backend={options.dynamo!r})"
        if impl.ops is None:
            row.error = f"unavailable: {impl.problem}"
            record(row)
            continue
        try:
            with torch.no_grad():
                layer = make_layer(impl.ops(), weights, shape, workload.phase, options.gqa)
                if impl.compiled:
                    torch._dynamo.reset()  # one code object serves every implementation: no stale guards, no limit
                    layer = torch.compile(
                        layer, fullgraph=impl.kind == "lazyops", dynamic=False, backend=options.dynamo
                    )
                args = clone(inputs)
                started = time.perf_counter()
                got = layer(*args)
                synchronize(device)
                row.first_call_s = round(time.perf_counter() - started, 3)
                if graphs:
                    row.us, got = graph_us(layer, inputs, options.replays)
                else:
                    row.us = median_us(layer, clone(inputs), device, options.repeats)
                    if cuda:
                        row.host_us = host_us(layer, clone(inputs))
            row.error_out = relative_error(got[0], reference[0])
            row.error_residual = relative_error(got[1], reference[1])
            row.correct = bool(
                got[0].dtype == dtype and max(row.error_out, row.error_residual) <= tolerance
            )  # NaN fails too
        except Exception as error:  # noqa: BLE001 - one implementation that fails is a row, the others still run
            last = traceback.format_exception_only(type(error), error)[-1].strip()
            row.error = last[:2000]
        record(row)
        release(device)


def rank(rows: list[Row]) -> None:
    """Each row's ``vs_compile``: torch.compile's µs at its workload over its own (>1: faster)."""
    compiled = {r.workload: r.us for r in rows if r.impl == COMPILED and r.us}
    for row in rows:
        baseline = compiled.get(row.workload)
        row.vs_compile = baseline / row.us if baseline and row.us else None


def float32_reference(shape: Shape, weights: dict[str, Any], inputs: tuple[Any, ...], phase: str, gqa: str) -> Any:
    """The torch eager layer in float32, on the bf16 weights and inputs upcast: what every row is judged against."""
    import torch

    wide = {name: t.float() for name, t in weights.items()}
    with torch.no_grad():
        layer = make_layer(torch_ops(shape), wide, shape, phase, gqa)
        return layer(*(t.float() if t.is_floating_point() else t.clone() for t in inputs))


def clone(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies: lazyops updates the residual (the input) in place, every decode step writes its cache slot."""
    return tuple(t.clone() for t in inputs)


def median_us(layer: Callable[..., Any], args: tuple[Any, ...], device: str, repeats: int) -> float:
    def step() -> None:
        layer(*args)

    if device.startswith("cuda"):
        import triton.testing

        return float(triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")) * 1e3
    times = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def host_us(layer: Callable[..., Any], args: tuple[Any, ...], calls: int = 20, rounds: int = 3) -> float:
    """Host µs per call: ``calls`` back-to-back calls, the clock stopped before the synchronize (what the host
    spends issuing the layer, not what it waits for), median of ``rounds``."""
    samples = []
    for _ in range(rounds):
        synchronize("cuda")
        started = time.perf_counter()
        for _ in range(calls):
            layer(*args)
        samples.append((time.perf_counter() - started) / calls * 1e6)
        synchronize("cuda")
    return statistics.median(samples)


def graph_us(layer: Callable[..., Any], inputs: tuple[Any, ...], replays: int) -> tuple[float, Any]:
    """One layer step captured in a CUDA graph over static buffers; µs per replay (the median of five rounds of
    ``replays``), and the outputs of one replay on fresh inputs (what the row is judged by)."""
    import torch

    static = clone(inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compiles, autotunes, allocates) off the capture
        for _ in range(3):
            layer(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = layer(*static)
    for buffer, fresh in zip(static, inputs, strict=True):  # an engine's step: new inputs into the static buffers
        buffer.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    checked = tuple(t.clone() for t in outputs)
    rounds = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        rounds.append(start.elapsed_time(end) * 1e3 / replays)
    del graph
    return statistics.median(rounds), checked


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def release(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


# --- the report ------------------------------------------------------------------------------------------------


def goals(rows: list[Row]) -> list[dict[str, Any]]:
    """Per workload: the best lazyops row against torch.compile, the target, and whether it is met."""
    verdicts = []
    for workload in dict.fromkeys(row.workload for row in rows):
        ours = [r for r in rows if r.workload == workload]
        phase = ours[0].phase
        timed = [r for r in ours if r.kind == "lazyops" and r.vs_compile is not None and r.correct]
        best = max(timed, key=lambda r: r.vs_compile or 0.0, default=None)
        verdicts.append(
            {
                "workload": workload,
                "target": GOALS[phase],
                "best": best.impl if best else None,
                "vs_compile": round(best.vs_compile, 3) if best and best.vs_compile else None,
                "met": None if best is None else bool(best.vs_compile and best.vs_compile >= GOALS[phase]),
            }
        )
    return verdicts


def render_markdown(rows: list[Row], environment: dict[str, Any], elapsed: float) -> str:
    shape = environment["shape"]
    lines = [
        "# A Llama-3-8B decoder layer end to end",
        "",
        f"Generated by `{environment['command']}` in {elapsed:.0f} s; do not edit.",
        "",
        f"- date: {environment['date']}; device: {environment['device']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in environment['versions'].items())}; python "
        f"{environment['python']}; lazyops at {environment['commit']}",
        f"- layer: hidden {shape['hidden']}; {shape['heads']} query + {shape['kv_heads']} KV heads of "
        f"{shape['head_dim']}; MLP {shape['mlp']}; rope neox, float32 cos/sin cache of {shape['rope_rows']} rows; "
        f"decode over {shape['context']} cached tokens; bf16; attention `F.scaled_dot_product_attention` "
        f"(GQA: {environment['gqa']}) in every implementation",
        f"- backends: {', '.join(f'{k}: {v}' for k, v in environment['backends'].items())}",
        *(f"- merged with the rows of `{command}`" for command in environment.get("earlier_commands", [])),
        f"- correct: output and residual within {environment['tolerance']:.1e} (relative error) of the torch eager "
        "layer in float32 on the same inputs",
        "",
        "## µs per layer (× = torch.compile's µs over this one; >1 is faster)",
        "",
    ]
    workloads = list(dict.fromkeys(row.workload for row in rows))
    lines += ["| implementation | " + " | ".join(workloads) + " |", "| --- |" + " --- |" * len(workloads)]
    for impl in dict.fromkeys(row.impl for row in rows):
        cells = {row.workload: timing_cell(row) for row in rows if row.impl == impl}
        lines.append(f"| {impl} | " + " | ".join(cells.get(w, "") for w in workloads) + " |")
    lines += ["", "How each workload was timed:", ""]
    for workload in workloads:
        first = next(row for row in rows if row.workload == workload)
        lines.append(f"- {workload}: {first.method}")
    hosted = [row for row in rows if row.host_us is not None]
    if hosted:
        host_workloads = list(dict.fromkeys(row.workload for row in hosted))
        lines += [
            "",
            "## Host µs per layer call, stream-timed workloads (20 back-to-back calls, the clock stopped before the "
            "synchronize; near the µs above, a row is bound by its launches)",
            "",
            "| implementation | " + " | ".join(host_workloads) + " |",
            "| --- |" + " --- |" * len(host_workloads),
        ]
        for impl in dict.fromkeys(row.impl for row in hosted):
            cells = {row.workload: f"{row.host_us:.1f}" for row in hosted if row.impl == impl}
            lines.append(f"| {impl} | " + " | ".join(cells.get(w, "") for w in host_workloads) + " |")
    lines += [
        "",
        "## Correctness: relative error against the float32 layer (output / residual)",
        "",
        "| implementation | " + " | ".join(workloads) + " |",
        "| --- |" + " --- |" * len(workloads),
    ]
    for impl in dict.fromkeys(row.impl for row in rows):
        cells = {row.workload: correctness_cell(row) for row in rows if row.impl == impl}
        lines.append(f"| {impl} | " + " | ".join(cells.get(w, "") for w in workloads) + " |")
    lines += [
        "",
        f"## Goals: lazyops ≥ {GOALS['prefill']}× torch.compile at prefill, ≥ {GOALS['decode']}× at decode in graphs",
        "",
        "| workload | target | best lazyops | × torch.compile | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    for verdict in goals(rows):
        met = {True: "met", False: "not met", None: "not measured"}[verdict["met"]]
        ratio = f"{verdict['vs_compile']:.2f}" if verdict["vs_compile"] is not None else "—"
        lines.append(f"| {verdict['workload']} | ≥ {verdict['target']} | {verdict['best'] or '—'} | {ratio} | {met} |")
    errors: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        if row.error:
            errors.setdefault((row.impl, row.error.splitlines()[0][:400]), []).append(row.workload)
    if errors:
        lines += ["", "## What did not run", ""]
        lines += [f"- {impl} ({', '.join(where)}): {error}" for (impl, error), where in errors.items()]
    notes = sorted({(row.impl, row.note) for row in rows if row.note})
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {impl}: {note}" for impl, note in notes]
    return "\n".join(lines) + "\n"


def timing_cell(row: Row) -> str:
    if row.error:
        return "error"
    if row.us is None:
        return ""
    ratio = f" ({row.vs_compile:.2f}×)" if row.vs_compile is not None else ""
    return f"{row.us:.1f}{ratio}"


def correctness_cell(row: Row) -> str:
    if row.error or row.error_out is None or row.error_residual is None:
        return "—"
    verdict = "ok" if row.correct else "WRONG"
    return f"{verdict} {row.error_out:.1e} / {row.error_residual:.1e}"


def write_results(out: Path, rows: list[Row], environment: dict[str, Any], elapsed: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "environment": environment,
        "elapsed_s": round(elapsed, 1),
        "goals": goals(rows),
        "rows": [dataclasses.asdict(row) for row in rows],
    }
    (out / "decoder_layer.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "decoder_layer.md").write_text(render_markdown(rows, environment, elapsed))


def progress_printer() -> Callable[[Row], None]:
    def say(row: Row) -> None:
        if row.error:
            result = f"error: {row.error.splitlines()[0][:160]}"
        else:
            ratio = f" ({row.vs_compile:.2f}× compile)" if row.vs_compile else ""
            result = (
                f"{row.us:10.1f} µs{ratio}; {'ok' if row.correct else 'WRONG'} "
                f"{row.error_out:.1e} / {row.error_residual:.1e}; first call {row.first_call_s} s"
            )
        print(f"{row.workload:14s} {row.impl:36s} {result}", flush=True)

    return say


# --- the command -----------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the results go (default: benchmarks/results on CUDA)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes and workloads (for a CPU)")
    parser.add_argument("--device", help="default: cuda when torch sees it, else cpu")
    parser.add_argument(
        "--workloads",
        help=f"comma list of prefill-<tokens> and decode-<batch> (default: {','.join(WORKLOADS)}; "
        f"with --smoke: {','.join(SMOKE_WORKLOADS)})",
    )
    parser.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="a lazyops backend to time (repeatable; default: every registered one, those that cannot run here "
        "listed with the reason)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the torch.compile rows (default: on; on a CPU with dynamo's eager backend)",
    )
    parser.add_argument("--gqa", choices=("enable_gqa", "repeat_interleave"), default="enable_gqa")
    parser.add_argument("--context", type=int, help="cached tokens per sequence at decode (default: 1024)")
    parser.add_argument("--replays", type=int, default=50, help="graph replays per timed round (decode on CUDA)")
    parser.add_argument("--repeats", type=int, default=3, help="calls per median on a CPU")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the rows of DIR/decoder_layer.json at workloads this run does not measure (a run split over "
        "several calls, each within a time limit)",
    )
    return parser.parse_args(argv)


def choose_device(options: argparse.Namespace, torch: Any) -> bool:
    """Set ``options.device`` (CUDA when torch sees it, unless given) and ``options.dynamo`` (inductor on CUDA; on a
    CPU dynamo's eager backend: the graph capture checked, no code generated); whether it is CUDA."""
    options.device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = bool(options.device.startswith("cuda"))
    options.dynamo = "inductor" if cuda else "eager"
    return cuda


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    started = time.perf_counter()
    import torch
    from _environment import describe_environment

    from lazyops import _bench
    from lazyops.testing import TOLERANCE

    cuda = choose_device(options, torch)
    shape = SMOKE if options.smoke else LLAMA3_8B
    if options.context:
        shape = dataclasses.replace(shape, context=options.context)
    names = options.workloads.split(",") if options.workloads else (SMOKE_WORKLOADS if options.smoke else WORKLOADS)
    workloads = [Workload.parse(name) for name in names]
    longest = max((w.tokens for w in workloads if w.phase == "prefill"), default=0)
    if max(longest, shape.context + 1) > shape.rope_rows:
        shape = dataclasses.replace(shape, rope_rows=2 ** math.ceil(math.log2(max(longest, shape.context + 1))))
    out = options.out or (
        ROOT / "benchmarks" / "results" if cuda else Path(tempfile.gettempdir()) / "lazyops-decoder-layer"
    )
    dtype = torch.bfloat16
    status = _bench.backend_status(options.backend or None)
    environment = {
        **describe_environment(torch, options.device, "smoke run; timings meaningless"),
        "shape": dataclasses.asdict(shape),
        "dtype": "bfloat16",
        "gqa": options.gqa,
        "tolerance": TOLERANCE_FACTOR * TOLERANCE[dtype],
        "workloads": [w.name for w in workloads],
        "backends": {name: problem or "runs" for name, problem in status.items()},
    }
    impls = implementations(shape, dtype, status, options.compile)
    say = progress_printer()
    rows: list[Row] = []
    if options.merge and (out / "decoder_layer.json").exists():
        earlier = json.loads((out / "decoder_layer.json").read_text())
        measured = {w.name for w in workloads}
        rows = [Row(**row) for row in earlier["rows"] if row["workload"] not in measured]
        before = earlier["environment"]
        environment["earlier_commands"] = [*before.get("earlier_commands", []), before["command"]]

    def record(row: Row) -> None:  # written after every row: a run cut short by a time limit keeps what it measured
        rows.append(row)
        rank(rows)
        say(row)
        write_results(out, rows, environment, time.perf_counter() - started)

    for workload in workloads:
        measure_workload(workload, impls, shape, dtype, options, record)
    print(render_markdown(rows, environment, time.perf_counter() - started))
    print(f"results in {out}")
    wrong = [row for row in rows if row.correct is False]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
