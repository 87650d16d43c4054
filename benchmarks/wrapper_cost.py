"""What lazyops adds on the host to each call: the kernel as its factory returns it against the backend's launch.

    python3 benchmarks/wrapper_cost.py [--device cpu|cuda] [--backends torch,triton,tilelang] [--out DIR]

At one token a kernel's own work is a few microseconds, so the Python around it (the compile check, the plain-call
predicate, the output's allocation) is a share an engine pays on every step outside CUDA graphs. For each kernel
of each backend, at one token on the spec's benchmark shape (hidden 4096; matmul 4096 × 4096 on a GPU, 1024 × 1024
on the host), this times:

- ``kernel``: the kernel a factory returns, called as an engine calls it (``kernel(*inputs)``);
- ``launch``: the backend's own launch, the function the factory wraps (``kernel(*inputs, out)`` for a launch that
  writes ``out``, given a preallocated one), with no check and no allocation;

sampled alternately (order flipped every repeat), each sample ``--calls`` back-to-back calls timed with
``perf_counter`` (CUDA: a synchronize before and after, so a launch that outruns the GPU shows the GPU's time,
which is why the figure to read is the difference). ``added`` = kernel − launch, medians of the repeats, under
``torch.inference_mode()`` as an engine runs. Writes ``wrapper_cost_<device>.{md,json}`` into DIR (default
``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

KERNELS = ("rmsnorm", "add_rmsnorm", "silu_and_mul", "gelu_and_mul", "softmax", "layernorm", "rope", "matmul")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--backends", default="torch", help="comma-separated built-in backends")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def factory_and_launch(backend: str, kernel: str, factory_args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The kernel the backend's factory returns, and the launch it wraps (caught as ``KernelSpec.guarded`` gets
    it)."""
    from lazyops.specs._spec import KernelSpec

    caught: dict[str, Any] = {}
    guarded = KernelSpec.guarded

    def catching(self: Any, config: Any, launch: Any, *rest: Any, **options: Any) -> Any:
        caught["launch"], caught["writes_out"] = launch, options.get("writes_out", False)
        return guarded(self, config, launch, *rest, **options)

    KernelSpec.guarded = catching  # type: ignore[method-assign]
    try:
        module = importlib.import_module(f"lazyops._backends.{backend}.{kernel}")
        made = getattr(module, f"{kernel}_tl")(*factory_args, **kwargs)
    finally:
        KernelSpec.guarded = guarded  # type: ignore[method-assign]
    return made, caught["launch"], caught["writes_out"]


def per_call_s(torch: Any, fn: Any, args: tuple[Any, ...], calls: int, cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / calls


def measure(torch: Any, backend: str, kernel: str, options: argparse.Namespace) -> dict[str, Any]:
    from lazyops.specs import spec as spec_of
    from lazyops.testing._compare import Inputs

    dtype = getattr(torch, options.dtype)
    spec = spec_of(f"{kernel}_tl")
    example = spec.benchmark(dtype)
    size = 1024 if options.device == "cpu" else 4096
    factory_args = (size, size, dtype) if kernel == "matmul" else example.args
    config = spec.configure(*factory_args, **example.kwargs)
    inputs = tuple(spec.example_inputs(config, 1, Inputs(1, options.device), dict(example.geometry)))
    made, launch, writes_out = factory_and_launch(backend, kernel, factory_args, example.kwargs)
    launch_args = (*inputs, spec.output(config, *inputs)) if writes_out else inputs
    cuda = options.device == "cuda"
    sides = {"kernel": (made, inputs), "launch": (launch, launch_args)}
    for fn, args in sides.values():
        per_call_s(torch, fn, args, 50, cuda)
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(options.repeats):
        for name in sides if repeat % 2 == 0 else reversed(list(sides)):
            fn, args = sides[name]
            samples[name].append(per_call_s(torch, fn, args, options.calls, cuda))
    kernel_us = statistics.median(samples["kernel"]) * 1e6
    launch_us = statistics.median(samples["launch"]) * 1e6
    return {
        "kernel": kernel,
        "backend": backend,
        "dtype": options.dtype,
        "kernel_us": round(kernel_us, 2),
        "launch_us": round(launch_us, 2),
        "added_us": round(kernel_us - launch_us, 2),
        "added_range_us": [
            round((k - launch) * 1e6, 2) for k, launch in ((min(samples["kernel"]), min(samples["launch"])),
                                                            (max(samples["kernel"]), max(samples["launch"])))
        ],
    }


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    import torch
    from _environment import describe_environment

    if options.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device here", file=sys.stderr)
        return 2
    rows = []
    with torch.inference_mode():
        for backend in options.backends.split(","):
            for kernel in options.kernels.split(","):
                try:
                    row = measure(torch, backend, kernel, options)
                except Exception as error:  # noqa: BLE001 - a kernel a backend lacks is a row, not the end of the run
                    row = {"kernel": kernel, "backend": backend, "error": f"{type(error).__name__}: {error}"[:200]}
                rows.append(row)
                print(row, flush=True)
    environment = describe_environment(torch, options.device, cpu_note=f"{torch.get_num_threads()} threads")
    stem = f"wrapper_cost_{options.device}"
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / f"{stem}.json").write_text(json.dumps({"environment": environment, "rows": rows}, indent=1) + "\n")
    lines = [
        "# What lazyops adds on the host to each call (one token)",
        "",
        "Generated by `benchmarks/wrapper_cost.py`; do not edit by hand. Method: the script's docstring.",
        "",
        f"- date: {environment['date']}; machine: {environment['device']}; commit: {environment.get('commit')}",
        f"- command: `{environment['command']}`",
        f"- {options.dtype}, {options.repeats} alternating samples of {options.calls} calls per side, medians",
        "",
        "| kernel | backend | kernel µs | launch alone µs | added by lazyops µs |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['kernel']} | {row['backend']} | {row['error']} | | |")
        else:
            lines.append(
                f"| {row['kernel']} | {row['backend']} | {row['kernel_us']:.2f} | {row['launch_us']:.2f} | "
                f"{row['added_us']:.2f} |"
            )
    (options.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {options.out / stem}.{{md,json}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
