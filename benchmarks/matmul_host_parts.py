"""Where the host time of Triton's decode GEMM call goes, piece by piece, beside cuBLAS's, in one process.

``matmul_host_ab.md`` (2026-12-01) measured a lazyops Triton matmul call at ~47 µs of host time against 19-25 µs
for ``a @ b`` on the H200's host, so at decode sizes ``do_bench`` times the launch path more than the kernel. This
script takes the call apart, each piece timed on its own as host time per call (``--calls`` back-to-back calls,
the clock read before the one synchronize, so queued GPU work is not counted):

- the whole call as a user makes it (``lazyops`` factory, ``kernel(a, b)``), and ``a @ b`` / ``torch.mm(out=)``;
- the backend's launch without the spec's layer (``build_matmul(...)(a, b, out)``) and the output's allocation;
- inside it: the split-K workspace's allocation, the main kernel's launcher, the reduce's launcher;
- inside a launcher: its specialization key, the current device and stream, the compiled kernel's bare ``run``;
- for the TMA tile: building the three host tensor descriptors.

    python3 benchmarks/matmul_host_parts.py --out DIR         # on a GPU; writes matmul_host_parts.{json,md}
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

SCRIPT = "benchmarks/matmul_host_parts.py"
TOKENS = (1, 16, 128)


def host_us(call: Callable[[], Any], calls: int, rounds: int) -> tuple[float, list[float]]:
    """Median over ``rounds`` of the host time per call of ``calls`` back-to-back calls (clock stopped before the
    synchronize: what the host spends, not what it waits for)."""
    import torch

    samples = []
    for _ in range(rounds):
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        elapsed = time.perf_counter() - started
        torch.cuda.synchronize()
        samples.append(elapsed / calls * 1e6)
    return statistics.median(samples), samples


def pieces(m: int, n: int, k: int) -> list[tuple[str, Callable[[], Any]]]:
    """``(what, call)`` for every piece of one token count's call, outermost first."""
    import torch
    from triton.runtime import driver

    from lazyops._backends.triton import matmul as triton_matmul
    from lazyops._registry import Registry

    dtype = torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype) / k**0.5
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    kernel = Registry.discover()["triton"].kernel("matmul_tl")(n=n, k=k, dtype=dtype)
    launch = triton_matmul.build_matmul(n, k, dtype)
    launch(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)
    plans = inspect.getclosurevars(launch).nonlocals["plans"]
    main, grid, split, reduce, _ = plans[m]  # the eager launch (a graph's is the last)
    partial = torch.empty((split, m, n), dtype=torch.float32, device="cuda") if reduce else None
    main_out, out_stride = (partial, n) if reduce else (out, out.stride(0))
    grid_main = (grid, split) if reduce else (grid,)
    active = driver.active
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("a @ b (cuBLAS, allocating)", lambda: a @ b),
        ("torch.mm(a, b, out=c)", lambda: torch.mm(a, b, out=out)),
        ("lazyops kernel(a, b)", lambda: kernel(a, b)),
        ("lazyops kernel(a, b, out=c)", lambda: kernel(a, b, out=out)),
        ("launch(a, b, c): the backend without the spec's layer", lambda: launch(a, b, out)),
        ("a.new_empty(m, n): the output", lambda: a.new_empty((m, n))),
    ]
    if reduce is not None:
        f32 = torch.float32
        reduce_grid = (triton_matmul.cdiv(m * n, triton_matmul.SUM_BLOCK),)
        rows += [
            ("torch.empty: the split-K workspace", lambda: torch.empty((split, m, n), dtype=f32, device="cuda")),
            ("reduce launcher", lambda: reduce(reduce_grid, partial, out, m, n)),
        ]
    rows.append(("main launcher (grid, a, b, ...)", lambda: main(grid_main, a, b, main_out, m, k, out_stride)))
    pointer_launcher = main if isinstance(main, triton_matmul.Launcher) else None
    if pointer_launcher is None:  # the TMA tile: its launch closes over a Launcher per kernel
        tma = inspect.getclosurevars(main).nonlocals["tma"]
        descriptor = triton_matmul.TensorDescriptor
        block = inspect.getclosurevars(main).nonlocals
        rows.append(
            (
                "three TensorDescriptor(...) built",
                lambda: (
                    descriptor(a, [m, k], [k, 1], block["block_a"]),
                    descriptor(b, [k, n], [n, 1], block["block_b"]),
                    descriptor(out, [m, n], [n, 1], block["block_c"]),
                ),
            )
        )
        pointer_launcher = tma
    launcher = pointer_launcher
    binary = next(iter(launcher._binaries.values()))
    device = active.get_current_device()
    sample_args = (a, b, main_out, m, k, out_stride)
    rows += [
        ("Launcher._key(device, args)", lambda: launcher._key(device, sample_args)),
        ("driver.active.get_current_device()", active.get_current_device),
        ("driver.active.get_current_stream(device)", lambda: active.get_current_stream(device)),
        ("torch.cuda.current_device()", torch.cuda.current_device),
    ]
    if isinstance(main, triton_matmul.Launcher):
        stream = active.get_current_stream(device)
        values = (*sample_args, *launcher._tail)
        rows.append(
            (
                "binary.run(...): Triton's C launcher alone",
                lambda: binary.run(
                    grid,
                    split if reduce else 1,
                    1,
                    stream,
                    binary.function,
                    binary.packed_metadata,
                    None,
                    None,
                    None,
                    *values,
                ),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    args = parser.parse_args(argv)
    import torch
    from _environment import describe_environment

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.gettempdir()) / "lazyops-matmul-host-parts"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with torch.inference_mode():
        for m in TOKENS:
            for what, call in pieces(m, args.n, args.k):
                median, samples = host_us(call, args.calls, args.rounds)
                rows.append({"m": m, "piece": what, "host_us": median, "samples": samples})
                print(f"M={m} {what}: {median:.2f} us", flush=True)
    payload = {**describe_environment(torch, "cuda", ""), "calls": args.calls, "rounds": args.rounds, "rows": rows}
    (out / "matmul_host_parts.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = [
        "# Where the host time of Triton's decode GEMM call goes",
        "",
        f"Generated by `{SCRIPT}`: `{payload['command']}`",
        "",
        f"{payload['date']}, {payload['device']}, bfloat16, [M, {args.k}] x [{args.k}, {args.n}]; versions: "
        + ", ".join(f"{key} {value}" for key, value in payload["versions"].items())
        + f"; lazyops at {payload['commit']}. Host µs per call: median of {args.rounds} rounds of {args.calls} "
        "back-to-back calls, the clock stopped before the synchronize. Pieces are nested: each row below the "
        "whole call is part of a row above it.",
        "",
        "| M | piece | host µs a call | rounds |",
        "| ---: | --- | ---: | --- |",
    ]
    lines += [
        f"| {r['m']} | {r['piece']} | {r['host_us']:.2f} | {', '.join(f'{s:.1f}' for s in r['samples'])} |"
        for r in rows
    ]
    (out / "matmul_host_parts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
