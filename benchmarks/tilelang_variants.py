"""TileLang programs side by side: main's (d686586) against the backend's new ones, for rope and the fp8 norms.

    python3 benchmarks/tilelang_variants.py --out DIR [--tokens 1024,8192,32768] [--kernels rope,rmsnorm_fp8,...]
    python3 benchmarks/tilelang_variants.py --dry-run     # the plan, on any machine

Issue 12: TileLang's rope ran at 79.5 % of the copy at M = 32768 and its fp8 norms at 41.8 % and 66.4 %
(benchmarks/NOTES.md, "TileLang rope", says why and what the new programs should reach). One run decides:

1. **build**: every variant's program for the kernel's benchmark configuration (``spec.benchmark(bfloat16)``:
   rope with 32 query + 8 key heads of 128, neox, a float32 cache and int64 positions; the norms at n = 4096),
   compiled in parallel. Main's programs come from ``benchmarks/tilelang_baseline.py`` (a frozen copy), the new
   ones from ``lazyops._backends.tilelang``; rope has a third, the new program at 8 blocks an SM.
2. **check**: each variant through ``lazyops.testing.check_case`` (float64 reference, NaN-poisoned outputs,
   untouched spare columns) at M = 1, 7, 300 and 2048, contiguous and in a strided layout (rope: query and key
   sliced from a packed qkv buffer; the norms: rows padded by 64 elements and ``out=`` given).
3. **time**: ``lazyops._bench.measure`` (``triton.testing.do_bench`` medians, the L2 flushed before each call,
   inputs rotating over 256 MB) at each M, with lazyops' Triton kernel as a reference line, and a device-to-device
   copy of the same number of bytes (half read, half written) as the ceiling.

Writes ``tilelang_variants.md`` and ``tilelang_variants.json`` (date, device, versions, command) into DIR.
Exit status: 0 when every check passed, 1 when one failed, 2 when this machine has no CUDA device or no TileLang.
Budget: about a minute on an H200 (compiles ~30 s in parallel), well within four.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOKENS = (1024, 8192, 32768)
CHECK_TOKENS = (1, 7, 300, 2048)
KERNELS = ("rope", "rmsnorm_fp8", "add_rmsnorm_fp8")
BASELINE = "main d686586"


@dataclass(frozen=True)
class Variant:
    """One program of one kernel: ``program(config)`` builds it (imports TileLang); ``strided``: the program
    indexes rows by their stride and writes the caller's ``out`` (else the spec's wrapper copies)."""

    kernel: str
    name: str
    program: Callable[[Any], Any]
    strided: bool

    @property
    def key(self) -> str:
        return f"{self.kernel}: {self.name}"


def variants(kernels: Sequence[str]) -> list[Variant]:
    """The variants timed for ``kernels``; nothing is imported until a program is built."""
    table = [
        Variant("rope", BASELINE, lambda c: _baseline().rope_program(*_rope_arguments(c)), True),
        Variant("rope", "new", lambda c: _tilelang("rope").rope_program(*_rope_arguments(c)), True),
        Variant(
            "rope",
            "new, 8 blocks/SM",
            lambda c: _tilelang("rope").rope_program(*_rope_arguments(c), min_blocks_per_sm=8),
            True,
        ),
        Variant("rmsnorm_fp8", BASELINE, lambda c: _baseline().rmsnorm_fp8_program(*_norm_arguments(c)), False),
        Variant("rmsnorm_fp8", "new", lambda c: _only(_tilelang("rmsnorm_fp8").programs(c))(), True),
        Variant("add_rmsnorm_fp8", BASELINE, lambda c: _baseline().add_rmsnorm_fp8_program(*_norm_arguments(c)), False),
        Variant("add_rmsnorm_fp8", "new", lambda c: _only(_tilelang("add_rmsnorm_fp8").programs(c))(), True),
    ]
    return [variant for variant in table if variant.kernel in kernels]


def _baseline() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tilelang_baseline

    return tilelang_baseline


def _tilelang(module: str) -> Any:
    import importlib

    return importlib.import_module(f"lazyops._backends.tilelang.{module}")


def _only(programs: dict[Any, Callable[[], Any]]) -> Callable[[], Any]:
    (build,) = programs.values()
    return build


def _rope_arguments(config: Any) -> tuple[Any, ...]:
    """Main's and the new rope_program take the same arguments: the benchmark's cache and positions dtypes."""
    from lazyops._backends.tilelang._runtime import tl_dtype

    return config.head_dim, tl_dtype(config.dtype), config.is_neox, "float32", "int64"


def _norm_arguments(config: Any) -> tuple[Any, ...]:
    from lazyops._backends.tilelang._runtime import tl_dtype

    return config.n, tl_dtype(config.dtype), config.eps, None, tl_dtype(config.weight_dtype), config.weight_offset


def _program_builder(variant: Variant, config: Any) -> Callable[[], Any]:
    return lambda: variant.program(config)


def benchmark_example(kernel: str) -> Any:
    from lazyops import _bench

    return _bench.example(kernel, "bfloat16")


def factory(variant: Variant, kernel: Any, device: str = "cuda") -> Callable[..., Any]:
    """A factory for ``variant`` with the spec's checks and calling conventions around the compiled ``kernel``
    (under an operator namespace of its own, so it never meets the real backend's). ``device``: the tensors'
    device kind ("cpu" only where the tests put a stand-in for the kernel)."""
    import torch

    from lazyops._backends.tilelang._rows import vector_elements
    from lazyops._backends.tilelang._runtime import launch_out_of_place, tl_dtype
    from lazyops.specs import spec as spec_of

    spec = spec_of(f"{variant.kernel}_tl")

    def build(config: Any) -> Callable[..., Any]:
        if variant.kernel == "rope":
            launch: Callable[..., Any] = _tilelang("rope").rope_launch(config, {(torch.float32, torch.int64): kernel})
            return launch
        multiple = vector_elements(config.n, tl_dtype(config.dtype)) if variant.strided else 1
        written = tuple(spec.inputs.index(name) for name in spec.mutates)  # add_rmsnorm_fp8's residual
        return launch_out_of_place(spec, kernel, multiple, written)

    slug = "".join(ch if ch.isalnum() else "_" for ch in variant.name)
    made: Callable[..., Any] = spec.implementation(
        build,
        device_type=device,
        backend=f"tilelang_variants_{slug}",
        strided_rows=variant.strided,
        writes_out=variant.kernel != "rope",
    )
    return made


def layouts(kernel: str) -> list[tuple[str, Any]]:
    from lazyops.testing import Layout

    if kernel == "rope":
        return [("contiguous", Layout()), ("packed qkv", Layout(packed=True))]
    return [("contiguous", Layout()), ("rows padded by 64, out given", Layout(row_pad=64, out="given"))]


def check(variant: Variant, built: Callable[..., Any], device: str = "cuda") -> list[dict[str, Any]]:
    import torch

    from lazyops.testing import Case, check_case

    example = benchmark_example(variant.kernel)
    results = []
    for label, layout in layouts(variant.kernel):
        case = Case(
            f"{variant.kernel}_tl", example.args, dict(example.kwargs), CHECK_TOKENS, 0, example.geometry, layout
        )
        entry: dict[str, Any] = {"kernel": variant.kernel, "variant": variant.name, "layout": label}
        try:
            entry["worst_error"] = check_case(built, case, device=device)
            entry["status"] = "pass"
        except Exception as error:  # noqa: BLE001 - every case reports; the first failure does not stop the rest
            entry["status"] = "FAIL"
            entry["error"] = (str(error).splitlines() or [type(error).__name__])[0][:300]
            traceback.print_exc()
            if device == "cuda":
                torch.cuda.synchronize()
        print(f"check {variant.key} [{label}]: {entry['status']} {entry.get('worst_error', entry.get('error'))}")
        results.append(entry)
    return results


def copy_row(kernel: str, tokens: int, moved: int) -> Any:
    """A device-to-device copy moving ``moved`` bytes (half read, half written), timed as the kernels are."""
    import torch
    import triton.testing

    from lazyops._bench import Row

    source = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    us = float(triton.testing.do_bench(lambda: target.copy_(source), warmup=25, rep=100, return_mode="median")) * 1e3
    return Row(
        kernel,
        "copy (same bytes)",
        "ceiling",
        "copy",
        tokens,
        "bfloat16",
        us=us,
        rate=moved / us / 1e3,
        unit="GB/s",
        bytes=moved,
    )


def measure(kernel: str, built: dict[str, Callable[..., Any]], tokens: Sequence[int]) -> list[Any]:
    from lazyops import _bench
    from lazyops.specs import spec as spec_of

    impls = [_bench.Impl(name, "lazyops", _building(kernel_factory)) for name, kernel_factory in built.items()]
    impls += [impl for impl in _bench.implementations(kernel, ["triton"], peers=False) if impl.kind == "lazyops"]
    rows = _bench.measure(kernel, impls, tokens, "bfloat16", progress=lambda row: print(_describe(row), flush=True))
    spec, example = spec_of(f"{kernel}_tl"), benchmark_example(kernel)
    config = spec.configure(*example.args, **example.kwargs)
    for m in tokens:
        row = copy_row(kernel, m, spec.traffic(config, m, example.geometry).bytes)
        print(_describe(row), flush=True)
        rows.append(row)
    return rows


def _building(kernel_factory: Callable[..., Any]) -> Callable[[Any], Any]:
    """What ``_bench.Impl`` builds from the benchmark configuration: the factory's kernel."""
    return lambda chosen: kernel_factory(*chosen.args, **chosen.kwargs)


def _describe(row: Any) -> str:
    figure = f"{row.us:.1f} us, {row.rate:.0f} {row.unit}" if row.us is not None else f"error: {row.error}"
    return f"{row.kernel} M={row.tokens} {row.impl}: {figure}"


def report(environment: dict[str, Any], checks: list[dict[str, Any]], rows: list[Any], kernels: Sequence[str]) -> str:
    lines = [
        "# TileLang variants: main's programs against the new ones (issue 12)",
        "",
        f"- date: {environment['date']}; device: {environment['device']}; commit: {environment['commit']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in environment['versions'].items())}",
        f"- command: `{environment['command']}`",
        "- stream time: `triton.testing.do_bench` medians, L2 flushed, inputs rotating over 256 MB; GB/s count each "
        "input read once and each output written once (`spec.traffic`); % copy: against a device copy of the same "
        "bytes in the same run",
        "",
        "## Throughput",
        "",
    ]
    for kernel in kernels:
        kernel_rows = [row for row in rows if row.kernel == kernel]
        lines += [
            f"### {kernel}",
            "",
            f"{next((r.config for r in kernel_rows if r.config), '')}",
            "",
            "| M | implementation | µs | GB/s | % of copy | vs main |",
            "| ---: | --- | ---: | ---: | ---: | ---: |",
        ]
        for m in sorted({row.tokens for row in kernel_rows}):
            at_m = [row for row in kernel_rows if row.tokens == m]
            copy = next((row for row in at_m if row.method == "copy"), None)
            main = next((row for row in at_m if row.impl == BASELINE and row.us), None)
            for row in at_m:
                if row.us is None:
                    lines.append(f"| {m} | {row.impl} | error: {row.error} | | | |")
                    continue
                share = f"{row.rate / copy.rate:.1%}" if copy and copy.rate and row.method != "copy" else ""
                versus = f"{main.us / row.us:.3f}x" if main and row.method != "copy" else ""
                lines.append(f"| {m} | {row.impl} | {row.us:.1f} | {row.rate:.0f} | {share} | {versus} |")
        lines.append("")
    lines += [
        "## Checks (`lazyops.testing.check_case`, float64 reference, M = " + ", ".join(map(str, CHECK_TOKENS)) + ")",
        "",
        "| kernel | variant | layout | worst relative error | status |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for entry in checks:
        error = f"{entry['worst_error']:.2e}" if "worst_error" in entry else entry.get("error", "")
        lines.append(f"| {entry['kernel']} | {entry['variant']} | {entry['layout']} | {error} | {entry['status']} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for tilelang_variants.md and .json (required unless --dry-run)"
    )
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts M, comma-separated")
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated, of: " + ", ".join(KERNELS))
    parser.add_argument("--dry-run", action="store_true", help="print the variants and token counts; run nothing")
    args = parser.parse_args(argv)
    args.tokens = [int(m) for m in args.tokens.split(",") if m]
    args.kernels = [k for k in args.kernels.split(",") if k]
    unknown = sorted(set(args.kernels) - set(KERNELS))
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(KERNELS)}")
    if not args.tokens or min(args.tokens) < 1:
        parser.error("--tokens takes positive token counts, such as 1024,8192,32768")
    if args.out is None and not args.dry_run:
        parser.error("--out DIR is required: the folder the results are written into")
    return args


def unavailable() -> str | None:
    """Why this machine cannot run the comparison, or None."""
    if importlib.util.find_spec("tilelang") is None:
        return "TileLang is not installed (see shared/GPU.md for its wheels)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device: the variants are TileLang CUDA kernels; run this on the H200"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    chosen = variants(args.kernels)
    if args.dry_run:
        for variant in chosen:
            print(f"{variant.key} ({'strided rows' if variant.strided else 'contiguous rows'})")
        print(f"checks at M = {', '.join(map(str, CHECK_TOKENS))}; timing at M = {', '.join(map(str, args.tokens))}")
        return 0
    problem = unavailable()
    if problem:
        print(f"tilelang_variants: cannot run here: {problem}", file=sys.stderr)
        return 2
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _environment import describe_environment

    from lazyops._backends.tilelang._runtime import compiled
    from lazyops.specs import spec as spec_of

    started = time.perf_counter()
    configs = {
        kernel: spec_of(f"{kernel}_tl").configure(*benchmark_example(kernel).args, **benchmark_example(kernel).kwargs)
        for kernel in args.kernels
    }
    kernels = compiled("tilelang_variants", {v.key: _program_builder(v, configs[v.kernel]) for v in chosen})
    print(f"compiled {len(kernels)} programs in {time.perf_counter() - started:.0f} s", flush=True)
    built = {variant.key: factory(variant, kernels[variant.key]) for variant in chosen}
    checks: list[dict[str, Any]] = []
    rows: list[Any] = []
    try:
        checks += [entry for variant in chosen for entry in check(variant, built[variant.key])]
        for kernel in args.kernels:
            rows += measure(kernel, {v.name: built[v.key] for v in chosen if v.kernel == kernel}, args.tokens)
    finally:  # a fault that ends the run (a kernel that poisons the CUDA context) still leaves what was measured
        write(args.out, describe_environment(torch, "cuda", ""), started, checks, rows, args.kernels)
    return 1 if any(entry["status"] != "pass" for entry in checks) else 0


def write(
    out: Path,
    environment: dict[str, Any],
    started: float,
    checks: list[dict[str, Any]],
    rows: list[Any],
    kernels: Sequence[str],
) -> None:
    environment["seconds"] = round(time.perf_counter() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tilelang_variants.md").write_text(report(environment, checks, rows, kernels))
    (out / "tilelang_variants.json").write_text(
        json.dumps(
            {"environment": environment, "checks": checks, "rows": [dataclasses.asdict(r) for r in rows]},
            indent=1,
            default=str,
        )
    )
    print(f"wrote {out / 'tilelang_variants.md'} after {environment['seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
