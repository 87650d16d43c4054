"""Time every kernel of every backend that runs here against its peers, in one run, with the copy ceiling beside.

    python3 benchmarks/gpu_bench.py [--out DIR] [--host] [--graph]     # on a CUDA machine
    python3 benchmarks/gpu_bench.py --backend triton --tokens 1,128,1024
    python3 benchmarks/gpu_bench.py --kernels rope,matmul --host --merge --out DIR    # add to DIR's results
    python3 benchmarks/gpu_bench.py --replot --out DIR          # plots from DIR/gpu_bench.json, measuring nothing
    python3 benchmarks/gpu_bench.py --device cpu --small [--host --graph]  # the script's logic, on a CPU

Every kernel lazyops specifies (``lazyops.specs.kernel_names()``) at its engine-sized configuration
(``spec.benchmark``: hidden 4096; rope 32 query + 8 key heads of 128; matmul ``[M, 4096] @ [4096, 4096]``),
bf16 by default, at M = 1024, 8192, 32768. The implementations: each lazyops backend that runs here (or those
named with ``--backend``, third-party ones too), torch eager and torch.compile (the spec's definition in float32),
and the peers of ``benchmarks/kernels/<kernel>.py`` where one exists (``F.rms_norm``, liger-kernel, cuBLAS).
The timing engine is ``lazyops._bench``: medians of ``triton.testing.do_bench`` (L2 flushed), calls rotating
through enough input sets to overflow the L2; bytes and FLOPs from ``spec.traffic``. A device-to-device copy is
timed in the same run: the ceiling of the memory-bound kernels.

Also, per kernel and backend: ``torch.compile(fullgraph=True)`` (ok, or the exact error); with ``--host``, the
host time per call at one token (3000 back-to-back calls); with ``--graph``, the per-call time inside a CUDA
graph at M = 1, 16, 128 (50 calls captured, 20 replays).

Writes ``gpu_bench.md``, ``gpu_bench.json`` and ``gpu_bench_<kernel>.png`` (throughput against tokens, one line per
implementation; skipped without matplotlib) into DIR: ``benchmarks/results`` on CUDA, a temporary folder with
``--device cpu`` (a CPU run is a check of the script, not a result). Results are rewritten after each kernel, so
an interrupted run leaves what it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _environment import describe_environment  # benchmarks/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
GPU_TOKENS = (1024, 8192, 32768)
SMALL_TOKENS = (4, 16)
GRAPH_TOKENS = (1, 16, 128)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the results go (default: benchmarks/results on CUDA)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="sizes clamped to 256, few tokens (for a CPU)")
    parser.add_argument("--backend", action="append", default=[], metavar="NAME",
                        help="a backend to time (repeatable; default: every registered one that runs here)")
    parser.add_argument("--kernels", help="comma list (default: every specified kernel)")
    parser.add_argument("--tokens", help=f"comma list of M (default: {','.join(map(str, GPU_TOKENS))})")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="time the torch.compile peer, and check fullgraph with inductor (default: on CUDA)")
    parser.add_argument("--fullgraph", action=argparse.BooleanOptionalAction, default=True,
                        help="check torch.compile(fullgraph=True) of each kernel per backend")
    parser.add_argument("--same-bytes-copy", action=argparse.BooleanOptionalAction, default=True,
                        help="time, beside each memory-bound kernel, a copy of the bytes it moves at each M: "
                             "that size's own ceiling")
    parser.add_argument("--host", action="store_true", help="host time per call at one token")
    parser.add_argument("--graph", action="store_true", help="per-call time inside a CUDA graph")
    parser.add_argument("--graph-tokens", default=",".join(map(str, GRAPH_TOKENS)))
    parser.add_argument("--replot", action="store_true",
                        help="measure nothing: redraw DIR's plots and Markdown from its gpu_bench.json (for a "
                             "machine without matplotlib, such as the H200)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of DIR/gpu_bench.json that this run does not remeasure (a run split "
                             "over several calls, each within a time limit)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is decorated
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    from lazyops import _bench
    from lazyops.specs import kernel_names

    if args.device == "cuda" and not torch.cuda.is_available() and not args.replot:
        print("no CUDA device: run with --device cpu --small to check the script here", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    out = args.out or (ROOT / "benchmarks" / "results" if cuda else Path(tempfile.gettempdir()) / "lazyops-gpu-bench")
    if args.replot:
        return replot(out)
    compile_peers = cuda if args.compile is None else args.compile
    default_tokens = SMALL_TOKENS if args.small else GPU_TOKENS
    tokens = [int(m) for m in args.tokens.split(",")] if args.tokens else list(default_tokens)
    graph_tokens = [int(m) for m in args.graph_tokens.split(",")]
    kernels = args.kernels.split(",") if args.kernels else [name.removesuffix("_tl") for name in kernel_names()]

    status = _bench.backend_status(args.backend or None)
    # Named backends are timed even when they cannot run (their rows say why); by default those are only listed.
    backends = list(status) if args.backend else [name for name, problem in status.items() if not problem]
    environment = {
        **describe_environment(torch, args.device, "Triton interpreter; timings meaningless"),
        "dtype": args.dtype,
        "small": args.small,
        "backends": {name: problem or "runs" for name, problem in status.items()},
    }
    say = progress_printer()
    started = time.perf_counter()
    copy = _bench.copy_ceiling(16 if args.small else 256, device=args.device)
    say(copy)
    rows: list[Any] = []
    if args.merge:
        rows, commands = earlier_rows(out, kernels, methods(args))
        environment["earlier_commands"] = commands
    for kernel in kernels:
        impls = _bench.implementations(kernel, backends, compile=compile_peers, same_bytes_copy=args.same_bytes_copy)
        common = {"dtype": args.dtype, "device": args.device, "small": args.small, "progress": say}
        rows += _bench.measure(kernel, impls, tokens, **common)
        if args.fullgraph:
            ours = [impl for impl in impls if impl.kind == "lazyops"]
            rows += _bench.fullgraph_check(kernel, ours, backend="inductor" if compile_peers else "eager", **common)
        if args.host:
            calls = 30 if args.small else 3000
            rows += _bench.host_time(kernel, impls, calls=calls, warmup=max(3, calls // 30), **common)
        if args.graph:
            rows += _bench.graph_time(kernel, impls, graph_tokens, **common)
        _bench.rank(rows)
        write_results(out, rows, copy, environment, time.perf_counter() - started)
    plots = write_plots(out, rows, copy, environment)
    print(render_markdown(rows, copy, environment, time.perf_counter() - started))
    print(f"results in {out}" + (f" ({plots})" if plots else ""))
    return 0


def replot(out: Path) -> int:
    from lazyops._bench import Row

    payload = json.loads((out / "gpu_bench.json").read_text())
    rows, copy = [Row(**row) for row in payload["rows"]], Row(**payload["copy"])
    (out / "gpu_bench.md").write_text(render_markdown(rows, copy, payload["environment"], payload["elapsed_s"]))
    print(f"{out}: gpu_bench.md rewritten, {write_plots(out, rows, copy, payload['environment'])}")
    return 0


def methods(args: argparse.Namespace) -> set[str]:
    """The row methods this run measures."""
    return {"stream"} | {name for name, on in (("fullgraph", args.fullgraph), ("host", args.host),
                                                ("graph", args.graph)) if on}


def earlier_rows(out: Path, kernels: list[str], measured: set[str]) -> tuple[list[Any], list[str]]:
    """The rows of an earlier run in ``out`` that this one does not remeasure, and the commands that made them."""
    from lazyops._bench import Row

    path = out / "gpu_bench.json"
    if not path.is_file():
        return [], []
    earlier = json.loads(path.read_text())
    kept = [Row(**row) for row in earlier["rows"] if not (row["kernel"] in kernels and row["method"] in measured)]
    environment = earlier["environment"]
    return kept, [*environment.get("earlier_commands", []), environment["command"]]


def progress_printer():
    def say(row: Any) -> None:
        head = f"{row.kernel:>13} {row.method:>9} M={row.tokens:<6} {row.impl:>16}"
        if row.error:
            print(f"{head}: {row.error.splitlines()[0][:160]}", flush=True)
        elif row.us is None:
            print(f"{head}: {row.note}", flush=True)
        else:
            rate = f" {row.rate:9.1f} {row.unit}" if row.rate is not None else ""
            print(f"{head}: {row.us:10.2f} us{rate}", flush=True)

    return say


# --- results -------------------------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if abs(value) < 10 ** 6 else f"{value:.3g}"


def stream_cell(row: Any, copy_rate: float | None) -> str:
    if row.error:
        return "error"
    text = fmt(row.rate, 2 if row.rate < 10 else 0)
    extras = []
    if row.kind == "lazyops" and row.vs_best_peer is not None:
        extras.append(f"{row.vs_best_peer:.2f}× peer")
    if row.kind in ("lazyops", "ceiling") and row.unit == "GB/s" and copy_rate:
        extras.append(f"{100 * row.rate / copy_rate:.1f} % copy")
    return f"{text} ({', '.join(extras)})" if extras else text


def render_markdown(rows: list[Any], copy: Any, environment: dict[str, Any], elapsed: float) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in environment["versions"].items())
    copy_rate = copy.rate
    lines = [
        "# Kernel timings on a GPU",
        "",
        f"Generated by `{environment['command']}`; do not edit.",
        *[f"Rows kept from `{command}` (--merge)." for command in environment.get("earlier_commands", [])],
        "",
        f"- date: {environment['date']}",
        f"- device: {environment['device']}",
        f"- versions: {versions}; Python {environment['python']}; lazyops at {environment['commit']}",
        f"- backends: {', '.join(f'{k} ({v})' for k, v in environment['backends'].items())}",
        f"- dtype: {environment['dtype']}{' (sizes clamped: --small)' if environment['small'] else ''}",
        f"- wall time: {elapsed:.0f} s",
        f"- device-to-device copy, the ceiling: **{fmt(copy_rate)} GB/s** ({copy.note})"
        if copy_rate else f"- device-to-device copy: {copy.error}",
        "",
        ("Each kernel at its spec's engine-sized configuration (`spec.benchmark`, listed below). Medians of "
        "`triton.testing.do_bench` (L2 flushed; calls rotate through enough input sets to overflow it; on a CPU, "
        "`perf_counter` medians). Bytes and FLOPs from `spec.traffic`: each input "
        "read once, each output written once, in-place tensors both. `torch eager` / `torch.compile`: the spec's "
        "definition in float32; other peers from `benchmarks/kernels/<kernel>.py`. For lazyops rows: the rate "
        "over the best peer's in the same run, and the share of the copy ceiling. `copy of the same bytes`: a "
        "device-to-device copy of as many bytes as the kernel moves at that M, timed the same way (that size's "
        "own ceiling: a short copy loses to its launch and tail)."),
        "",
    ]
    configs = dict.fromkeys((row.kernel, row.config) for row in rows if row.config)
    lines += [f"- {kernel}: `{config}`" for kernel, config in configs] + [""]
    lines += stream_table(rows, copy_rate)
    lines += pivot_table(rows, "host", "Host time per call at one token (µs)",
                         "Wall time of back-to-back calls after a warm-up, one synchronize at the end: what the host "
                         "pays per call while the GPU idles.")
    lines += pivot_table(rows, "graph", "Per call inside a CUDA graph (µs)",
                         "50 back-to-back calls captured in one graph, replayed 20 times, divided.")
    fullgraph = [row for row in rows if row.method == "fullgraph"]
    if fullgraph:
        lines += ["## torch.compile(fullgraph=True)", "", "| kernel | implementation | result |", "| --- | --- | --- |"]
        for row in fullgraph:
            result = row.note if not row.error else "**" + row.error.splitlines()[0][:300].replace("|", "\\|") + "**"
            lines.append(f"| {row.kernel} | {row.impl} | {result} |")
        lines.append("")
    errors = sorted({(row.impl, row.error.splitlines()[0][:300]) for row in rows
                     if row.error and row.method != "fullgraph"})
    if errors:
        lines += ["## What did not run", ""]
        lines += [f"- {impl}: {error}" for impl, error in errors]
        lines.append("")
    return "\n".join(lines)


def stream_table(rows: list[Any], copy_rate: float | None) -> list[str]:
    stream = [row for row in rows if row.method == "stream"]
    if not stream:
        return []
    tokens = sorted({row.tokens for row in stream})
    lines = ["## Stream time: throughput", "",
             "| kernel | implementation | " + " | ".join(f"M = {m}" for m in tokens) + " |",
             "| --- | --- |" + " --- |" * len(tokens)]
    for kernel in dict.fromkeys(row.kernel for row in stream):
        ours = [row for row in stream if row.kernel == kernel]
        unit = ours[0].unit
        for impl in dict.fromkeys(row.impl for row in ours):
            cells = {row.tokens: stream_cell(row, copy_rate) for row in ours if row.impl == impl}
            lines.append(f"| {kernel} ({unit}) | {impl} | " + " | ".join(cells.get(m, "") for m in tokens) + " |")
    return lines + [""]


def pivot_table(rows: list[Any], method: str, title: str, how: str) -> list[str]:
    chosen = [row for row in rows if row.method == method]
    if not chosen:
        return []
    impls = list(dict.fromkeys(row.impl for row in chosen))
    lines = [f"## {title}", "", how, "", "| kernel | M | " + " | ".join(impls) + " |",
             "| --- | --- |" + " --- |" * len(impls)]
    for kernel, m in dict.fromkeys((row.kernel, row.tokens) for row in chosen):
        cells = {row.impl: ("error" if row.error else f"{row.us:.2f}") for row in chosen
                 if row.kernel == kernel and row.tokens == m}
        lines.append(f"| {kernel} | {m} | " + " | ".join(cells.get(impl, "") for impl in impls) + " |")
    return lines + [""]


def write_results(out: Path, rows: list[Any], copy: Any, environment: dict[str, Any], elapsed: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_bench.md").write_text(render_markdown(rows, copy, environment, elapsed))
    payload = {
        "environment": environment,
        "elapsed_s": round(elapsed, 1),
        "copy": dataclasses.asdict(copy),
        "rows": [dataclasses.asdict(row) for row in rows],
    }
    (out / "gpu_bench.json").write_text(json.dumps(payload, indent=1) + "\n")


def write_plots(out: Path, rows: list[Any], copy: Any, environment: dict[str, Any]) -> str:
    """One PNG per kernel: throughput against tokens, one line per implementation. Returns what it did."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return "no plots: matplotlib is not installed (pip install 'lazyops[cli]')"
    written = 0
    stream = [row for row in rows if row.method == "stream" and row.rate is not None]
    for kernel in dict.fromkeys(row.kernel for row in stream):
        ours = [row for row in stream if row.kernel == kernel]
        figure, axes = pyplot.subplots(figsize=(7, 4.5))
        for impl in dict.fromkeys(row.impl for row in ours):
            points = sorted((row.tokens, row.rate) for row in ours if row.impl == impl)
            kind = next(row.kind for row in ours if row.impl == impl)
            style = {"lazyops": "-", "ceiling": ":"}.get(kind, "--")
            axes.plot(*zip(*points), style, marker="o", label=impl)
        if ours[0].unit == "GB/s" and copy.rate:
            axes.axhline(copy.rate, color="grey", linestyle=":", label=f"copy ({copy.rate:.0f} GB/s)")
        axes.set_xscale("log", base=2)
        ticks = sorted({row.tokens for row in ours})
        axes.set_xticks(ticks, [str(m) for m in ticks])
        axes.minorticks_off()
        axes.set_xlabel("tokens M")
        axes.set_ylabel(ours[0].unit)
        axes.set_ylim(bottom=0)
        axes.set_title(f"{ours[0].config}\n{environment['device']}, {environment['date'][:10]}, "
                       f"torch {environment['versions']['torch']}", fontsize=8)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(out / f"gpu_bench_{kernel}.png", dpi=110)
        pyplot.close(figure)
        written += 1
    return f"{written} plots"


if __name__ == "__main__":
    sys.exit(main())
