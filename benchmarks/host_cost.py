"""Where the host time of a kernel call goes: cProfile over 10,000 calls at one token, every backend.

    python3 benchmarks/host_cost.py [--out DIR] [--kernels rmsnorm,softmax] [--calls 10000]

At decode sizes a kernel's device work takes a microsecond or two, so what an engine pays outside CUDA graphs is
the host's: the spec's checks, the output's allocation, and the backend's launch path. For each kernel and backend
this writes the wall time per call (perf_counter around back-to-back calls, one synchronize at the end) and the
functions that take the most of it under cProfile (which inflates every Python call, so read shares, not
microseconds). Writes ``host_cost.md`` into DIR (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--kernels", default="rmsnorm,softmax,add_rmsnorm,rope")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--device", default="cuda")
    options = parser.parse_args()

    import torch
    from _environment import describe_environment

    from lazyops import _bench
    from lazyops._registry import Registry
    from lazyops.specs import spec
    from lazyops.testing import Inputs

    registry = Registry.discover()

    def synchronize() -> None:
        if options.device.startswith("cuda"):
            torch.cuda.synchronize()

    environment = describe_environment(torch, options.device, "host cost on the CPU")
    lines = [
        "# Host cost per kernel call at one token",
        "",
        f"Made by `python3 benchmarks/host_cost.py` on {environment['device']}, {environment['date']}; "
        f"versions {environment['versions']}.",
        "",
    ]
    for stem in options.kernels.split(","):
        kernel = f"{stem}_tl"
        kernel_spec = spec(kernel)
        example = _bench.example(kernel, torch.bfloat16, small=options.device == "cpu")
        args, kwargs, geometry = example.args, example.kwargs, example.geometry
        config = kernel_spec.configure(*args, **kwargs)
        inputs = kernel_spec.example_inputs(config, 1, Inputs(0, options.device), geometry)
        for backend in registry.names:
            try:
                if registry[backend].unavailable_reason():
                    continue
                call = registry[backend].kernel(kernel)(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - a backend that cannot build is reported, not fatal
                lines += [f"## {kernel}, {backend}: cannot build ({type(error).__name__}: {error})", ""]
                continue
            with torch.inference_mode():
                for _ in range(200):
                    call(*inputs)
                synchronize()
                start = time.perf_counter()
                for _ in range(3000):
                    call(*inputs)
                synchronize()
                per_call = (time.perf_counter() - start) / 3000 * 1e6
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(options.calls):
                    call(*inputs)
                profile.disable()
                synchronize()
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
            table = [line for line in text.getvalue().splitlines() if line.strip()][-13:]
            lines += [f"## {kernel}, {backend}: {per_call:.1f} µs per call (wall, 3000 calls)", "", "```", *table, "```", ""]
            print(lines[-len(table) - 4], flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_cost.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
