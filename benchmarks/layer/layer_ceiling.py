"""How fast the decoder layer of ``decoder_layer.py`` could be at prefill: its floor, measured as a layer, against
torch.compile's layer, and each of its parts timed on its own, in one run.

    python3 benchmarks/layer/layer_ceiling.py --out DIR            # on a CUDA machine
    python3 benchmarks/layer/layer_ceiling.py --smoke --out DIR    # tiny shapes: the script's logic, on a CPU

Issue 12 asks lazyops' layer for ≥ 1.15× torch.compile's at prefill. lazyops replaces the norms, rope, the
activation and the four GEMMs; attention stays ``F.scaled_dot_product_attention``. So the most any set of lazyops
kernels can give is torch.compile's layer time over the time of the layer's GEMMs and attention:

- the *skeleton*: the same layer (``decoder_layer.make_layer``) with its four GEMMs and its attention, and every
  memory-bound kernel made free (the norms and rope return their input, SiLU-and-mul an uninitialised tensor of its
  output's shape: no GPU work). Timed as the layer is (``do_bench`` median, L2 flushed before each layer call),
  once with each GEMM provider (cuBLAS through ``a @ b``, each lazyops backend's ``matmul_tl``). No layer built on
  these GEMMs and this attention runs faster than the fastest skeleton: **the bound** is torch.compile's time over
  it, whatever the other kernels do.
- *the floor*, an estimate under the bound: the fastest skeleton plus each memory-bound kernel (rmsnorm, rope,
  add_rmsnorm, silu_and_mul) at the device's copy rate measured in the same run, over the bytes its spec says it
  moves (``spec.traffic``). Where a kernel's input is still in the L2 from the kernel before it (a layer of 1024
  tokens: most activations fit in the H200's L2), a kernel can beat its bytes at the DRAM's rate, so this is no
  bound there; from 8192 tokens (activations of 64-470 MB) it is close to one.

Both are timed as layers, not summed from parts: a GEMM timed alone (its inputs flushed from the L2, the same GEMM
back to back) runs at another speed than inside the layer (on the H200 a layer ran in less time than the sum of
its parts timed alone: 622 against 720 µs at 1024 tokens). The same run times the lazyops layers beside them (each
backend's kernels, and its memory-bound kernels with cuBLAS GEMMs, the engine's usual mix), and each part alone,
for torch's op and each lazyops backend, on the layer's own shapes and layouts (rope on the strided query and key
views of the QKV output): they say where each kernel stands against its bytes at the copy rate.

A layer faster than the bound would need GEMMs or an attention faster than the fastest measured here.

Writes ``decoder_layer_ceiling.json`` and ``decoder_layer_ceiling.md`` into DIR (default ``benchmarks/results`` on
CUDA, a temporary folder otherwise). ``--smoke``: the smoke shapes of ``decoder_layer.py`` at 16 tokens, on a CPU,
timed by ``perf_counter`` medians (its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # decoder_layer: the one definition of the layer, its shapes and its inputs
import decoder_layer as layer  # noqa: E402

MEMORY_BOUND = ("rmsnorm", "rope", "add_rmsnorm", "silu_and_mul")
#: The layer's parts in its order; "attention" and "layout" are torch's in every implementation.
PARTS = ("rmsnorm", "qkv", "rope", "attention", "layout", "o", "add_rmsnorm", "gate_up", "silu_and_mul", "down")
WORKLOADS = ("prefill-1024", "prefill-8192")
#: torch's own ops (``decoder_layer.torch_ops``: cuBLAS through ``a @ b``, ``F.rms_norm``, vLLM's native rope)
TORCH = "torch ops"
COPY_MIB = 256  # the copy whose rate is the memory-bound parts' ceiling: large enough to be at it


def part_calls(shape: layer.Shape, ops: layer.Ops, weights: dict[str, Any], tokens: int, dtype: Any, device: str):
    """``{part: zero-argument call}``: each part of the prefill layer on inputs shaped and laid out as the layer's
    own (``decoder_layer.make_layer``), so each is timed alone on what it gets inside the layer."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(2)

    def rows(width: int) -> Any:
        return torch.randn(tokens, width, generator=g).to(dtype).to(device)

    w = weights
    hidden, heads, head_dim = shape.hidden, shape.heads, shape.head_dim
    sizes = [shape.q_size, shape.kv_size, shape.kv_size]
    x, residual, normed = rows(hidden), rows(hidden), rows(hidden)
    qkv = rows(sum(sizes))
    q, k, v = qkv.split(sizes, dim=-1)
    positions = torch.arange(tokens, device=device)
    heads_q, heads_k, heads_v = (t.view(tokens, -1, head_dim).transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    attended = F.scaled_dot_product_attention(heads_q, heads_k, heads_v, is_causal=True, enable_gqa=True)
    attended_rows = rows(shape.q_size)
    gate_up = rows(2 * shape.mlp)
    activated = rows(shape.mlp)
    return {
        "rmsnorm": lambda: ops.rmsnorm(x, w["input_norm"]),
        "qkv": lambda: ops.qkv(normed, w["qkv"]),
        "rope": lambda: ops.rope(positions, q, k, w["cos_sin_cache"]),
        "attention": lambda: F.scaled_dot_product_attention(heads_q, heads_k, heads_v, is_causal=True, enable_gqa=True),
        "layout": lambda: attended.squeeze(0).transpose(0, 1).reshape(tokens, heads * head_dim),
        "o": lambda: ops.o(attended_rows, w["o"]),
        "add_rmsnorm": lambda: ops.add_rmsnorm(x, residual, w["post_norm"]),
        "gate_up": lambda: ops.gate_up(normed, w["gate_up"]),
        "silu_and_mul": lambda: ops.silu_and_mul(gate_up),
        "down": lambda: ops.down(activated, w["down"]),
    }


def skeleton_ops(gemms: layer.Ops) -> layer.Ops:
    """``gemms``' four GEMMs, and every memory-bound kernel free: the layer's GEMMs and attention alone."""

    def rmsnorm(x: Any, weight: Any) -> Any:
        return x

    def add_rmsnorm(x: Any, residual: Any, weight: Any) -> tuple[Any, Any]:
        return x, residual

    def rope(positions: Any, query: Any, key: Any, cos_sin_cache: Any) -> tuple[Any, Any]:
        return query, key

    def silu_and_mul(x: Any) -> Any:
        return x.new_empty((x.shape[0], x.shape[-1] // 2))  # dense, as a kernel's output: no GPU work

    return layer.with_gemms(layer.Ops(rmsnorm, add_rmsnorm, rope, silu_and_mul, *(None,) * 4), gemms)


def traffic_bytes(shape: layer.Shape, tokens: int, dtype: Any) -> dict[str, int]:
    """The bytes each memory-bound part must move at ``tokens``, from its spec (the one definition of it)."""
    from lazyops.specs.add_rmsnorm import spec as add_rmsnorm
    from lazyops.specs.rmsnorm import spec as rmsnorm
    from lazyops.specs.rope import spec as rope
    from lazyops.specs.silu_and_mul import spec as silu_and_mul

    rope_geometry = {"query_heads": shape.heads, "key_heads": shape.kv_heads, "rotary_dim": shape.head_dim}
    return {
        "rmsnorm": rmsnorm.traffic(rmsnorm.configure(shape.hidden, dtype), tokens, {}).bytes,
        "rope": rope.traffic(rope.configure(shape.head_dim, dtype), tokens, rope_geometry).bytes,
        "add_rmsnorm": add_rmsnorm.traffic(add_rmsnorm.configure(shape.hidden, dtype), tokens, {}).bytes,
        "silu_and_mul": silu_and_mul.traffic(silu_and_mul.configure(shape.mlp, dtype), tokens, {}).bytes,
    }


def timer(device: str, repeats: int) -> Callable[[Callable[[], Any]], float]:
    """µs per call: ``do_bench``'s median (L2 flushed) on CUDA, a ``perf_counter`` median on a CPU."""

    def time_us(call: Callable[[], Any]) -> float:
        return layer.median_us(call, (), device, repeats)

    return time_us


def measure(
    workload: layer.Workload, shape: layer.Shape, dtype: Any, options: argparse.Namespace, status: dict[str, str | None]
) -> dict[str, Any]:
    """One workload: torch.compile's layer, the lazyops layers, the skeleton with each GEMM provider, the copy rate,
    the bound and the floor, and every part of every implementation alone."""
    import torch

    from lazyops import _bench

    device = options.device
    time_us = timer(device, options.repeats)
    weights = layer.make_weights(shape, dtype, device)
    inputs = layer.make_inputs(shape, workload, dtype, device)

    def layer_us(ops: layer.Ops, compiled: bool = False) -> float:
        step = layer.make_layer(ops, weights, shape, "prefill", "enable_gqa")
        if compiled:
            torch._dynamo.reset()
            step = torch.compile(step, dynamic=False, backend=options.dynamo)
        layer.release(device)  # each layer starts from an empty allocator cache, as decoder_layer's rows do
        step(*layer.clone(inputs))  # compiles, autotunes and allocates outside the timing, as decoder_layer does
        layer.synchronize(device)
        return layer.median_us(step, layer.clone(inputs), device, options.repeats)

    with torch.no_grad():
        compile_us = layer_us(layer.torch_ops(shape), compiled=True)
        implementations: dict[str, dict[str, float] | str] = {}
        ops_by_impl = {TORCH: layer.torch_ops(shape)}
        for backend, problem in status.items():
            if problem is None:
                ops_by_impl[f"lazyops {backend}"] = layer.lazyops_ops(backend, shape, dtype)
            else:
                implementations[f"lazyops {backend}"] = f"unavailable: {problem}"
        skeleton = {name: round(layer_us(skeleton_ops(ops)), 1) for name, ops in ops_by_impl.items()}
        lazyops_layers = {}
        for name, ops in ops_by_impl.items():
            if name != TORCH:
                lazyops_layers[name] = round(layer_us(ops), 1)
                lazyops_layers[f"{name}, cuBLAS GEMMs"] = round(layer_us(layer.with_gemms(ops, ops_by_impl[TORCH])), 1)
        for name, ops in ops_by_impl.items():
            calls = part_calls(shape, ops, weights, workload.tokens, dtype, device)
            implementations[name] = {part: round(time_us(calls[part]), 2) for part in PARTS}
    copy = _bench.copy_ceiling(COPY_MIB, device=device)
    if copy.rate is None:
        raise RuntimeError(f"the {COPY_MIB} MiB copy that sets the copy rate failed: {copy.error}")
    copy_us, copy_rate = copy.us, copy.rate  # GB/s: read and written
    moved = traffic_bytes(shape, workload.tokens, dtype)
    at_copy_rate = {part: round(moved[part] / copy_rate / 1e3, 2) for part in MEMORY_BOUND}
    fastest = min(skeleton, key=skeleton.__getitem__)
    floor_us = skeleton[fastest] + sum(at_copy_rate.values())
    return {
        "workload": workload.name,
        "tokens": workload.tokens,
        "compile_us": round(compile_us, 1),
        "lazyops_us": lazyops_layers,
        "skeleton_us": skeleton,
        "fastest_gemms": fastest,
        "bound_vs_compile": round(compile_us / skeleton[fastest], 3),
        "copy_us": round(copy_us, 2),
        "copy_gbs": round(copy_rate, 1),
        "bytes": moved,
        "at_copy_rate_us": at_copy_rate,
        "floor_us": round(floor_us, 1),
        "floor_vs_compile": round(compile_us / floor_us, 3),
        "parts_us": implementations,
    }


def render_markdown(results: list[dict[str, Any]], environment: dict[str, Any], elapsed: float) -> str:
    lines = [
        "# The decoder layer's bound and floor at prefill",
        "",
        f"Generated by `{environment['command']}` in {elapsed:.0f} s; do not edit. Method: the script's docstring.",
        "",
        f"- date: {environment['date']}; device: {environment['device']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in environment['versions'].items())}; python "
        f"{environment['python']}; lazyops at {environment['commit']}",
        f"- layer: `decoder_layer.py`'s ({environment['shape']['hidden']} hidden, MLP {environment['shape']['mlp']}), "
        "bf16; layers timed by `do_bench` (L2 flushed before each layer call), parts alone the same way",
        "",
    ]
    for result in results:
        skeleton, compile_us = result["skeleton_us"], result["compile_us"]
        lines += [
            f"## {result['workload']}",
            "",
            "| µs per layer | | × torch.compile |",
            "| --- | ---: | ---: |",
            f"| torch.compile's layer | **{compile_us:.1f}** | 1.00 |",
            *(f"| {name} | {us:.1f} | {compile_us / us:.2f} |" for name, us in result["lazyops_us"].items()),
            *(
                f"| skeleton (GEMMs and attention alone), GEMMs from {name} | {us:.1f} | {compile_us / us:.2f} |"
                for name, us in skeleton.items()
            ),
            *(
                f"| + {part} at the copy rate ({result['bytes'][part] / 1e6:.1f} MB at {result['copy_gbs']:.0f} "
                f"GB/s) | {us:.1f} | |"
                for part, us in result["at_copy_rate_us"].items()
            ),
            f"| floor: the fastest skeleton ({result['fastest_gemms']}) plus those | {result['floor_us']:.1f} "
            f"| {result['floor_vs_compile']:.2f} |",
            "",
            f"**The bound: {result['bound_vs_compile']:.2f}× torch.compile** (goal: ≥ {layer.GOALS['prefill']}×): "
            "no layer on these GEMMs and this attention is faster than its skeleton. The floor, "
            f"{result['floor_vs_compile']:.2f}×, adds the memory-bound kernels' bytes at the DRAM's copy rate (an "
            "estimate: a kernel whose input is still in the L2 can beat it).",
            "",
        ]
        names = list(result["parts_us"])
        timed = [name for name in names if isinstance(result["parts_us"][name], dict)]
        lines += [
            "Each part alone, µs per call (their sum is not the layer's time: see the script's docstring):",
            "",
            "| part | " + " | ".join(timed) + " | at the copy rate |",
            "| --- |" + " ---: |" * (len(timed) + 1),
        ]
        for part in PARTS:
            cells = [f"{result['parts_us'][name][part]:.1f}" for name in timed]
            floor = result["at_copy_rate_us"].get(part)
            lines.append(f"| {part} | " + " | ".join(cells) + f" | {'—' if floor is None else f'{floor:.1f}'} |")
        lines.append("")
        unavailable = {name: why for name, why in result["parts_us"].items() if isinstance(why, str)}
        lines += [f"- {name}: {why}" for name, why in unavailable.items()]
        if unavailable:
            lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the results go (default: benchmarks/results on CUDA)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (for a CPU)")
    parser.add_argument("--device", help="default: cuda when torch sees it, else cpu")
    parser.add_argument("--workloads", help=f"comma list of prefill-<tokens> (default: {','.join(WORKLOADS)})")
    parser.add_argument("--backend", action="append", default=[], metavar="NAME", help="lazyops backends to time")
    parser.add_argument("--repeats", type=int, default=3, help="calls per median on a CPU")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    started = time.perf_counter()
    import torch
    from _environment import describe_environment

    from lazyops import _bench

    cuda = layer.choose_device(options, torch)
    shape = layer.SMOKE if options.smoke else layer.LLAMA3_8B
    names = options.workloads.split(",") if options.workloads else (["prefill-16"] if options.smoke else WORKLOADS)
    workloads = [layer.Workload.parse(name) for name in names]
    if any(workload.phase != "prefill" for workload in workloads):
        raise SystemExit("layer_ceiling.py: only prefill-<tokens> workloads (decode's goal is met in graphs)")
    longest = max(workload.tokens for workload in workloads)
    if longest > shape.rope_rows:
        shape = layer.dataclasses.replace(shape, rope_rows=longest)
    out = options.out or (
        layer.ROOT / "benchmarks" / "results" if cuda else Path(tempfile.gettempdir()) / "lazyops-layer-ceiling"
    )
    dtype = torch.bfloat16
    status = _bench.backend_status(options.backend or None)
    status.pop("torch", None)  # the torch backend's GEMMs are cuBLAS, as the TORCH column's are
    environment = {
        **describe_environment(torch, options.device, "smoke run; timings meaningless"),
        "shape": layer.dataclasses.asdict(shape),
        "backends": {name: problem or "runs" for name, problem in status.items()},
    }
    results = []
    out.mkdir(parents=True, exist_ok=True)
    for workload in workloads:
        results.append(measure(workload, shape, dtype, options, status))
        elapsed = time.perf_counter() - started
        payload = {"environment": environment, "elapsed_s": round(elapsed, 1), "results": results}
        (out / "decoder_layer_ceiling.json").write_text(json.dumps(payload, indent=1) + "\n")
        (out / "decoder_layer_ceiling.md").write_text(render_markdown(results, environment, elapsed))
        last = results[-1]
        print(
            f"{workload.name}: compile {last['compile_us']} µs, lazyops {last['lazyops_us']}, skeleton "
            f"{last['skeleton_us']}, bound {last['bound_vs_compile']}×, floor {last['floor_vs_compile']}×",
            flush=True,
        )
    print(render_markdown(results, environment, time.perf_counter() - started))
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
