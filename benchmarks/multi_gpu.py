"""Kernels on several GPUs: tensors on a GPU that is not the current one, and data-parallel ranks under torchrun.

    python3 benchmarks/multi_gpu.py [--out DIR]          # on a machine with two GPUs (the nvidia-h200-x2 kind)

Two checks, written to ``DIR/multi_gpu.{md,json}`` (default ``benchmarks/results``):

1. **Another device.** With ``cuda:0`` current, every kernel of every GPU backend is given tensors on ``cuda:1``
   and checked against the float64 reference (the conformance kit's ``check_case``, on the spec's engine-sized
   configuration); the current device must still be ``cuda:0`` afterwards.
2. **torchrun.** ``torchrun --nproc-per-node 2`` runs this file as a worker on each rank: every rank resolves its
   kernels through the namespace on its own GPU (the platform default, with the summary line forced by selecting
   a chain), writes a trace to its own file (``LAZYOPS_TRACE=.../trace-{rank}.jsonl``), and all-reduces an
   rmsnorm output, compared with the reference's all-reduce. The driver checks that only rank 0 printed
   lazyops' lines and that there is one trace file per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
GPU_BACKENDS = ("triton", "tilelang")


def other_device_check() -> list[dict[str, Any]]:
    import torch

    from lazyops._registry import Registry
    from lazyops.specs import kernel_names, spec
    from lazyops.testing import Case, check_case

    torch.cuda.set_device(0)
    registry = Registry.discover()
    rows = []
    for backend in GPU_BACKENDS:
        reason = None
        try:
            reason = registry[backend].unavailable_reason()
        except Exception as error:  # noqa: BLE001 - reported, not raised: the other backend still runs
            reason = f"{type(error).__name__}: {error}"
        for kernel in kernel_names():
            row: dict[str, Any] = {"backend": backend, "kernel": kernel}
            if reason:
                rows.append({**row, "status": "skipped", "detail": reason})
                continue
            kernel_spec = spec(kernel)
            example = kernel_spec.benchmark(torch.bfloat16)
            case = Case(kernel, example.args, example.kwargs, (1, 7, 300), seed=11, geometry=example.geometry)
            try:
                error = check_case(registry[backend].kernel(kernel), case, device="cuda:1")
                current = torch.cuda.current_device()
                status = "ok" if current == 0 else f"FAILED: the current device became cuda:{current}"
                rows.append({**row, "status": status, "detail": f"relative error {error:.2e} on cuda:1"})
            except Exception as error:  # noqa: BLE001 - each kernel's failure is a row of the result
                rows.append({**row, "status": "FAILED", "detail": f"{type(error).__name__}: {error}"[:300]})
            torch.cuda.set_device(0)
    return rows


def worker() -> None:
    """One torchrun rank: resolve, run, all-reduce, compare; print one JSON line for the driver."""
    import torch
    import torch.distributed as dist

    import lazyops
    from lazyops.specs import spec

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    n, dtype = 4096, torch.bfloat16
    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, n, generator=generator).to(dtype).cuda()
    weight = torch.randn(n, generator=generator).to(dtype).cuda()
    kernel = lazyops.rmsnorm_tl(n, dtype)
    lazyops.softmax_tl(n, dtype)  # a second kernel, so each trace holds more than one line
    with torch.inference_mode():
        y = kernel(x, weight).float()
        config = spec("rmsnorm_tl").configure(n, dtype)
        reference = spec("rmsnorm_tl").reference(config, x.double(), weight.double())[0]
        dist.all_reduce(y)
        dist.all_reduce(reference)
    error = ((y.double() - reference).norm() / reference.norm()).item()
    print(json.dumps({"rank": rank, "backend": lazyops.which("rmsnorm_tl").backend, "error": error}), flush=True)
    dist.destroy_process_group()


def torchrun_check() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ)
        default = env.get("LAZYOPS_BACKEND_UNDER_TEST", "")
        # A chain that is not just the default makes the first resolution print its summary line: the line
        # whose printing by rank 0 only is what this checks.
        env.update(
            LAZYOPS_BACKEND=default or "tilelang,triton,torch",
            LAZYOPS_TRACE=os.path.join(folder, "trace-{rank}.jsonl"),
        )
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__, "--worker"]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        traces = sorted(p.name for p in Path(folder).iterdir())
        trace_lines = {p.name: len(p.read_text().splitlines()) for p in Path(folder).iterdir()}
    lazyops_lines = [line for line in result.stderr.splitlines() if "lazyops:" in line]
    return {
        "returncode": result.returncode,
        "ranks": lines,
        "trace_files": traces,
        "trace_lines": trace_lines,
        "lazyops_stderr_lines": lazyops_lines,
        "stderr_tail": result.stderr[-2000:] if result.returncode else "",
        "ok": result.returncode == 0
        and len(lines) == 2
        and all(rank["error"] < 8e-3 for rank in lines)
        and traces == ["trace-0.jsonl", "trace-1.jsonl"]
        and len(lazyops_lines) == 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker()
        return 0
    from _environment import describe_environment

    import torch

    if torch.cuda.device_count() < 2:
        print("multi_gpu.py needs two GPUs (the nvidia-h200-x2 machine)", file=sys.stderr)
        return 2
    rows = other_device_check()
    distributed = torchrun_check()
    environment = describe_environment(torch, "cuda", "")
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"environment": environment, "other_device": rows, "torchrun": distributed}
    (out / "multi_gpu.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    lines = [
        "# Kernels on several GPUs",
        "",
        f"Made by `python3 benchmarks/multi_gpu.py` on {environment.get('device', '?')}, {environment.get('date', '?')}.",
        "",
        "## Tensors on cuda:1 while cuda:0 is current",
        "",
        "| backend | kernel | status | detail |",
        "| --- | --- | --- | --- |",
        *(f"| {r['backend']} | {r['kernel']} | {r['status']} | {r['detail']} |" for r in rows),
        "",
        "## torchrun --nproc-per-node 2",
        "",
        f"- exit code {distributed['returncode']}; overall {'ok' if distributed['ok'] else 'FAILED'}",
        *(f"- rank {r['rank']}: kernels from {r['backend']}, all-reduced rmsnorm relative error {r['error']:.2e}"
          for r in distributed["ranks"]),
        f"- trace files: {', '.join(distributed['trace_files'])} (lines: {distributed['trace_lines']})",
        f"- lazyops lines on stderr ({len(distributed['lazyops_stderr_lines'])}, rank 0 only):",
        *(f"  - `{line.strip()}`" for line in distributed["lazyops_stderr_lines"]),
    ]
    if distributed["stderr_tail"]:
        lines += ["", "```", distributed["stderr_tail"], "```"]
    (out / "multi_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [r for r in rows if r["status"].startswith("FAILED")]
    return 1 if failed or not distributed["ok"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
