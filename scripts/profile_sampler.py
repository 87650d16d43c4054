"""Where the time of Triton's ``sample_tl`` goes, launch by launch: each kernel's device time under
``torch.profiler`` and the time a call takes (back-to-back calls between two synchronizes), on the split path and on one
program a row, at the batches given. Issue 37: on an H100 (2026-12-07) the split path took 1,759 µs a call at B = 1 in
a CUDA graph, no faster than one program a row (1,737 µs, 2026-12-06), where 18 launches of 32 programs each were
expected to take about a tenth of that; this says which launch holds the time.

    python scripts/profile_sampler.py                                          # on a GPU: V = 128256, B = 1 and 16
    python scripts/profile_sampler.py --device cpu --vocab 1000 --batches 1    # the script's logic, in the interpreter
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--batches", default="1,16", help="comma list of batch sizes (default 1,16)")
    parser.add_argument("--calls", type=int, default=20, help="calls profiled and timed a path (default 20)")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for Triton's interpreter")
    options = parser.parse_args()
    if options.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates the kernels
    import torch
    from torch.profiler import ProfilerActivity, profile

    from lazyops import _api
    from lazyops._backends.triton import sample
    from lazyops.specs import spec
    from lazyops.testing._draws import Inputs
    from lazyops.testing.cases import examples

    gpu = options.device != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    kept = sample.SPLIT_BELOW
    sampler = spec("sample_tl")
    config = sampler.bind(options.vocab, torch.float32)
    name = torch.cuda.get_device_name() if gpu else "the host (Triton's interpreter)"
    print(f"sample_tl on {name}, V = {options.vocab}, float32, mixed parameters, {options.calls} calls a path")
    for batch in (int(b) for b in options.batches.split(",")):
        inputs = examples(sampler).example_inputs(config, batch, Inputs(0, options.device), {"params": "mixed"})
        for path, below in (("the split path", 1 << 30), ("one program a row", 0)):
            sample.SPLIT_BELOW = below  # read when the factory builds, and only then
            try:
                call = _api.kernel_factory("triton", "sample_tl")(options.vocab, torch.float32)
            finally:
                sample.SPLIT_BELOW = kept
            call(*inputs)  # compiles
            sync()
            started = time.perf_counter()
            for _ in range(options.calls):
                call(*inputs)
            sync()
            per_call = (time.perf_counter() - started) / options.calls * 1e6
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
            with profile(activities=activities) as profiled:
                for _ in range(options.calls):
                    call(*inputs)
                sync()
            print(f"\n## B = {batch}, {path}: {per_call:,.1f} µs a call, back to back (host and device)\n")
            order = "device_time_total" if gpu else "cpu_time_total"
            print(profiled.key_averages().table(sort_by=order, row_limit=12, max_name_column_width=40))


if __name__ == "__main__":
    main()
