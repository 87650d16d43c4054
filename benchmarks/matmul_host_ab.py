"""Triton's decode GEMM against itself at an earlier commit: stream, host and graph time side by side, one run.

``gemm_grid.md`` read Triton's [M, 4096] x [4096, 4096] cells at M = 1 / 16 / 128 as 19.2 / 19.2 / 22.2 µs of
stream time at 12:18 (2026-12-01) and 21.7-34.8 / 19.4-29.6 / 33.9-42.1 µs in three runs after the TMA prefill
tile landed, while their times inside CUDA graphs stayed the same. At these sizes ``do_bench`` times the host's
launches as much as the kernels, so this script puts the two versions of the launch path in one process: the
current ``lazyops._backends.triton.matmul`` (with its ``_launch``) and the same two files from ``--old DIR``
(extracted from git, loaded under other module names; the old matmul is given the old launcher). For each token
count, interleaved over ``--rounds`` rounds: stream time (``do_bench`` median, L2 flushed, inputs rotating), host
time per call (``--calls`` back-to-back calls, one synchronize) and per-call time in a CUDA graph; cuBLAS beside.

    mkdir -p /tmp/old && git show 3354ebb:src/lazyops/_backends/triton/matmul.py > /tmp/old/matmul.py \\
        && git show 3354ebb:src/lazyops/_backends/triton/_launch.py > /tmp/old/_launch.py
    python3 benchmarks/matmul_host_ab.py --old /tmp/old --out /tmp/results     # on the GPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

SCRIPT = "benchmarks/matmul_host_ab.py"
TOKENS = (1, 16, 128)
ROTATE_BYTES = 256 * 2**20


def load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--old: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def launches(old: Path, n: int, k: int, dtype: Any) -> dict[str, Any]:
    """``name -> call(a, b)`` for cuBLAS, the current Triton matmul and the old one."""
    import torch

    from lazyops._backends.triton import matmul as current

    old_launch = load("lazyops_ab_old_launch", old / "_launch.py")
    old_matmul = load("lazyops_ab_old_matmul", old / "matmul.py")
    old_matmul.Launcher = old_launch.Launcher  # the old matmul with the old launcher

    def wrap(launch: Any) -> Any:
        def call(a: Any, b: Any) -> Any:
            out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
            launch(a, b, out)
            return out

        return call

    return {
        "cuBLAS": lambda a, b: a @ b,
        "triton (current)": wrap(current.build_matmul(n, k, dtype)),
        "triton (old)": wrap(old_matmul.build_matmul(n, k, dtype)),
    }


def host_us(call: Any, a: Any, b: Any, calls: int) -> float:
    import torch

    for _ in range(50):
        call(a, b)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        call(a, b)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="folder holding the old matmul.py and _launch.py")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    args = parser.parse_args(argv)
    import torch
    from _environment import describe_environment

    from lazyops import _bench

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.gettempdir()) / "lazyops-matmul-host-ab"
    out.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16
    n, k = args.n, args.k
    calls = launches(args.old, n, k, dtype)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for m in TOKENS:
        size = (m * k + k * n) * 2
        sets = [
            (
                torch.randn(m, k, generator=generator).to("cuda", dtype),
                torch.randn(k, n, generator=generator).to("cuda", dtype),
            )
            for _ in range(max(1, min(16, math.ceil(ROTATE_BYTES / size))))
        ]
        samples: dict[str, dict[str, list[float]]] = {name: {"stream": [], "host": [], "graph": []} for name in calls}
        for round_ in range(args.rounds):
            order = list(calls) if round_ % 2 == 0 else list(reversed(calls))
            for name in order:
                call = calls[name]
                samples[name]["stream"].append(_bench._median_us(call, sets, "cuda", 1))
                samples[name]["host"].append(host_us(call, *sets[0], args.calls))
                samples[name]["graph"].append(_bench.graph_us(call, sets, captures=20, replays=10))
        for name, measured in samples.items():
            row = {"m": m, "n": n, "k": k, "impl": name}
            row.update({what: statistics.median(values) for what, values in measured.items()})
            row["samples"] = measured
            rows.append(row)
            print(
                f"M={m} {name}: stream {row['stream']:.1f} us, host {row['host']:.1f} us, graph {row['graph']:.1f} us",
                flush=True,
            )
    payload = {
        **describe_environment(torch, "cuda", ""),
        "old": str(args.old),
        "rounds": args.rounds,
        "calls": args.calls,
        "rows": rows,
    }
    (out / "matmul_host_ab.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = [
        "# Triton's decode GEMM: this commit against an earlier one, in one process",
        "",
        f"Generated by `{SCRIPT}`: `{payload['command']}`",
        "",
        f"{payload['date']}, {payload['device']}, bfloat16, [M, {k}] x [{k}, {n}]; versions: "
        + ", ".join(f"{key} {value}" for key, value in payload["versions"].items())
        + f"; lazyops at {payload['commit']}; old files from `{args.old}`. Medians over {args.rounds} interleaved "
        f"rounds: stream time (`do_bench`, L2 flushed), host time per call ({args.calls} back-to-back calls, one "
        "synchronize), per-call time in a CUDA graph (20 calls captured, replayed 10 times).",
        "",
        "| M | implementation | stream µs | host µs a call | graph µs |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {r['m']} | {r['impl']} | {r['stream']:.1f} | {r['host']:.1f} | {r['graph']:.1f} |" for r in rows]
    (out / "matmul_host_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
