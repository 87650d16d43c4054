"""GEMM across the token counts of issue 12: cuBLAS, lazyops TileLang and lazyops Triton, one run.

The grid: M in {1, 16, 128, 1024, 8192} times (n, k) in {(4096, 4096), (14336, 4096), (4096, 14336)}, plus
8192^3, in bfloat16 (``--dtype``). Each cell is the median of ``triton.testing.do_bench`` with the L2 flushed and
the calls rotating through enough input sets to overflow it (``lazyops._bench``, the engine of gpu_bench.py),
checked first against ``a.float() @ b.float()`` by the relative error and tolerance of ``lazyops.testing``. For
M <= 128 the product is bound by reading the weight b (k*n*2 bytes): its row also gives that read in GB/s,
against the device-to-device copy ceiling (``_bench.copy_ceiling``).

    python3 benchmarks/gemm_grid.py --out /tmp/results           # on the GPU: gemm_grid.{json,md}
    python3 benchmarks/gemm_grid.py --device cpu --small         # checks this script's logic (interpreter)
    python3 benchmarks/gemm_grid.py --plot benchmarks/results/gemm_grid.json   # gemm_grid.png beside it

``--plot`` draws what a run measured (matplotlib, which the GPU machine lacks): for each weight shape, TFLOP/s
against M, one line per implementation; solid from stream time, dotted from the time per call in a CUDA graph
(M <= 128, where the stream time is the host's launch as much as the GPU's).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _environment import describe_environment  # benchmarks/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
TOKENS = (1, 16, 128, 1024, 8192)
SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
EXTRA = ((8192, 8192, 8192),)
#: --small (a CPU, Triton's interpreter): the same structure at sizes the interpreter finishes.
SMALL_TOKENS = (1, 16, 40)
SMALL_SHAPES = ((128, 128), (256, 128), (128, 512))
#: Weight-bound up to this many tokens: the b read in GB/s is reported.
DECODE_MAX_M = 128
#: Input sets rotate until one round holds this much (four times an H200's L2).
ROTATE_BYTES = 256 * 2**20
MAX_SETS = 64
IMPLS = ("cuBLAS", "tilelang", "triton")


@dataclasses.dataclass
class Cell:
    m: int
    n: int
    k: int
    impl: str
    us: float | None = None
    tflops: float | None = None
    vs_cublas: float | None = None
    b_gbps: float | None = None
    b_vs_copy: float | None = None
    #: µs a call inside a CUDA graph (M <= DECODE_MAX_M): the GPU's time without the host's launch cost
    graph_us: float | None = None
    relative_error: float | None = None
    input_sets: int | None = None
    error: str | None = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where gemm_grid.{json,md} go (default: a temporary folder)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="small sizes (for a CPU and Triton's interpreter)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--impls", default=",".join(IMPLS), help=f"comma list of {', '.join(IMPLS)}")
    parser.add_argument("--plot", type=Path, help="measure nothing: draw this results JSON as a PNG beside it")
    return parser.parse_args(argv)


def plot(results: Path) -> Path:
    """``gemm_grid.png`` beside ``results``: one column per weight shape; TFLOP/s against M per implementation
    above, the same as a ratio to cuBLAS's below (stream time solid, time in a CUDA graph dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    payload = json.loads(results.read_text())
    cells = [cell for cell in payload["cells"] if cell.get("us")]
    weights = list(dict.fromkeys((c["n"], c["k"]) for c in cells if (c["m"], c["n"], c["k"]) not in EXTRA))
    figure, panels = pyplot.subplots(2, len(weights), figsize=(5 * len(weights), 7.5), squeeze=False)
    colours = {"cuBLAS": "black", "tilelang": "tab:blue", "triton": "tab:orange"}

    def series(n: int, k: int, impl: str, graph: bool) -> dict[int, float]:
        """M -> TFLOP/s of one implementation, from stream time or (graph) the time in a CUDA graph."""
        key = "graph_us" if graph else "us"
        return {
            c["m"]: 2 * c["m"] * n * k / (c[key] * 1e-6) / 1e12
            for c in cells
            if (c["n"], c["k"], c["impl"]) == (n, k, impl) and c.get(key)
        }

    for column, (n, k) in enumerate(weights):
        rates, ratios = panels[0][column], panels[1][column]
        for impl in dict.fromkeys(c["impl"] for c in cells):
            label = impl if impl == "cuBLAS" else f"lazyops {impl}"
            for graph, style, marker in ((False, "-", "o"), (True, ":", "x")):
                mine, theirs = series(n, k, impl, graph), series(n, k, "cuBLAS", graph)
                if not mine:
                    continue
                suffix = ", in a CUDA graph" if graph else ""
                tokens = sorted(mine)
                rates.plot(
                    tokens,
                    [mine[m] for m in tokens],
                    style,
                    marker=marker,
                    color=colours.get(impl),
                    label=label + suffix,
                )
                if impl != "cuBLAS":
                    shared = [m for m in tokens if m in theirs]
                    ratios.plot(
                        shared,
                        [mine[m] / theirs[m] for m in shared],
                        style,
                        marker=marker,
                        color=colours.get(impl),
                        label=label + suffix,
                    )
        ticks = sorted({c["m"] for c in cells if (c["n"], c["k"]) == (n, k)})
        for axes in (rates, ratios):
            axes.set_xscale("log", base=2)
            axes.set_xticks(ticks, [str(m) for m in ticks])
            axes.minorticks_off()
            axes.set_xlabel("tokens M")
            axes.grid(alpha=0.3)
        rates.set_yscale("log")
        rates.set_ylabel("TFLOP/s")
        rates.set_title(f"[M, {k}] x [{k}, {n}]", fontsize=9)
        ratios.axhline(1.0, color="black", linewidth=0.8)
        ratios.set_ylabel("x cuBLAS")
    panels[0][0].legend(fontsize=7)
    panels[1][0].legend(fontsize=7)
    versions = ", ".join(f"{name} {version}" for name, version in payload["versions"].items())
    figure.suptitle(
        f"matmul_tl, {payload['dtype']}: {payload['device']}, {payload['date'][:16]}; {versions}", fontsize=8
    )
    figure.tight_layout()
    target = results.with_suffix(".png")
    figure.savefig(target, dpi=110)
    pyplot.close(figure)
    return target


