"""Time every kernel of every backend that imports here against torch eager and torch.compile, in one run.

    python3 benchmarks/gpu_bench.py [--out DIR]                  # on a CUDA machine
    python3 benchmarks/gpu_bench.py --device cpu --small         # the script's logic, here (no torch.compile)

bf16, hidden 4096, token counts M = 1024, 8192, 32768 (rope: 32 query and 8 key heads of 128, the whole head
rotated; matmul: ``[M, 4096] @ [4096, 4096]``). Each figure is the median of ``triton.testing.do_bench`` (which
also clears the L2 before every call); besides, calls cycle through enough distinct input sets to overflow the L2,
so a kernel never finds its inputs cached. Bandwidth counts each input read once and each output written once;
an in-place tensor counts as read and written. The peers are the torch reference's own math (float32, as the
kernels compute), run eagerly and through ``torch.compile``; matmul's peer is ``a @ b`` (cuBLAS).

Writes ``gpu_bench.md`` and ``gpu_bench.json`` into DIR (default ``benchmarks/results``), after each kernel, so
an interrupted run leaves what it measured.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from _environment import describe_environment as shared_environment  # benchmarks/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("torch", "triton", "tilelang")
KERNELS = ("rmsnorm", "add_rmsnorm", "silu_and_mul", "softmax", "rope", "matmul")
EAGER, COMPILED = "torch eager", "torch.compile"
#: Input sets are rotated until one round of them holds at least this much: four times an H200's 60 MB L2.
ROTATE_BYTES = 256 * 2**20
MAX_SETS = 64


@dataclass(frozen=True)
class Shape:
    tokens: tuple[int, ...]
    hidden: int
    query_heads: int
    key_heads: int
    head_dim: int


GPU_SHAPE = Shape(tokens=(1024, 8192, 32768), hidden=4096, query_heads=32, key_heads=8, head_dim=128)
SMALL_SHAPE = Shape(tokens=(4, 16), hidden=256, query_heads=4, key_heads=2, head_dim=128)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="small sizes (for a CPU, or a quick look)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="time torch.compile peers (default: on a GPU only)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is decorated
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --small to check the script here", file=sys.stderr)
        return 2
    compile_peers = args.device == "cuda" if args.compile is None else args.compile
    shape = SMALL_SHAPE if args.small else GPU_SHAPE
    backends = {name: backend_problem(name) for name in args.backends.split(",") if name}
    environment = describe_environment(torch, args.device, backends)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for kernel in [name for name in args.kernels.split(",") if name]:
        for m in shape.tokens:
            rows.extend(bench_kernel(torch, kernel, m, shape, args.device, backends, compile_peers))
            for row in (row for row in rows if row["kernel"] == kernel and row["M"] == m):
                print(format_row(row), flush=True)
        write_results(args.out, rows, environment, time.perf_counter() - started)
    write_results(args.out, rows, environment, time.perf_counter() - started)
    print(render_markdown(rows, environment, time.perf_counter() - started))
    return 0


def backend_problem(backend: str) -> str | None:
    try:
        package = importlib.import_module(f"lazyops._backends.{backend}")
        return getattr(package, "unavailable_reason", lambda: None)()
    except Exception as error:  # noqa: BLE001 - a backend that cannot load is reported, not fatal
        return f"importing lazyops._backends.{backend} failed: {type(error).__name__}: {error}"


def factory(backend: str, kernel: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(f"lazyops._backends.{backend}.{kernel}"), f"{kernel}_tl")


# --- the problems: inputs, traffic, and the peers --------------------------------------------------------------


def make_inputs(torch, kernel: str, m: int, shape: Shape, device: str, generator) -> tuple:
    dtype, n = torch.bfloat16, shape.hidden

    def randn(*size: int, dtype=dtype):
        return torch.randn(*size, generator=generator, device=device, dtype=torch.float32).to(dtype)

    if kernel == "rmsnorm":
        return randn(m, n), randn(n)
    if kernel == "add_rmsnorm":
        return randn(m, n), randn(m, n), randn(n)
    if kernel == "silu_and_mul":
        return (randn(m, 2 * n),)
    if kernel == "softmax":
        return (randn(m, n),)
    if kernel == "rope":
        cache_rows = max(shape.tokens)
        positions = torch.randint(0, cache_rows, (m,), generator=generator, device=device)
        query, key = randn(m, shape.query_heads * shape.head_dim), randn(m, shape.key_heads * shape.head_dim)
        return positions, query, key, randn(cache_rows, shape.head_dim, dtype=torch.float32)
    return randn(m, n), randn(n, n)


def traffic(kernel: str, m: int, shape: Shape) -> float:
    """Bytes one call must move (bf16 = 2 bytes), or for matmul the floating-point operations."""
    n, size = shape.hidden, 2
    if kernel == "rmsnorm":  # x, weight in; y out
        return (2 * m * n + n) * size
    if kernel == "add_rmsnorm":  # x, residual, weight in; residual, y out
        return (4 * m * n + n) * size
    if kernel == "silu_and_mul":  # x[M, 2n] in; y[M, n] out
        return 3 * m * n * size
    if kernel == "softmax":
        return 2 * m * n * size
    if kernel == "rope":  # query and key in and out; positions (int64) and each token's float32 cache row in
        features = (shape.query_heads + shape.key_heads) * shape.head_dim
        return 2 * m * features * size + m * 8 + m * shape.head_dim * 4
    return 2 * m * n * n  # matmul: FLOP


def problem_bytes(args: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in args)


def eager_peer(torch, kernel: str, shape: Shape) -> Callable[..., Any]:
    """The torch reference's math, as the torch backend runs it (float32 inside), without its argument checks."""
    from lazyops._backends.torch.add_rmsnorm import add_rmsnorm_reference
    from lazyops._backends.torch.rmsnorm import rmsnorm_reference
    from lazyops._backends.torch.rope import rope_reference
    from lazyops._backends.torch.silu_and_mul import silu_and_mul_reference
    from lazyops._backends.torch.softmax import softmax_reference

    dtype, eps = torch.bfloat16, 1e-6
    if kernel == "rmsnorm":
        return lambda x, w: rmsnorm_reference(x.float(), w.float(), eps).to(dtype)
    if kernel == "add_rmsnorm":

        def add_rmsnorm(x, residual, w):
            y, total = add_rmsnorm_reference(x.float(), residual.float(), w.float(), eps)
            residual.copy_(total)
            return y.to(dtype)

        return add_rmsnorm
    if kernel == "silu_and_mul":
        return lambda x: silu_and_mul_reference(x.float()).to(dtype)
    if kernel == "softmax":
        return lambda x: softmax_reference(x.float()).to(dtype)
    if kernel == "rope":

        def rope(positions, query, key, cache):
            query.copy_(rope_reference(positions, query.float(), cache, shape.head_dim, True))
            key.copy_(rope_reference(positions, key.float(), cache, shape.head_dim, True))
            return query, key

        return rope
    return lambda a, b: a @ b


