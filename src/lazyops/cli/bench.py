"""lazyops bench: how fast is each kernel here, in each backend, against torch eager.

Times every kernel (or the KERNELs named) in every backend that can run here (or those of --backend), and torch
eager (the spec's definition run in float32, as the kernels compute), with torch.compile of it under --compile,
at each token count of --tokens. The timing engine is lazyops._bench, the one behind the GPU result files: on
CUDA, medians of triton.testing.do_bench with the L2 flushed; on the host, a median of timed calls. GB/s counts
each input read once and each output written once (matmul: TFLOP/s); "x eager" is a row's rate over torch
eager's at the same token count.

Sizes are the engine's (hidden 4096, Llama-shaped rope heads, a 4096 x 4096 GEMM) on a GPU; without one they
are clamped to 256 so that the host and Triton's interpreter finish (--full-size overrides): host figures say
what works, not how fast a GPU would be.

Exit status: 0 when every implementation asked for was timed; 1 when one could not be built or run (its row
says why); 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from lazyops.cli._errors import FOUND_PROBLEMS, OK, CommandError

HELP = "time kernels per backend and token count against torch eager; a table, --json or --plot"
DTYPES = ("float32", "float16", "bfloat16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernels", nargs="*", metavar="KERNEL", help="kernels to time, e.g. rmsnorm (default: all)")
    parser.add_argument(
        "--backend",
        metavar="NAME[,NAME]",
        help="backends to time (default: every backend that can run here)",
    )
    parser.add_argument(
        "--tokens",
        type=token_counts,
        default=None,
        metavar="M[,M]",
        help="token counts (default: 1,128,8192 on a GPU, 1,128,1024 on the host)",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="the kernels' dtype (default bfloat16)")
    parser.add_argument("--compile", action="store_true", help="time torch.compile of torch eager too")
    parser.add_argument(
        "--full-size", action="store_true", help="the engine's sizes even without a GPU (slow on the host)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw throughput against token count (matplotlib)")


def token_counts(text: str) -> tuple[int, ...]:
    """``1,128,8192`` -> (1, 128, 8192); an argparse type, so a bad list is a usage error (exit 2)."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of token counts, e.g. 1,128,8192") from None
    if not counts or any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: token counts are positive integers, e.g. 1,128,8192")
    return counts


def main(args: argparse.Namespace) -> int:
    from lazyops.cli._output import Output

    output = Output()
    if args.plot:
        _require_matplotlib()
    import lazyops

    kernels = _kernels(args.kernels)
    if args.backend is not None:  # checked before torch is imported: a typo costs no seconds
        _backends(args.backend, dict.fromkeys(lazyops.backends()))
    from lazyops import _bench

    device = _bench._device(None)
    on_gpu = device.startswith("cuda")
    small = not (on_gpu or args.full_size)
    tokens = args.tokens or ((1, 128, 8192) if on_gpu else (1, 128, 1024))
    status = _bench.backend_status()
    backends = _backends(args.backend, status)
    skipped = {name: reason for name, reason in status.items() if name not in backends and args.backend is None}

    plans = [
        (kernel, _bench.implementations(kernel, backends, compile=args.compile, peers=False)) for kernel in kernels
    ]
    total = sum(len(impls) for _, impls in plans) * len(tokens)
    rows: list[Any] = []
    with output.progress(total, "timing") as progress:

        def done(row: Any) -> None:
            progress.advance()
            progress.working_on(f"{row.kernel} M={row.tokens} {row.impl}")

        for kernel, impls in plans:
            progress.working_on(f"{kernel}: building")
            rows += _bench.measure(kernel, impls, tokens, args.dtype, device=device, small=small, progress=done)
    add_speedups(rows)
    sizes = "engine sizes" if not small else "sizes clamped to 256 (no GPU; --full-size for engine sizes)"
    if args.plot:
        plot(rows, args.plot, f"{_device_name(device)}, {args.dtype}, {sizes}")
    if args.json:
        output.json(
            {
                "device": _device_name(device),
                "dtype": args.dtype,
                "tokens": list(tokens),
                "sizes": "engine" if not small else "small",
                "not_timed": skipped,
                "rows": [dataclasses.asdict(row) | {"x_eager": row.x_eager} for row in rows],
            }
        )
    else:
        render(output, rows, _device_name(device), args.dtype, sizes, skipped)
        if args.plot:
            output.line(f"plot: {args.plot}")
    return FOUND_PROBLEMS if any(row.error for row in rows) else OK