def grid(small: bool) -> list[tuple[int, int, int]]:
    """(M, n, k) in the order timed: the issue's grid, then 8192^3."""
    if small:
        return [(m, n, k) for n, k in SMALL_SHAPES for m in SMALL_TOKENS]
    return [(m, n, k) for n, k in SHAPES for m in TOKENS] + list(EXTRA)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        print(f"wrote {plot(args.plot)}")
        return 0
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is decorated
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    from lazyops import _api, _bench
    from lazyops.specs._checks import canonical_dtype
    from lazyops.testing import TOLERANCE, relative_error

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --small to check the script here", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.gettempdir()) / "lazyops-gemm-grid"
    out.mkdir(parents=True, exist_ok=True)
    dtype = canonical_dtype("gemm_grid", args.dtype)
    impls = args.impls.split(",")
    status = {name: _api.unavailable_reason(name) for name in ("tilelang", "triton")}
    environment = {
        **describe_environment(torch, args.device, "Triton interpreter; timings meaningless"),
        "dtype": str(dtype).removeprefix("torch."),
        "backends": {name: problem or "runs" for name, problem in status.items()},
        "tolerance": TOLERANCE[dtype],
    }
    started = time.perf_counter()
    copy = _bench.copy_ceiling(16 if args.small else 256, device=args.device)
    print(f"copy ceiling: {copy.rate or 0:.0f} GB/s {copy.error or ''}", flush=True)
    factories: dict[str, Any] = {}
    kernels: dict[tuple[str, int, int], Any] = {}

    def kernel(impl: str, n: int, k: int) -> Any:
        """The call for one implementation and weight shape, built (compiled) once; raises why it cannot run."""
        if impl == "cuBLAS":
            return lambda a, b: a @ b
        if status.get(impl):
            raise RuntimeError(f"unavailable: {status[impl]}")
        key = (impl, n, k)
        if key not in kernels:
            if impl not in factories:
                factories[impl] = _api.kernel_factory(impl, "matmul_tl")
            kernels[key] = factories[impl](n, k, dtype)
        return kernels[key]

    cells: list[Cell] = []
    for m, n, k in grid(args.small):
        generator = torch.Generator(device="cpu").manual_seed(m * 7 + n * 3 + k)
        first = draw(torch, m, n, k, dtype, args.device, generator)
        reference = first[0].float() @ first[1].float()
        size = sum(t.numel() * t.element_size() for t in first)
        count = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / size))) if args.device == "cuda" else 1
        sets = [first] + [draw(torch, m, n, k, dtype, args.device, generator) for _ in range(count - 1)]
        cublas_us = None
        for impl in impls:
            cell = Cell(m, n, k, impl, input_sets=len(sets))
            try:
                call = kernel(impl, n, k)
                with torch.no_grad():
                    cell.relative_error = relative_error(call(*first), reference)
                if cell.relative_error > TOLERANCE[dtype]:
                    cell.error = f"relative error {cell.relative_error:.2e} > {TOLERANCE[dtype]:.0e}"
                cell.us = _bench._median_us(call, sets, args.device, 5)
                cell.tflops = 2 * m * n * k / (cell.us * 1e-6) / 1e12
                if impl == "cuBLAS":
                    cublas_us = cell.us
                if cublas_us:
                    cell.vs_cublas = cublas_us / cell.us
                if m <= DECODE_MAX_M:
                    if args.device == "cuda":
                        cell.graph_us = _bench.graph_us(call, sets, captures=20, replays=10)
                    cell.b_gbps = k * n * dtype.itemsize / (cell.us * 1e-6) / 1e9
                    if copy.rate:
                        cell.b_vs_copy = cell.b_gbps / copy.rate
            except Exception as error:  # noqa: BLE001 - one failing cell is a row that says why
                cell.error = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
            cells.append(cell)
            print(describe(cell), flush=True)
        del sets, first, reference
        if args.device == "cuda":
            torch.cuda.empty_cache()
    elapsed = time.perf_counter() - started
    payload = {**environment, "copy_ceiling_gbps": copy.rate, "elapsed_s": round(elapsed, 1)}
    payload["cells"] = [dataclasses.asdict(cell) for cell in cells]
    (out / "gemm_grid.json").write_text(json.dumps(payload, indent=1) + "\n")
    markdown = render(cells, payload)
    (out / "gemm_grid.md").write_text(markdown)
    print(markdown)
    print(f"results in {out}")
    return 0


