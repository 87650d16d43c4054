"""Where the time of Triton's ``sample_tl`` goes, launch by launch: each kernel's device time under
``torch.profiler`` and the time a call takes (back-to-back calls between two synchronizes), on the split path and on one
program a row, at the batches given. Issue 37: on an H100 (2026-12-07) the split path took 1,759 µs a call at B = 1 in
a CUDA graph, no faster than one program a row (1,737 µs, 2026-12-06), where 18 launches of 32 programs each were
expected to take about a tenth of that; this says which launch holds the time. ``--launches`` times each of the
split path's launches alone (a synchronize before it, CUDA events around it: the profiler names the four phases of
the pass kernel alike) and prints each binary's registers and spills; ``--cubins DIR`` writes the binaries there.

    python scripts/profile_sampler.py                                          # on a GPU: V = 128256, B = 1 and 16
    python scripts/profile_sampler.py --device cpu --vocab 1000 --batches 1    # the script's logic, in the interpreter
    python scripts/profile_sampler.py --launches --cubins /tmp/cubins          # on a GPU: launch by launch
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any
from unittest import mock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--batches", default="1,16", help="comma list of batch sizes (default 1,16)")
    parser.add_argument("--calls", type=int, default=20, help="calls profiled and timed a path (default 20)")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for Triton's interpreter")
    parser.add_argument("--launches", action="store_true", help="time the split path's launches one by one")
    parser.add_argument("--cubins", help="with --launches on a GPU: write each binary of the split path here")
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
    sampler = spec("sample_tl")
    config = sampler.bind(options.vocab, torch.float32)
    name = torch.cuda.get_device_name() if gpu else "the host (Triton's interpreter)"
    print(f"sample_tl on {name}, V = {options.vocab}, float32, mixed parameters, {options.calls} calls a path")
    for batch in (int(b) for b in options.batches.split(",")):
        inputs = examples(sampler).example_inputs(config, batch, Inputs(0, options.device), {"params": "mixed"})
        if options.launches:
            time_launches(sample, inputs, options, sync)
            continue
        for path, below in (("the split path", 1 << 30), ("one program a row", 0)):
            with mock.patch.object(sample, "SPLIT_BELOW", below):  # read when the factory builds, and only then
                call = _api.kernel_factory("triton", "sample_tl")(options.vocab, torch.float32)
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


def time_launches(sample: Any, inputs: tuple[Any, ...], options: Any, sync: Callable[[], Any]) -> None:
    """Each launch of the split path (the factory's own, whatever the batch) timed alone over ``options.calls``
    calls: the median µs of each launch in call order, then each binary's registers and spills (Triton's own
    counts)."""
    import statistics

    import torch

    from lazyops import _api

    gpu = options.device != "cpu"
    built: list[Any] = []

    class Recorded(sample._SplitPath):  # the path the factory builds, kept for its launchers
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    with mock.patch.multiple(sample, SPLIT_BELOW=1 << 30, _SplitPath=Recorded):
        call = _api.kernel_factory("triton", "sample_tl")(options.vocab, inputs[0].dtype)
    (path,) = built
    times: dict[int, list[float]] = {}
    labels: dict[int, str] = {}
    order = [0]

    def timed(label: str, launcher: Any) -> Callable[..., None]:
        def launch(grid: tuple[int, ...], *args: Any) -> None:
            index = order[0]
            order[0] += 1
            sync()
            started = time.perf_counter()
            if gpu:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
            launcher(grid, *args)
            if gpu:
                end.record()
            sync()
            elapsed = begin.elapsed_time(end) * 1e3 if gpu else (time.perf_counter() - started) * 1e6
            labels[index] = label
            times.setdefault(index, []).append(elapsed)

        return launch

    for key, launcher in list(path.scan.items()):
        path.scan[key] = timed("scan", launcher)
    for phase, launcher in list(path.phase.items()):
        path.phase[phase] = timed(f"pass {('keys', 'first mass', 'mass', 'draw')[phase.value]}", launcher)
    for key, launcher in list(path.finish.items()):
        path.finish[key] = timed("finish", launcher)
    print(f"\n## B = {inputs[0].shape[0]}, the split path launch by launch ({path.chunks} chunks):", end=" ")
    print("temperature", inputs[1].tolist()[:4], "top_k", inputs[2].tolist()[:4], "top_p", inputs[3].tolist()[:4])
    for _ in range(options.calls + 1):  # the first compiles
        order[0] = 0
        call(*inputs)
    for index in sorted(times):
        print(f"launch {index:2d} {labels[index]:>16}: {statistics.median(times[index][1:]):10.1f} µs")
    if not gpu:
        return
    for kernel in (sample._split_scan_kernel, sample._split_pass_kernel, sample._split_finish_kernel):
        for device_cache in kernel.device_caches.values():
            for key, binary in device_cache[0].items():
                name = f"{kernel.__name__}_{abs(hash(key)) % 10**8}.cubin"
                print(
                    f"{name}: {binary.n_regs} registers, {binary.n_spills} spills,",
                    f"{binary.metadata.shared} B shared, {binary.metadata.num_warps} warps",
                )
                if options.cubins:
                    os.makedirs(options.cubins, exist_ok=True)
                    with open(os.path.join(options.cubins, name), "wb") as cubin:
                        cubin.write(binary.asm["cubin"])


if __name__ == "__main__":
    main()
