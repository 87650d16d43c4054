"""Triton's row kernels under other row layouts: rows per program and warps, timed against the layout of the day.

``_backends/triton/_common.row_layout`` gives every row-wise Triton kernel (the norms, softmax, layernorm) one
program per row of 4096 elements with 8 warps. At M = 32768 most of them reach 97 % of the copy ceiling, but
layernorm stays at 96.6 % and rmsnorm_fp8 at 90.9 % (``gpu_bench_stream.md``, 2026-12-01). This script times each
of those kernels, built through its module's own factory with ``row_layout`` replaced by a fixed layout, at
M = 8192 and 32768 (``do_bench`` medians, L2 flushed, inputs rotating past the L2), each result checked by the
conformance kit's judge first, beside a device-to-device copy of the same bytes.

    python3 benchmarks/triton_row_variants.py --out DIR        # on a GPU: triton_row_variants.{md,json}
    python3 benchmarks/triton_row_variants.py --graph --tokens 1024 --name triton_row_variants_graph1024 --out DIR

``--graph``: per call inside a CUDA graph (``_bench.graph_us``: 50 calls captured, 20 replays) instead of stream time,
the copy of the same bytes timed the same way: GPU time alone, where at 1024 tokens back-to-back stream calls
measure the host.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

#: kernel -> the module whose ``row_layout`` its factory reads
KERNELS = {
    "rmsnorm_fp8": "rmsnorm",
    "layernorm": "layernorm",
    "softmax": "softmax",
    "rmsnorm": "rmsnorm",
}
TOKENS = (8192, 32768)
ROWS = (1, 2, 4)
WARPS = (2, 4, 8, 16)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/results"))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: this script's logic only")
    parser.add_argument("--tokens", help=f"comma list of token counts (default: {','.join(map(str, TOKENS))})")
    parser.add_argument("--graph", action="store_true", help="per call inside a CUDA graph, not stream time")
    parser.add_argument("--name", default="triton_row_variants", help="the result files' stem")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is decorated
    import torch
    from _environment import describe_environment

    from lazyops import _bench
    from lazyops._backends.triton._common import RowLayout, row_layout
    from lazyops.testing import TOLERANCE, Inputs, relative_error

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: --device cpu checks this script's logic", file=sys.stderr)
        return 2
    device = args.device
    tokens_list = TOKENS if device == "cuda" else (3, 5)
    if args.tokens:
        tokens_list = tuple(int(m) for m in args.tokens.split(","))
    if args.graph and device != "cuda":
        print("--graph times calls inside CUDA graphs: it needs --device cuda", file=sys.stderr)
        return 2
    graph = args.graph
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for kernel, module_name in KERNELS.items():
        module = importlib.import_module(f"lazyops._backends.triton.{module_name}")
        factory = getattr(importlib.import_module(f"lazyops._backends.triton.{kernel}"), f"{kernel}_tl")
        spec = factory.lazyops_spec
        example = _bench.example(kernel, "bfloat16")
        config = spec.configure(*example.args, **example.kwargs)
        default = row_layout(config.n)
        layouts = [("default", default)] + [
            (f"{rows_} row(s), {warps} warps", RowLayout(default.block_n, rows_, default.single_pass, warps))
            for rows_, warps in itertools.product(ROWS, WARPS)
            if (rows_, warps) != (default.rows, default.num_warps)
        ]
        for tokens in tokens_list:
            sets = [
                tuple(spec.example_inputs(config, tokens, Inputs(seed, device), example.geometry)) for seed in range(3)
            ]
            moved = spec.traffic(config, tokens, example.geometry).bytes
            copy = _bench.copy_ceiling(max(1, moved // 2 // 2**20), device=device)
            if graph:  # the same bytes' copy, timed as the layouts are
                source = torch.zeros(moved // 4, dtype=torch.bfloat16, device=device)
                copy.us = _bench.graph_us(lambda s, t: t.copy_(s), [(source, torch.empty_like(source))], 50, 20)
                copy.rate = moved / (copy.us * 1e-6) / 1e9
            reference = spec.reference(config, *(t.double() if t.is_floating_point() else t for t in sets[0]))
            for label, layout in layouts:
                row: dict[str, Any] = {
                    "kernel": kernel,
                    "tokens": tokens,
                    "layout": label,
                    "rows": layout.rows,
                    "num_warps": layout.num_warps,
                }
                module.row_layout = lambda n, layout=layout: layout
                try:
                    built = factory(*example.args, **example.kwargs)
                    with torch.no_grad():
                        result = built(*[t.clone() for t in sets[0]])
                        first = result[0] if isinstance(result, tuple) else result
                        row["relative_error"] = relative_error(first, reference[0])
                        tolerance = TOLERANCE.get(first.dtype, 6e-2)
                        if row["relative_error"] > tolerance:
                            raise RuntimeError(f"relative error {row['relative_error']:.2e} > {tolerance:.0e}")
                    us = (
                        _bench.graph_us(built, sets[:1], 50, 20) if graph else _bench._median_us(built, sets, device, 3)
                    )
                    row["us"] = us
                    row["gbps"] = moved / (us * 1e-6) / 1e9
                    row["vs_copy"] = row["gbps"] / copy.rate if copy.rate else None
                    row["copy_us"] = copy.us
                except Exception as error:  # noqa: BLE001 - one failing layout is a row that says why
                    row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                finally:
                    module.row_layout = row_layout
                rows.append(row)
                share = f"{row['vs_copy']:.1%}" if row.get("vs_copy") else row.get("error", "")
                print(f"{kernel} M={tokens} {label}: {row.get('gbps', 0):.0f} GB/s {share}", flush=True)
    payload = {
        **describe_environment(torch, device, "Triton interpreter; timings meaningless"),
        "method": "per call inside a CUDA graph (50 captured, 20 replays)"
        if graph
        else "do_bench medians, L2 flushed"
        if device == "cuda"
        else "perf_counter medians on the host, Triton's interpreter (timings meaningless)",
        "elapsed_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(payload, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(render(payload))
    print(render(payload))
    return 0


def render(payload: dict[str, Any]) -> str:
    lines = [
        "# Triton row kernels under other row layouts",
        "",
        f"Generated by `{payload['command']}`; {payload['date']}, {payload['device']}, lazyops at "
        f"{payload['commit']}. GB/s (share of a device-to-device copy of the same bytes, timed in the same run); "
        f"{payload.get('method', '`do_bench` medians, L2 flushed')}. The default is `row_layout` as it stands.",
        "",
        "| kernel | M | layout | µs | GB/s | % of copy | rel. error |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in payload["rows"]:
        if row.get("gbps"):
            lines.append(
                f"| {row['kernel']} | {row['tokens']} | {row['layout']} | {row['us']:.2f} | {row['gbps']:.0f} | "
                f"{row['vs_copy']:.1%} | {row['relative_error']:.1e} |"
            )
        else:
            lines.append(f"| {row['kernel']} | {row['tokens']} | {row['layout']} | fails | | {row.get('error')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
