"""Every memory-bound kernel against its peers and its ceilings: stream, CUDA-graph and host time, in one run.

    python benchmarks/bench_kernels.py                     # on the H200: results/h200/kernels.{md,json}
    python benchmarks/bench_kernels.py --device cpu --backend torch --dtypes float32,float16,bfloat16 \\
        --tokens 1,128,1024 --name torch_backend     # the torch backend against torch's ops on this CPU
    python benchmarks/bench_kernels.py --smoke --device cpu --out /tmp/k   # the script's logic, tiny shapes
    python benchmarks/bench_kernels.py --sampling          # sample_tl: results/h200/sampling.{md,json}
    python benchmarks/bench_kernels.py --moe               # fused_moe_tl: results/h200/moe_experts.{md,json}

``--sampling``: ``sample_tl`` and ``apply_penalties_tl`` at B = 1, 16, 64, 256 requests and V = 128256 and 151936
(issue 37's grid), mixed per-request parameters; at the first V also ``sample_tl`` writing the sampled and top-5
log-probabilities, and ``apply_penalties_tl`` with 8 logit-bias entries a request and a token bitmask (bfloat16
only). The ``torch.compile`` peer is compiled at the first V only (each compile takes tens of seconds).

``--moe``: ``fused_moe_tl`` at Mixtral-8x7B's and Qwen3-30B-A3B's experts (issue 36), routed evenly (a call reads
``min(E, T·k)`` experts, the bytes its rate counts): decode at T = 1, 8, 64 in CUDA graphs (µs, and those bytes' rate
as a share of the copy's: the goal is 80 %), prefill at 4096 and 16384 in stream time (TFLOP/s, against
``torch._grouped_mm`` with the same routing: the goal is 1.0×). No ``torch.compile`` peer unless ``--compile``.

Kernels: every kernel whose spec says it is memory-bound (``--kernels`` for others), each at its spec's engine-sized
configuration, in each backend that runs here (or of ``--backend``). Peers: ``torch eager`` and ``torch.compile``
(the spec's definition in float32, compiled per size), ``torch op`` (what a user writes in plain torch in the input
dtype) and ``liger-kernel`` where installed. Ceilings: a copy of the same bytes beside each kernel at each size, and a
256 MiB device copy. Modes (``--modes``), every implementation interleaved: ``stream`` at ``--tokens`` (1024, 8192,
32768): GB/s, × the best peer, % of the copy; ``graph`` at ``--graph-tokens`` (1, 1024; CUDA only): µs per call
inside a CUDA graph; ``host`` at one token: µs per call of 3000 back-to-back calls. docs/performance.md reads the
goals off this file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from argparse import BooleanOptionalAction
from typing import Any

import bench_harness as harness


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--kernels", help="comma list (default: every memory-bound kernel)")
    parser.add_argument("--modes", help="comma list of stream, graph, host (default: all three; no graph on a CPU)")
    parser.add_argument("--tokens", help="stream mode's token counts (default 1024,8192,32768)")
    parser.add_argument("--graph-tokens", help="graph mode's counts (default 1,1024; --moe 1,8,64; --sampling 1-256)")
    parser.add_argument("--dtypes", help="comma list (default bfloat16; --sampling's: float32,bfloat16)")
    parser.add_argument("--compile", action=BooleanOptionalAction, help="the torch.compile peer (default: on CUDA)")
    parser.add_argument("--name", default="kernels", help="the result files' stem (default kernels)")
    parser.add_argument("--sampling", action="store_true", help="sample_tl, apply_penalties_tl at B 1-256")
    parser.add_argument("--moe", action="store_true", help="fused_moe_tl at Mixtral's and Qwen3-MoE's experts")
    parser.add_argument(
        "--tiles",
        default="",
        help="with --moe: ';'-separated Triton tile sets 'block_m,gate_up_n,down_n,block_k,warps,stages'",
    )
    options = parser.parse_args(argv)
    if options.sampling and options.moe:
        parser.error("--sampling and --moe are two runs: give one of them")
    tiles = [tuple(text.split(",")) for text in options.tiles.split(";") if text]
    if tiles and (not options.moe or any(len(tile) != 6 or not all(v.isdigit() for v in tile) for tile in tiles)):
        parser.error(f"--tiles {options.tiles!r}: give it with --moe, as ';'-separated sets of 6 integers")
    tiles = [tuple(int(v) for v in tile) for tile in tiles]
    if options.moe:  # decode in CUDA graphs, prefill in stream: issue 36's goals
        options.kernels, options.name = "fused_moe", "moe_experts" if options.name == "kernels" else options.name
        options.tokens = options.tokens or ("4,16" if options.smoke else "4096,16384")
        options.graph_tokens = options.graph_tokens or ("1,4" if options.smoke else "1,8,64")
        options.modes = options.modes or "stream,graph"
        options.compile = bool(options.compile)  # the float32 loop compiled at 16384 tokens: only when asked
    if options.sampling:  # batches of requests, V = 128256 (the spec's engine size), mixed per-request parameters
        batches = "1,4" if options.smoke else "1,16,64,256"
        options.kernels, options.name = (
            options.kernels or ",".join(SAMPLING),
            "sampling" if options.name == "kernels" else options.name,
        )
        options.tokens, options.graph_tokens = options.tokens or batches, options.graph_tokens or batches
    options.dtypes = options.dtypes or ("float32,bfloat16" if options.sampling else "bfloat16")
    device = harness.start(options)
    import torch

    bench = harness.engine()
    cuda = device.startswith("cuda")
    small = options.smoke
    modes = (options.modes or ("stream,graph,host" if cuda else "stream,host")).split(",")
    tokens = _counts(options.tokens or ("4,16" if small else "1024,8192,32768"))
    graph_tokens = _counts(options.graph_tokens or "1,1024")
    rounds, round_s, calls = (1, 0.002, 5) if small else (3, 0.04, 3000)
    compile_peer = cuda if options.compile is None else options.compile
    status = harness.backends(options.backend)
    chosen = [name for name, problem in status.items() if problem is None or options.backend]
    kernels = options.kernels.split(",") if options.kernels else memory_bound()
    env = harness.environment(device, status) | {"configs": {}}
    copy = bench.copy_ceiling(16 if small else 256, device=device, rounds=rounds)
    rows: list[Any] = [copy]
    jobs = (
        sampling_jobs(kernels, small)
        if options.sampling
        else moe_jobs()
        if options.moe
        else [(k, k, None, True, None) for k in kernels]
    )
    for dtype in options.dtypes.split(","):
        for kernel, label, example, compiled, only in jobs:
            if only and dtype != only:
                continue
            torch._dynamo.reset()  # each kernel's compiled peers start from an empty cache
            first = len(rows)
            with bench.configured(kernel, example) if example else contextlib.nullcontext():
                impls = bench.implementations(
                    kernel, chosen, compile=compile_peer and compiled, peers=harness.peers(kernel), same_bytes_copy=True
                )
                impls += [  # each candidate tile set of --tiles, beside the rule's (its lazyops triton row)
                    bench.Impl(f"triton {','.join(map(str, tile))}", "candidate", _on_config(kernel, tile))
                    for tile in tiles
                ]
                if kernel == "sample" and "triton" in chosen and cuda:  # the split path where the rule keeps it off
                    impls += [
                        bench.Impl("triton split, one group", "candidate", harness.split_sampler(None)),
                        bench.Impl("triton split, SM-count groups", "candidate", harness.split_sampler(0)),
                        bench.Impl("triton split, half-L2 groups", "candidate", harness.split_sampler("l2")),
                        bench.Impl("triton, 4-way searches", "candidate", harness.searching_sampler(2)),
                        bench.Impl("triton, bisections", "candidate", harness.searching_sampler(1)),
                    ]
                common: dict[str, Any] = {"device": device, "small": small, "progress": say}
                if "stream" in modes:
                    rows += bench.measure(kernel, impls, tokens, dtype, rounds=rounds, round_s=round_s, **common)
                if "graph" in modes:
                    rows += bench.graph_time(kernel, impls, graph_tokens, dtype, rounds=rounds, **common)
                if "host" in modes:
                    rows += bench.host_time(
                        kernel, impls, dtype, calls=calls, warmup=calls // 30, rounds=rounds, **common
                    )
                env["configs"][label] = bench.describe(kernel, dtype, small=small)
            for row in rows[first:]:
                row.kernel = label
            bench.rank(rows)
            plain = [{k: v for k, v in dataclasses.asdict(row).items() if k != "config"} for row in rows]
            written = harness.write(options.out, options.name, TITLE, env, plain, render(rows, copy, env))
    print(f"wrote {written} and its .json")
    return 0


TITLE = "Memory-bound kernels against their peers and ceilings"


#: Kernels of a batch of requests' vocabulary rows (B up to 256 at V = 128256, not 32768 tokens): ``--sampling``'s.
SAMPLING = ("sample", "apply_penalties")
#: ``--sampling``'s vocabularies (Llama 3's, Qwen 2.5's) and, at the first, each kernel's options beside the plain call.
SAMPLING_VOCABS = (128256, 151936)
SAMPLING_OPTIONS = {
    "sample": ("+logprobs", {"logprobs": True, "top_n": 5}, {"params": "mixed"}),
    "apply_penalties": ("+bias+mask", {}, {"bias": 8, "mask": 0.5}),
}


def sampling_jobs(kernels: list[str], small: bool) -> list[tuple[str, str, Any, bool, str | None]]:
    """``(kernel, row label, dtype -> Example, torch.compile peer, the one dtype or None)`` for ``--sampling``: each
    kernel at each vocabulary (the first alone with ``--smoke``), then its options at the first in bfloat16."""
    from lazyops.specs import Example

    def at(vocab: int, kwargs: dict[str, Any], geometry: dict[str, Any]) -> Any:
        return lambda dtype: Example((vocab, dtype), kwargs, geometry)

    mixed = {"sample": {"params": "mixed"}}
    vocabs = SAMPLING_VOCABS[:1] if small else SAMPLING_VOCABS
    jobs: list[tuple[str, str, Any, bool, str | None]] = [
        (k, f"{k} V={v}", at(v, {}, mixed.get(k, {})), v == vocabs[0], None) for v in vocabs for k in kernels
    ]
    for kernel in kernels:
        if kernel in SAMPLING_OPTIONS:
            suffix, kwargs, geometry = SAMPLING_OPTIONS[kernel]
            jobs.append((kernel, f"{kernel}{suffix} V={vocabs[0]}", at(vocabs[0], kwargs, geometry), False, "bfloat16"))
    return jobs


#: ``--moe``'s experts (issue 36): Mixtral-8x7B's (8 of 4096 to 14336, 2 a token) and Qwen3-30B-A3B's (128 of 2048 to
#: 768, 8 a token), each routed evenly, so that a call reads ``min(E, T·k)`` experts and its bytes are exactly those.
MOE_MODELS = {"Mixtral-8x7B": (4096, 14336, 8, 2), "Qwen3-30B-A3B": (2048, 768, 128, 8)}


def moe_jobs() -> list[tuple[str, str, Any, bool, str | None]]:
    """``--moe``'s jobs, as :func:`sampling_jobs`'s: ``fused_moe_tl`` at each of :data:`MOE_MODELS`, bfloat16."""
    from lazyops.specs import Example

    def at(args: tuple[int, ...]) -> Any:
        return lambda dtype: Example((*args, dtype), geometry={"routing": "balanced"})

    return [("fused_moe", f"fused_moe {model}", at(args), True, "bfloat16") for model, args in MOE_MODELS.items()]


def _on_config(kernel: str, tile: tuple[int, ...]) -> Any:
    """An implementation's build (of an example) from :func:`harness.tiled_fused_moe`'s (of a configuration)."""
    from lazyops.specs import spec

    build, kernel_spec = harness.tiled_fused_moe(tile), spec(f"{kernel}_tl")
    return lambda chosen: build(kernel_spec.bind(*chosen.args, **chosen.kwargs))


def memory_bound() -> list[str]:
    """Every kernel whose spec's traffic model says it is bound by memory, by short name (``--sampling``'s apart)."""
    from lazyops.specs import kernel_names, spec
    from lazyops.testing import examples

    found = []
    for name in kernel_names():
        chosen, kernel_spec = harness.engine().example(name), spec(name)
        config = kernel_spec.bind(*chosen.args, **chosen.kwargs)
        if examples(kernel_spec).traffic(config, 1, chosen.geometry).bound != "compute" and name[:-3] not in SAMPLING:
            found.append(name.removesuffix("_tl"))
    return found


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def say(row: Any) -> None:
    what = row.error.splitlines()[0][:120] if row.error else f"{row.us:10.2f} µs" + (" ?" if row.noisy else "")
    print(f"{row.kernel:>16} {row.dtype:>8} {row.method:>6} M={row.tokens:<6} {row.impl:>22}: {what}", flush=True)


def render(rows: list[Any], copy: Any, env: dict[str, Any]) -> list[str]:
    copy_rate = copy.rate
    lines = [
        "Every implementation interleaved with the others; each figure the median of its samples. Method and peers: "
        "`benchmarks/bench_kernels.py`'s docstring.",
        "",
        f"Device-to-device copy, the ceiling: **{harness.figure(copy_rate, 0)} GB/s** ({copy.note})."
        if copy_rate
        else f"Device-to-device copy: {copy.error}.",
        "",
        *(f"- {kernel}: `{config}`" for kernel, config in env["configs"].items()),
        "",
    ]
    for method, title, cell in (
        ("stream", "Stream time: GB/s, or TFLOP/s where compute-bound (× the best peer, % of the copy)", _stream_cell),
        (
            "graph",
            "Per call inside a CUDA graph: µs (× the best peer; a memory-bound call's bytes at % of the copy)",
            _time_cell,
        ),
        ("host", "Host time per call at one token: µs (× the best peer)", _time_cell),
    ):
        chosen = [row for row in rows if row.method == method]
        if not chosen:
            continue
        sizes = sorted({row.tokens for row in chosen})
        lines += [f"## {title}", ""]
        body = []
        for kernel, dtype, impl in dict.fromkeys((row.kernel, row.dtype, row.impl) for row in chosen):
            mine = [row for row in chosen if (row.kernel, row.dtype, row.impl) == (kernel, dtype, impl)]
            cells = {row.tokens: cell(row, copy_rate) for row in mine}
            body.append([f"{kernel} ({dtype})", impl, *(cells.get(m, "") for m in sizes)])
        lines += harness.table(["kernel", "implementation", *(f"M = {m}" for m in sizes)], body)
    return lines


def _stream_cell(row: Any, copy_rate: float | None) -> str:
    if row.error:
        return "skipped" if row.error.startswith("skipped") else "error"
    extras = [f"{row.vs_best_peer:.2f}×"] if row.kind != "peer" and row.vs_best_peer else []
    if row.kind != "peer" and row.unit == "GB/s" and copy_rate:
        extras.append(f"{100 * row.rate / copy_rate:.1f} %")
    digits = 2 if row.rate < 10 else 0
    unit = " TFLOP/s" if row.unit == "TFLOP/s" else ""  # a size where the kernel is compute-bound (a MoE prefill)
    return harness.figure(row.rate, digits, row.noisy) + unit + (f" ({', '.join(extras)})" if extras else "")


def _time_cell(row: Any, copy_rate: float | None) -> str:
    if row.error:
        return "skipped" if row.error.startswith("skipped") else "error"
    extras = [f"{row.vs_best_peer:.2f}×"] if row.kind != "peer" and row.vs_best_peer else []
    if row.kind != "peer" and row.method == "graph" and row.rate and copy_rate:  # a memory-bound call's bytes
        extras.append(f"{100 * row.rate / copy_rate:.0f} % of the copy")
    return harness.figure(row.us, 2, row.noisy) + (f" ({', '.join(extras)})" if extras else "")


if __name__ == "__main__":
    sys.exit(main())