def build_backend_kernel(backend: str, kernel: str, shape: Shape, dtype) -> Callable[..., Any]:
    make = factory(backend, kernel)
    if kernel == "rope":
        return make(shape.head_dim, dtype, is_neox=True)
    if kernel == "matmul":
        return make(shape.hidden, shape.hidden, dtype)
    return make(shape.hidden, dtype)


# --- timing ------------------------------------------------------------------------------------------------------


def bench_kernel(torch, kernel, m, shape, device, backends, compile_peers) -> list[dict[str, Any]]:
    generator = torch.Generator(device=device).manual_seed(m)
    first = make_inputs(torch, kernel, m, shape, device, generator)
    count = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / problem_bytes(first))))
    sets = [first] + [make_inputs(torch, kernel, m, shape, device, generator) for _ in range(count - 1)]
    impls: dict[str, Callable[[], Callable[..., Any]] | str] = {}
    for backend, problem in backends.items():
        if not problem:  # a backend that cannot run here is named once, in the header, not on every row
            impls[f"lazyops {backend}"] = lambda b=backend: build_backend_kernel(b, kernel, shape, torch.bfloat16)
    eager = eager_peer(torch, kernel, shape)
    impls[EAGER] = lambda: eager
    impls[COMPILED] = (lambda: torch.compile(eager, dynamic=False)) if compile_peers else "not run (--no-compile)"
    amount = traffic(kernel, m, shape)
    rows = []
    for name, build in impls.items():
        row: dict[str, Any] = {"kernel": kernel, "M": m, "impl": name, "input_sets": count}
        rows.append(row)
        if isinstance(build, str):
            row["error"] = build
            continue
        try:
            fn = build()
            started = time.perf_counter()
            fn(*sets[0])  # compiles, where there is anything to compile
            if device == "cuda":
                torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - started, 2)
            row["us"] = median_us(torch, fn, sets, device)
        except Exception as error:  # noqa: BLE001 - one implementation failing must not stop the run
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            continue
        if kernel == "matmul":
            row["TFLOP/s"] = amount / (row["us"] * 1e-6) / 1e12
        else:
            row["GB/s"] = amount / (row["us"] * 1e-6) / 1e9
    add_ratios(rows)
    del sets
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def median_us(torch, fn, sets, device: str) -> float:
    calls = 0

    def step() -> None:
        nonlocal calls
        fn(*sets[calls % len(sets)])
        calls += 1

    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median") * 1e3
    times = []
    for _ in range(max(5, len(sets))):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def add_ratios(rows: list[dict[str, Any]]) -> None:
    metric = "TFLOP/s" if rows[0]["kernel"] == "matmul" else "GB/s"
    base = {row["impl"]: row.get(metric) for row in rows}
    for row in rows:
        for peer, key in ((EAGER, "x_eager"), (COMPILED, "x_compile")):
            if row.get(metric) and base.get(peer):
                row[key] = row[metric] / base[peer]


