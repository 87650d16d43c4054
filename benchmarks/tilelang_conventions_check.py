"""The TileLang backend under the calling conventions, on a GPU: strided rows, ``out=``, N-D, and rope's speed.

    python3 benchmarks/tilelang_conventions_check.py [--out DIR] [--max-examples 8] [--skip-drawn]

1. **layouts**: for every TileLang kernel and dtype, the spec's engine-sized configuration (``spec.benchmark``)
   at M = 1, 7 and 300 under named ``Layout``s, each through ``lazyops.testing.check_case`` (float64 reference,
   untouched spare columns, NaN-poisoned outputs): contiguous, leading dims, rows padded by a whole vector
   (the strided launch), padded by one element and offset by 3 (the launches' contiguous-copy path), offset by
   32 (64-byte aligned, strided launch), packed (rope: query and key in one qkv buffer), ``out=`` given, given
   and strided, and aliasing its input.
2. **drawn**: ``run_conformance("tilelang", max_examples=N)``: hypothesis draws the rest (``--skip-drawn`` skips).
3. **rope timing**: bf16, 32 query + 8 key heads of 128, neox, float32 cache, int64 positions, at M = 1024, 8192
   and 32768: contiguous query/key against query/key sliced from a packed ``qkv[M, (32 + 2*8) * 128]``, with
   ``triton.testing.do_bench``, against a device copy of the same bytes. Issue 12 wants the strided call no slower
   than the contiguous one, and both near the copy.

Prints a markdown table and writes ``tilelang_conventions.md`` into DIR (``benchmarks/results``). Exits 1 when a
layout case or the drawn check failed. Budget: about three minutes on an H200, most of it compiling.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

LAYOUT_TOKENS = (1, 7, 300)
ROPE_TOKENS = (1024, 8192, 32768)


def layouts(kernel_spec: object) -> list[tuple[str, object]]:
    from lazyops.testing import Layout

    named = [
        ("contiguous", Layout()),
        ("lead=3", Layout(lead=3)),
        ("row_pad=64 (strided launch)", Layout(row_pad=64)),
        ("offset=32 (strided, aligned)", Layout(offset=32, row_pad=32)),
        ("row_pad=1 (copy path)", Layout(row_pad=1)),
        ("offset=3 (misaligned, copy path)", Layout(offset=3)),
        ("lead=2, row_pad=64", Layout(lead=2, row_pad=64)),
    ]
    floating_rows = [name for name in kernel_spec.row_inputs if name != "positions"]  # type: ignore[attr-defined]
    if len(floating_rows) > 1:
        named += [("packed", Layout(packed=True)), ("packed, row_pad=1", Layout(packed=True, row_pad=1))]
    if kernel_spec.returns == "out":  # type: ignore[attr-defined]
        named += [
            ("out given", Layout(out="given")),
            ("out given, strided", Layout(out="given", row_pad=64)),
            ("out given, misaligned", Layout(out="given", offset=3)),
            ("out given, lead=2", Layout(out="given", lead=2)),
        ]
        if kernel_spec.out_aliases:  # type: ignore[attr-defined]
            named += [("out alias", Layout(out="alias")), ("out alias, strided", Layout(out="alias", row_pad=64))]
    return named


def check_layouts(backend_name: str, device: str) -> tuple[list[str], int]:
    import importlib

    import torch

    backend = importlib.import_module(f"lazyops._backends.{backend_name}")
    from lazyops.specs import spec
    from lazyops.testing import Case, check_case

    lines = ["| kernel | dtype | layout | worst error | status |", "| --- | --- | --- | --- | --- |"]
    failures = 0
    for name in sorted(backend.__all__):
        if not name.endswith("_tl"):
            continue
        factory = getattr(backend, name)
        kernel_spec = spec(name)
        for dtype in (torch.bfloat16, torch.float32):  # float16 lowers as bfloat16 does; compile time is the budget
            example = kernel_spec.benchmark(dtype)
            for label, layout in layouts(kernel_spec):
                case = Case(name, example.args, dict(example.kwargs), LAYOUT_TOKENS, 0, dict(example.geometry), layout)
                try:
                    error = check_case(factory, case, device=device)
                    lines.append(f"| {name} | {str(dtype)[6:]} | {label} | {error:.2e} | pass |")
                except Exception as exc:  # noqa: BLE001 - every case reports, the first failure does not stop the rest
                    failures += 1
                    first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
                    lines.append(f"| {name} | {str(dtype)[6:]} | {label} | - | **FAIL**: {first} |")
                    traceback.print_exc()
                    if device == "cuda":
                        torch.cuda.synchronize()
    return lines, failures


def check_drawn(max_examples: int) -> tuple[str, int]:
    from lazyops.testing import run_conformance

    try:
        return str(run_conformance("tilelang", max_examples=max_examples, seed=0)), 0
    except AssertionError as exc:
        return str(exc), 1


def bench(function: object, *args: object) -> float:
    """µs of one ``function(*args)``, by ``triton.testing.do_bench`` (L2 flushed between runs)."""
    from triton.testing import do_bench

    return float(do_bench(lambda: function(*args), warmup=50, rep=200)) * 1e3  # type: ignore[operator]


def time_rope(backend: str = "tilelang") -> list[str]:
    import torch

    import lazyops

    lazyops.configure(backend=backend, strict=True)
    head_dim, hq, hk = 128, 32, 8
    rope = lazyops.rope_tl(head_dim, torch.bfloat16, is_neox=True)
    lines = [
        "| M | contiguous µs | packed-qkv µs | packed / contiguous | contiguous GB/s | packed GB/s | copy GB/s | "
        "packed / copy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in ROPE_TOKENS:
        positions = torch.randint(0, 8192, (m,), device="cuda", dtype=torch.int64)
        cache = torch.randn(8192, head_dim, device="cuda", dtype=torch.float32)
        query = torch.randn(m, hq * head_dim, device="cuda", dtype=torch.bfloat16)
        key = torch.randn(m, hk * head_dim, device="cuda", dtype=torch.bfloat16)
        qkv = torch.randn(m, (hq + 2 * hk) * head_dim, device="cuda", dtype=torch.bfloat16)
        packed_q, packed_k = qkv[:, : hq * head_dim], qkv[:, hq * head_dim : (hq + hk) * head_dim]
        moved = 2 * (query.numel() + key.numel()) * 2 + m * head_dim * 4  # q/k read and written, a cache row
        contiguous = bench(rope, positions, query, key, cache)
        packed = bench(rope, positions, packed_q, packed_k, cache)
        source = torch.empty(moved // 2, device="cuda", dtype=torch.uint8)  # read once, written once: `moved`
        target = torch.empty_like(source)
        copy = bench(target.copy_, source)
        lines.append(
            f"| {m} | {contiguous:.1f} | {packed:.1f} | {packed / contiguous:.3f} | {moved / contiguous / 1e3:.0f} | "
            f"{moved / packed / 1e3:.0f} | {moved / copy / 1e3:.0f} | {copy / packed:.0%} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--max-examples", type=int, default=8)
    parser.add_argument("--skip-drawn", action="store_true")
    # The script's own logic on a CPU: --backend torch --device cpu --skip-drawn --skip-rope
    parser.add_argument("--backend", default="tilelang", help="the backend to check (default: tilelang)")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--skip-rope", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    import torch

    if options.device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    started = time.perf_counter()
    where = torch.cuda.get_device_name() if options.device == "cuda" else options.device
    report = [f"# {options.backend} under the calling conventions ({where})", ""]
    if not options.skip_rope:
        # first: a fault in a layout case would poison the context for the timing
        rope_lines = time_rope(options.backend)
        report += ["## rope: contiguous against packed-qkv views (bf16, 32 + 8 heads of 128, neox)", "", *rope_lines]
        report.append("")
        print("\n".join(rope_lines), flush=True)
    layout_lines, failures = check_layouts(options.backend, options.device)
    report += ["## layouts (check_case at M = 1, 7, 300)", "", *layout_lines, ""]
    print(f"layout cases: {failures} failed", flush=True)
    if not options.skip_drawn:
        drawn, failed = check_drawn(options.max_examples)
        failures += failed
        report += [f"## run_conformance('tilelang', max_examples={options.max_examples})", "", "```", drawn, "```", ""]
        print(drawn, flush=True)
    report.append(f"{time.perf_counter() - started:.0f} s in all; {failures} failure(s).")
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "tilelang_conventions.md").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