def _kernels(names: list[str]) -> list[str]:
    from lazyops.specs import kernel_names

    known = kernel_names()
    if not names:
        return list(known)
    chosen = [name if name.endswith("_tl") else f"{name}_tl" for name in names]
    for name, full in zip(names, chosen, strict=True):
        if full not in known:
            short = ", ".join(k.removesuffix("_tl") for k in known)
            raise CommandError(f"no kernel {name!r}; the kernels are {short}")
    return list(dict.fromkeys(chosen))


def _backends(option: str | None, status: dict[str, str | None]) -> list[str]:
    if option is None:
        return [name for name, reason in status.items() if reason is None]
    names = [name.strip() for name in option.split(",") if name.strip()]
    unknown = [name for name in names if name not in status]
    if unknown or not names:
        raise CommandError(
            f"--backend {option!r}: no backend named {', '.join(map(repr, unknown))}; known: {', '.join(status)}"
        )
    return names


def _require_matplotlib() -> None:
    import importlib.util

    from lazyops.cli._errors import MissingExtraError

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtraError("matplotlib")


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return "CPU"


def add_speedups(rows: list[Any]) -> None:
    """``x_eager`` of each row: its rate over torch eager's, same kernel, token count and dtype."""
    from lazyops._bench import EAGER

    eager = {(r.kernel, r.tokens, r.dtype): r.rate for r in rows if r.impl == EAGER and r.rate}
    for row in rows:
        base = eager.get((row.kernel, row.tokens, row.dtype))
        row.x_eager = row.rate / base if row.rate and base else None


# -- output --------------------------------------------------------------------------------------------------------


def render(out: Any, rows: list[Any], device: str, dtype: str, sizes: str, skipped: dict[str, str | None]) -> None:
    from lazyops.cli._output import seconds

    out.line(("lazyops bench", "head"), f" on {device}, {dtype}, {sizes}")
    for name, reason in skipped.items():
        out.line(("not timed: ", "warn"), f"{name} ({reason})")
    table = []
    previous = None
    for row in rows:
        group = (row.kernel, row.tokens)
        kernel, tokens = (row.kernel, str(row.tokens)) if group != previous else ("", "")
        previous = group
        if row.error:
            table.append([kernel, tokens, row.impl, ("failed", "fail"), "", ""])
            continue
        rate = f"{_figure(row.rate)} {row.unit}" if row.rate is not None else "-"
        speedup = f"{row.x_eager:.2f}" if row.x_eager is not None else "-"
        style = "ok" if (row.x_eager or 0) > 1.05 and row.kind == "lazyops" else ""
        table.append([kernel, tokens, row.impl, seconds(row.us * 1e-6), rate, (speedup, style)])
    out.table(
        ["kernel", "M", "implementation", "time", "throughput", "x eager"],
        table,
        justify=["left", "right", "left", "right", "right", "right"],
        no_wrap=("kernel", "M", "implementation", "time", "throughput"),
    )
    for row in rows:
        if row.error:
            out.line(("failed: ", "fail"), f"{row.kernel} M={row.tokens} {row.impl}: {row.error}")


def _figure(value: float) -> str:
    """Four significant digits at most, and never a misleading 0.0: 4238, 311.5, 2.914, 0.0123."""
    return f"{value:.0f}" if value >= 1000 else f"{value:.4g}" if value >= 1 else f"{value:.3g}"


def plot(rows: list[Any], path: str, subtitle: str) -> None:
    """Throughput against token count, one line per implementation, one panel per kernel."""
    import math

    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    from matplotlib import pyplot

    kernels = list(dict.fromkeys(row.kernel for row in rows))
    columns = min(3, len(kernels))
    lines = math.ceil(len(kernels) / columns)
    figure, axes = pyplot.subplots(lines, columns, figsize=(5 * columns, 3.6 * lines), squeeze=False)
    for axis, kernel in zip(axes.flat, kernels, strict=False):
        mine = [row for row in rows if row.kernel == kernel and row.rate is not None]
        for impl in dict.fromkeys(row.impl for row in mine):
            points = sorted((row.tokens, row.rate) for row in mine if row.impl == impl)
            style = "-o" if impl.startswith("lazyops") else "--s"
            axis.plot([t for t, _ in points], [r for _, r in points], style, label=impl, markersize=4)
        unit = next((row.unit for row in mine), "GB/s")
        axis.set_title(kernel)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("tokens (M)")
        axis.set_ylabel(unit)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(kernels) :]:
        axis.set_visible(False)
    figure.suptitle(f"lazyops bench: {subtitle}", fontsize=10)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    finally:
        pyplot.close(figure)