# --- results -----------------------------------------------------------------------------------------------------


def describe_environment(torch, device: str, backends: dict[str, str | None]) -> dict[str, Any]:
    return {
        **shared_environment(torch, device, "Triton interpreter; timings meaningless"),
        "backends": {name: problem or "ok" for name, problem in backends.items()},
    }


def format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['kernel']:>13} M={row['M']:<6} {row['impl']:>16}: {row['error']}"
    metric = "TFLOP/s" if row["kernel"] == "matmul" else "GB/s"
    ratios = " ".join(f"{key}={row[key]:.2f}" for key in ("x_eager", "x_compile") if key in row)
    head = f"{row['kernel']:>13} M={row['M']:<6} {row['impl']:>16}"
    return f"{head}: {row['us']:9.1f} us {row[metric]:8.1f} {metric} {ratios}"


def render_markdown(rows: list[dict[str, Any]], environment: dict[str, Any], elapsed: float) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in environment["versions"].items())
    lines = [
        "# Kernel timings on a GPU",
        "",
        f"Generated by `{environment['command']}`; do not edit.",
        "",
        f"- date: {environment['date']}",
        f"- device: {environment['device']}",
        f"- versions: {versions}; Python {environment['python']}",
        f"- backends: {', '.join(f'{k} ({v})' for k, v in environment['backends'].items())}",
        f"- wall time: {elapsed:.0f} s",
        "",
        "bf16, hidden 4096 (rope: 32 query + 8 key heads of 128, neox; matmul: [M, 4096] x [4096, 4096]). Medians "
        "of `triton.testing.do_bench`; calls cycle through enough input sets to overflow the L2. GB/s counts each "
        "input read once and each output written once (in-place tensors both); matmul is in TFLOP/s. "
        "`x eager` / `x compile`: this row's rate over the torch eager / torch.compile peer's, same run.",
        "",
        "| kernel | M | implementation | µs | GB/s or TFLOP/s | x eager | x compile |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['kernel']} | {row['M']} | {row['impl']} | — | {row['error']} | | |")
            continue
        rate = row.get("TFLOP/s", row.get("GB/s"))
        ratios = [f"{row[key]:.2f}" if key in row else "" for key in ("x_eager", "x_compile")]
        cells = [row["kernel"], row["M"], row["impl"], f"{row['us']:.1f}", f"{rate:.1f}", *ratios]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def write_results(out: Path, rows, environment, elapsed: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_bench.md").write_text(render_markdown(rows, environment, elapsed))
    payload = {"environment": environment, "elapsed_s": round(elapsed, 1), "rows": rows}
    (out / "gpu_bench.json").write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