def draw(torch: Any, m: int, n: int, k: int, dtype: Any, device: str, generator: Any) -> tuple[Any, Any]:
    """One input set, unit-variance values scaled so that c stays near 1 (no bf16 overflow at k = 14336)."""
    a = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
    b = (torch.randn(k, n, generator=generator) / math.sqrt(k)).to(device=device, dtype=dtype)
    return a, b


def describe(cell: Cell) -> str:
    shape = f"[{cell.m}, {cell.k}] x [{cell.k}, {cell.n}]"
    if cell.us is None:
        return f"{shape} {cell.impl}: {cell.error}"
    ratio = f", {cell.vs_cublas:.2f}x cuBLAS" if cell.vs_cublas else ""
    bread = f", b at {cell.b_gbps:.0f} GB/s" if cell.b_gbps else ""
    bread += f", {cell.graph_us:.1f} us in a CUDA graph" if cell.graph_us else ""
    flag = f"  !! {cell.error}" if cell.error else ""
    return f"{shape} {cell.impl}: {cell.us:.1f} us, {cell.tflops:.0f} TFLOP/s{ratio}{bread}{flag}"


def render(cells: list[Cell], payload: dict[str, Any]) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in payload["versions"].items())
    lines = [
        "# GEMM grid: cuBLAS, lazyops TileLang, lazyops Triton",
        "",
        f"Generated by `benchmarks/gemm_grid.py`: `{payload['command']}`",
        "",
        f"{payload['date']}, {payload['device']}, {payload['dtype']}; {versions}; Python {payload['python']}; "
        f"lazyops at {payload['commit']}. Medians of `triton.testing.do_bench` (L2 flushed, inputs rotating past "
        f"the L2); every result checked against `a.float() @ b.float()` (relative error, tolerance "
        f"{payload['tolerance']:.0e}). Copy ceiling {payload['copy_ceiling_gbps'] or 0:.0f} GB/s; for M <= "
        f"{DECODE_MAX_M}, `b GB/s` is k*n*2 bytes over the time (the fraction of the copy ceiling in brackets), "
        "and `µs in a CUDA graph` the time per call of 20 calls captured in a graph and replayed (no host launch "
        "cost: what decode in an engine pays).",
        "",
        "| M | n | k | impl | µs | TFLOP/s | × cuBLAS | b GB/s | µs in a CUDA graph | rel. error | note |",
        "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for cell in cells:
        bread = f"{cell.b_gbps:.0f} ({cell.b_vs_copy:.0%})" if cell.b_gbps and cell.b_vs_copy else ""
        lines.append(
            f"| {cell.m} | {cell.n} | {cell.k} | {cell.impl} | {fmt(cell.us, 1)} | {fmt(cell.tflops, 0)} | "
            f"{fmt(cell.vs_cublas, 2)} | {bread} | {fmt(cell.graph_us, 1)} | "
            f"{'' if cell.relative_error is None else f'{cell.relative_error:.1e}'} | {cell.error or ''} |"
        )
    lines += ["", f"{payload['elapsed_s']} s in all.", ""]
    return "\n".join(lines)


def fmt(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    raise SystemExit(main())
