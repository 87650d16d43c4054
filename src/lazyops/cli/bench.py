"""lazyops bench: how fast is each kernel here, in each backend, against torch eager.

Times every kernel (or the KERNELs named) in every backend that can run here (or those of --backend), and torch
eager (the spec's definition run in float32, as the kernels compute), with torch.compile of it under --compile,
at each token count of --tokens. The timing engine is lazyops.bench.engine, the one behind the GPU result files: on
CUDA triton.testing.do_bench with the L2 flushed, on the host torch.utils.benchmark's blocked_autorange, the
implementations interleaved over --rounds rounds so that a busy spell of the machine falls on all of them. Each
row gives the median and its spread (the interquartile range over the median); a row whose spread, or torch
eager's, is over 20 % is marked "?": too noisy to rank. GB/s counts each input read once and each output written
once (matmul: TFLOP/s); "x eager" is a row's rate over torch eager's at the same token count.

Sizes are the engine's (hidden 4096, Llama-shaped rope heads, a 4096 x 4096 GEMM) on a GPU; without one they
are clamped to 256 so that the host and Triton's interpreter finish (--full-size overrides): host figures say
what works, not how fast a GPU would be.

Exit status: 0 when every implementation asked for was timed; 1 when one could not be built or run (its row
says why); 2 for bad arguments, a --plot file that cannot be written among them (checked before any timing).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from lazyops.cli._errors import FOUND_PROBLEMS, OK, CommandError, nearest, unknown_names

HELP = "time kernels per backend and token count against torch eager; a table, --json or --plot"
DTYPES = ("float32", "float16", "bfloat16")
#: The mark of a row too noisy to rank, and what it means.
NOISY = "?"


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
    parser.add_argument(
        "--rounds",
        type=positive,
        default=5,
        metavar="N",
        help="interleaved rounds of timing per figure (default 5; more steady a busy machine's figures)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="draw throughput against token count (matmul: FLOP/s) with matplotlib"
    )


#: the largest token count ``--tokens`` takes (bench and tune): 2**20, far past any engine's batch, far short of an
#: allocation that could not be made (issue 33.8: 2**31 asked for 2 TB, 10**23 overflowed torch).
MAX_TOKENS = 1 << 20


def token_counts(text: str) -> tuple[int, ...]:
    """``1,128,8192`` -> (1, 128, 8192); an argparse type, so a bad list is a usage error (exit 2)."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of token counts, e.g. 1,128,8192") from None
    if not counts or any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: token counts are positive integers, e.g. 1,128,8192")
    if any(count > MAX_TOKENS for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: token counts go up to {MAX_TOKENS:,} (2**20)")
    return counts


def positive(text: str) -> int:
    """A positive integer; an argparse type."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer, e.g. 5")
    return int(text)


def main(args: argparse.Namespace) -> int:
    from lazyops.cli._output import Output

    output = Output()
    if args.plot:
        check_plot_path(args.plot)  # before any timing: a typo must not cost the run, nor its table
    import lazyops

    kernels = _kernels(args.kernels)
    if args.backend is not None:  # checked before torch is imported: a typo costs no seconds
        _backends(args.backend, dict.fromkeys(lazyops.backends()))
    from lazyops.bench import engine as _bench

    device = _bench.default_device(None)
    on_gpu = device.startswith("cuda")
    small = not (on_gpu or args.full_size)
    tokens = args.tokens or ((1, 128, 8192) if on_gpu else (1, 128, 1024))
    status = _bench.backend_status()
    backends = _backends(args.backend, status)
    skipped = {name: reason for name, reason in status.items() if name not in backends and args.backend is None}

    plans = [(kernel, _bench.implementations(kernel, backends, compile=args.compile)) for kernel in kernels]
    total = sum(len(impls) for _, impls in plans) * len(tokens)
    rows: list[Any] = []
    with output.progress(total, "timing") as progress:

        def done(row: Any) -> None:
            progress.advance()
            progress.working_on(f"{row.kernel} M={row.tokens} {row.impl}")

        for kernel, impls in plans:
            progress.working_on(f"{kernel}: building")
            rows += _bench.measure(
                kernel, impls, tokens, args.dtype, device=device, small=small, progress=done, rounds=args.rounds
            )
    add_speedups(rows)
    sizes = "engine sizes" if not small else "sizes clamped to 256 (no GPU; --full-size for engine sizes)"
    if args.json:
        output.json(
            {
                "device": _device_name(device),
                "dtype": args.dtype,
                "tokens": list(tokens),
                "sizes": "engine" if not small else "small",
                "rounds": args.rounds,
                "noisy_spread": _bench.NOISY_SPREAD,
                "not_timed": skipped,
                "rows": [dataclasses.asdict(row) | {"x_eager": row.x_eager, "ranked": row.ranked} for row in rows],
            }
        )
    else:
        render(output, rows, _device_name(device), args.dtype, sizes, skipped)
    if args.plot:  # after the table is out: a plot that fails now loses nothing measured
        plot(rows, args.plot, f"{_device_name(device)}, {args.dtype}, {sizes}")
        if not args.json:
            output.line(f"plot: {args.plot}")
    return FOUND_PROBLEMS if any(row.error for row in rows) else OK


def check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` path that cannot be written, before anything is timed: matplotlib missing, a format it
    does not write, a folder, a missing or read-only folder."""
    _require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    target = Path(path)
    if target.is_dir():
        raise CommandError(f"--plot {path!r} is a folder; name a file in it, e.g. {target / 'bench.png'}")
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = target.suffix.lower().removeprefix(".")
    if suffix not in formats:
        known = ", ".join(f".{name}" for name in sorted(formats))
        raise CommandError(
            f"--plot {path!r}: matplotlib cannot write {target.suffix or 'a file without a suffix'}; "
            f"name it with one of {known}, e.g. bench.png"
        )
    folder = target.parent
    if not folder.is_dir():
        raise CommandError(f"--plot {path!r}: the folder {str(folder)!r} does not exist; create it or name another")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise CommandError(f"--plot {path!r} cannot be written here (permission denied); name another file")


def _kernels(names: list[str]) -> list[str]:
    from lazyops.specs import kernel_names

    known = kernel_names()
    if not names:
        return list(known)
    chosen = [name if name.endswith("_tl") else f"{name}_tl" for name in names]
    for name, full in zip(names, chosen, strict=True):
        if full not in known:
            shorts = [k.removesuffix("_tl") for k in known]
            close = nearest(name.removesuffix("_tl"), shorts)
            guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
            raise CommandError(f"no kernel {name!r}{guess}; the kernels are {', '.join(shorts)}")
    return list(dict.fromkeys(chosen))


def _backends(option: str | None, status: dict[str, str | None]) -> list[str]:
    if option is None:
        return [name for name, reason in status.items() if reason is None]
    names = [name.strip() for name in option.split(",") if name.strip()]
    if not names:
        raise CommandError(f"--backend {option!r} names no backend; known: {', '.join(status)}")
    if any(name not in status for name in names):
        raise unknown_names("--backend", "backend", names, status)
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
    """``x_eager`` of each row: its rate over torch eager's, same kernel, token count and dtype; ``ranked``: False
    where that ratio cannot be trusted, because this row's spread or eager's is too large."""
    from lazyops.bench.engine import EAGER

    eager = {(r.kernel, r.tokens, r.dtype): r for r in rows if r.impl == EAGER and r.rate}
    for row in rows:
        base = eager.get((row.kernel, row.tokens, row.dtype))
        row.x_eager = row.rate / base.rate if row.rate and base else None
        row.ranked = None if base is None or row.x_eager is None else not (row.noisy or base.noisy)


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
            table.append([kernel, tokens, row.impl, ("failed", "fail"), "", "", ""])
            continue
        rate = f"{_figure(row.rate)} {row.unit}" if row.rate is not None else "-"
        spread = f"{100 * (row.high_us - row.low_us) / row.us:.0f}%" if row.us else "-"
        if row.x_eager is None:
            speedup: Any = "-"
        elif row.ranked:
            style = "ok" if row.x_eager > 1.05 and row.kind == "lazyops" else ""
            speedup = (f"{row.x_eager:.2f}", style)
        else:
            speedup = (f"{row.x_eager:.2f}{NOISY}", "warn")
        table.append([kernel, tokens, row.impl, seconds(row.us * 1e-6), spread, rate, speedup])
    out.table(
        ["kernel", "M", "implementation", "time", "spread", "throughput", "x eager"],
        table,
        justify=["left", "right", "left", "right", "right", "right", "right"],
        no_wrap=("kernel", "M", "implementation", "time", "spread", "throughput"),
    )
    if any(row.ranked is False for row in rows):
        out.line(
            (f"{NOISY}: ", "warn"),
            "the spread (interquartile range over median) of this row or of torch eager's is over 20 %: the "
            "machine moved more than such a ratio can tell; rerun with more --rounds or on a quieter machine",
        )
    for row in rows:
        if row.error:
            out.line(("failed: ", "fail"), f"{row.kernel} M={row.tokens} {row.impl}: {row.error}")


def _figure(value: float) -> str:
    """Four significant digits at most, and never a misleading 0.0: 4238, 311.5, 2.914, 0.0123."""
    return f"{value:.0f}" if value >= 1000 else f"{value:.4g}" if value >= 1 else f"{value:.3g}"


def figure(rows: list[Any], subtitle: str) -> Any:
    """Throughput against token count, one panel per kernel, both axes logarithmic; one colour per implementation
    in every panel (one legend for the figure), each point with its spread as an error bar (the rates of the
    samples' quartiles)."""
    import math

    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    from matplotlib import pyplot
    from matplotlib.lines import Line2D

    timed = [row for row in rows if row.rate is not None and row.us]
    kernels = list(dict.fromkeys(row.kernel for row in timed)) or ["(nothing timed)"]
    impls = list(dict.fromkeys(row.impl for row in timed))
    palette = pyplot.get_cmap("tab10" if len(impls) <= 10 else "tab20")
    colours = {impl: palette(index % palette.N) for index, impl in enumerate(impls)}
    columns = min(3, len(kernels))
    lines = math.ceil(len(kernels) / columns)
    drawn, axes = pyplot.subplots(lines, columns, figsize=(5 * columns, 3.6 * lines), squeeze=False)
    for axis, kernel in zip(axes.flat, kernels, strict=False):
        mine = [row for row in timed if row.kernel == kernel]
        for impl in dict.fromkeys(row.impl for row in mine):
            points = sorted((row.tokens, row) for row in mine if row.impl == impl)
            ms = [m for m, _ in points]
            rates = [row.rate for _, row in points]
            # the rate of the slowest quartile below, of the fastest above: rate scales as 1 / time
            below = [row.rate - row.rate * row.us / row.high_us for _, row in points]
            above = [row.rate * row.us / row.low_us - row.rate for _, row in points]
            axis.errorbar(
                ms,
                rates,
                yerr=[below, above],
                fmt="-o" if impl.startswith("lazyops") else "--s",
                color=colours[impl],
                label=impl,
                markersize=4,
                capsize=3,
            )
        unit = next((row.unit for row in mine), "GB/s")
        axis.set_title(kernel)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("tokens (M)")
        axis.set_ylabel(f"{unit} (log)")
        axis.grid(True, which="both", alpha=0.3)
    for axis in list(axes.flat)[len(kernels) :]:
        axis.set_visible(False)
    handles = [Line2D([], [], color=colours[impl], marker="o", label=impl) for impl in impls]
    if handles:
        drawn.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=8)
    drawn.suptitle(f"lazyops bench: {subtitle}", fontsize=10)
    drawn.tight_layout(rect=(0, 0.06 * math.ceil(len(handles) / 4), 1, 1))
    return drawn


def plot(rows: list[Any], path: str, subtitle: str) -> None:
    """:func:`figure` written to ``path`` (its format from the suffix)."""
    from matplotlib import pyplot

    drawn = figure(rows, subtitle)
    try:
        drawn.savefig(path, dpi=120)
    except OSError as error:
        raise CommandError(
            f"--plot {path!r} could not be written ({error.strerror or error}); the table above holds every figure"
        ) from None
    finally:
        pyplot.close(drawn)
