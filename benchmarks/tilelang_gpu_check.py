"""Check the TileLang kernels on a GPU against the float64 torch reference, and time them against torch.

    python benchmarks/tilelang_gpu_check.py [--out DIR] [--dry]

Needs a CUDA GPU and TileLang. Writes ``tilelang_gpu_check.md`` and ``.json`` into DIR (``$OUT`` when set, else
the current directory) and prints the markdown. ``--dry`` runs the same harness on the CPU with the torch
backend's kernels and tiny sizes, to check the script itself without a GPU.

What it checks, for each kernel over several static configurations (odd widths, every dtype) and token counts
1, 7, 128, 4096 and 32768: the relative error ``|out - ref| / |ref|`` against the reference computed in float64;
outputs land in memory just filled with NaN (freed NaN blocks of the output's size, which the caching allocator
hands out again), so a lane the kernel forgets to write shows up as NaN. Also M = 0, misaligned views, and for
the in-place kernels the tensors updated in place. Timings are medians of ``triton.testing.do_bench``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lazyops._backends.torch.add_rmsnorm import add_rmsnorm_reference  # noqa: E402
from lazyops._backends.torch.matmul import matmul_reference  # noqa: E402
from lazyops._backends.torch.rmsnorm import rmsnorm_reference  # noqa: E402
from lazyops._backends.torch.rope import rope_reference  # noqa: E402
from lazyops._backends.torch.silu_and_mul import silu_and_mul_reference  # noqa: E402
from lazyops._backends.torch.softmax import softmax_reference  # noqa: E402

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
TOLERANCE = {F32: 2e-5, F16: 2e-3, BF16: 1.2e-2}
TOKENS = (1, 7, 128, 4096, 32768)
#: Skip a correctness case whose float64 reference would exceed this many elements (memory and time).
MAX_ELEMENTS = 32768 * 8192

ROW_CONFIGS = {
    BF16: (128, 1000, 4096, 5000, 8192, 16384, 40000),
    F16: (1000, 4096, 16384),
    F32: (128, 4096, 5000, 16384, 20000),
}
SILU_CONFIGS = {BF16: (5, 1000, 4096, 14336), F16: (4096,), F32: (1000, 4096)}
# head_dim, dtype, is_neox, query heads, key heads, rotary width, cache dtype, positions dtype
ROPE_CONFIGS = (
    (128, BF16, True, 32, 8, 128, F32, torch.int64),
    (128, BF16, False, 32, 8, 128, BF16, torch.int32),
    (128, F16, True, 8, 2, 64, F16, torch.int64),
    (64, F32, False, 4, 4, 32, F32, torch.int32),
    (80, BF16, True, 5, 1, 80, BF16, torch.int64),
    (65, F32, False, 3, 1, 64, F32, torch.int32),
)
GEMM_CONFIGS = {
    BF16: ((4096, 4096), (1000, 1001), (5000, 320), (64, 128), (1001, 999)),
    F16: ((4096, 4096), (333, 257)),
    F32: ((1000, 1001), (4096, 4096)),
}


class Harness:
    def __init__(self, dry: bool) -> None:
        self.dry = dry
        self.device = "cpu" if dry else "cuda"
        self.rows: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.builds: dict[str, float] = {}
        if dry:
            from lazyops._backends import torch as backend

            self.module = lambda name: getattr(backend, f"{name}_tl")
        else:
            import importlib

            def module(name: str) -> Any:
                return getattr(importlib.import_module(f"lazyops._backends.tilelang.{name}"), f"{name}_tl")

            self.module = module

    def tokens(self) -> tuple[int, ...]:
        return (1, 7, 33) if self.dry else TOKENS

    def randn(self, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=torch.float32).to(dtype)

    def poison(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """Leave a freed NaN-filled block of the output's size for the kernel's ``torch.empty`` to pick up."""
        block = torch.full(shape, float("nan"), dtype=dtype, device=self.device)
        del block

    def record(self, kernel: str, config: str, m: int, errors: dict[str, float], tol: float) -> None:
        worst = max(errors.values())
        ok = all(math.isfinite(e) and e <= tol for e in errors.values())
        self.rows.append(
            {"kernel": kernel, "config": config, "M": m, "error": worst, "tolerance": tol, "ok": ok, "parts": errors}
        )
        if not ok:
            self.problems.append(f"{kernel} {config} M={m}: errors {errors} > {tol}")

    def guard(self, what: str, check: Callable[[], None]) -> None:
        try:
            check()
        except Exception:
            self.problems.append(f"{what}: {traceback.format_exc(limit=4)}")


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))


# --- building every kernel (in parallel, as a server's warm-up would) ------------------------------------------


def build_all(h: Harness) -> dict[tuple, Any]:
    jobs: dict[tuple, Callable[[], Any]] = {}
    for dtype, widths in ROW_CONFIGS.items():
        for n in widths:
            jobs["rmsnorm", n, dtype] = lambda n=n, d=dtype: h.module("rmsnorm")(n, d, eps=1e-6)
            jobs["add_rmsnorm", n, dtype] = lambda n=n, d=dtype: h.module("add_rmsnorm")(n, d, eps=1e-5)
            jobs["softmax", n, dtype] = lambda n=n, d=dtype: h.module("softmax")(n, d)
    for dtype, widths in SILU_CONFIGS.items():
        for n in widths:
            jobs["silu_and_mul", n, dtype] = lambda n=n, d=dtype: h.module("silu_and_mul")(n, d)
    for head_dim, dtype, neox, *_ in ROPE_CONFIGS:
        jobs["rope", head_dim, dtype, neox] = lambda hd=head_dim, d=dtype, x=neox: h.module("rope")(hd, d, is_neox=x)
    for dtype, shapes in GEMM_CONFIGS.items():
        for n, k in shapes:
            jobs["matmul", n, k, dtype] = lambda n=n, k=k, d=dtype: h.module("matmul")(n, k, d)
    jobs["matmul", 8192, 8192, BF16] = lambda: h.module("matmul")(8192, 8192, BF16)

    def build(key: tuple) -> tuple[tuple, Any]:
        start = time.perf_counter()
        try:
            kernel = jobs[key]()
        except Exception:
            h.problems.append(f"building {key}: {traceback.format_exc(limit=6)}")
            kernel = None
        h.builds[repr(key)] = time.perf_counter() - start
        return key, kernel

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        return dict(pool.map(build, list(jobs)))


# --- correctness -----------------------------------------------------------------------------------------------


def check_rows(h: Harness, kernels: dict[tuple, Any]) -> None:
    for dtype, widths in ROW_CONFIGS.items():
        tol = TOLERANCE[dtype]
        for n in widths:
            for m in h.tokens():
                if m * n > MAX_ELEMENTS:
                    continue
                config = f"n={n} {str(dtype)[6:]}"
                x = h.randn(m, n, dtype=dtype) * 3
                weight = h.randn(n, dtype=dtype)
                if kernel := kernels.get(("rmsnorm", n, dtype)):
                    h.poison((m, n), dtype)
                    ref = rmsnorm_reference(x.double(), weight.double(), 1e-6)
                    h.record("rmsnorm", config, m, {"y": relative_error(kernel(x, weight), ref)}, tol)
                if kernel := kernels.get(("add_rmsnorm", n, dtype)):
                    residual = h.randn(m, n, dtype=dtype)
                    ref_y, ref_sum = add_rmsnorm_reference(x.double(), residual.double(), weight.double(), 1e-5)
                    h.poison((m, n), dtype)
                    y = kernel(x, residual, weight)
                    errors = {"y": relative_error(y, ref_y), "residual": relative_error(residual, ref_sum)}
                    h.record("add_rmsnorm", config, m, errors, tol)
                if kernel := kernels.get(("softmax", n, dtype)):
                    h.poison((m, n), dtype)
                    error = relative_error(kernel(x), softmax_reference(x.double()))
                    h.record("softmax", config, m, {"y": error}, tol)
    for dtype, widths in SILU_CONFIGS.items():
        for n in widths:
            if not (kernel := kernels.get(("silu_and_mul", n, dtype))):
                continue
            for m in h.tokens():
                if 2 * m * n > MAX_ELEMENTS:
                    continue
                x = h.randn(m, 2 * n, dtype=dtype) * 3
                h.poison((m, n), dtype)
                error = relative_error(kernel(x), silu_and_mul_reference(x.double()))
                h.record("silu_and_mul", f"n={n} {str(dtype)[6:]}", m, {"y": error}, TOLERANCE[dtype])


def check_rope(h: Harness, kernels: dict[tuple, Any]) -> None:
    for head_dim, dtype, neox, hq, hk, rotary, cache_dtype, pos_dtype in ROPE_CONFIGS:
        if not (kernel := kernels.get(("rope", head_dim, dtype, neox))):
            continue
        positions_max = 4096
        angles = torch.arange(positions_max, device=h.device)[:, None] * (
            10000.0 ** (-torch.arange(0, rotary, 2, device=h.device) / rotary)
        )[None, :]
        cache = torch.cat([angles.cos(), angles.sin()], dim=1).to(cache_dtype)
        config = (
            f"hd={head_dim} {str(dtype)[6:]} {'neox' if neox else 'gptj'} Hq={hq} Hk={hk} r={rotary} "
            f"cache={str(cache_dtype)[6:]} pos={str(pos_dtype)[6:]}"
        )
        for m in h.tokens():
            positions = torch.randint(0, positions_max, (m,), device=h.device, dtype=pos_dtype)
            query = h.randn(m, hq * head_dim, dtype=dtype)
            key = h.randn(m, hk * head_dim, dtype=dtype)
            ref_q = rope_reference(positions, query.double(), cache.double(), head_dim, neox)
            ref_k = rope_reference(positions, key.double(), cache.double(), head_dim, neox)
            out_q, out_k = kernel(positions, query, key, cache)
            same = out_q is query and out_k is key
            errors = {"query": relative_error(query, ref_q), "key": relative_error(key, ref_k)}
            if not same:
                errors["returned the inputs"] = float("inf")
            h.record("rope", config, m, errors, TOLERANCE[dtype])


def check_matmul(h: Harness, kernels: dict[tuple, Any]) -> None:
    for dtype, shapes in GEMM_CONFIGS.items():
        for n, k in shapes:
            if not (kernel := kernels.get(("matmul", n, k, dtype))):
                continue
            b = h.randn(k, n, dtype=dtype)
            for m in h.tokens():
                a = h.randn(m, k, dtype=dtype)
                h.poison((m, n), dtype)
                error = relative_error(kernel(a, b), matmul_reference(a.double(), b.double()))
                h.record("matmul", f"n={n} k={k} {str(dtype)[6:]}", m, {"c": error}, TOLERANCE[dtype])


def check_edges(h: Harness, kernels: dict[tuple, Any]) -> None:
    """M = 0, and contiguous views that start mid-allocation (misaligned for vector loads and TMA)."""

    def empty_inputs() -> None:
        x = h.randn(0, 4096, dtype=BF16)
        assert kernels["rmsnorm", 4096, BF16](x, h.randn(4096, dtype=BF16)).shape == (0, 4096)
        assert kernels["softmax", 4096, BF16](x).shape == (0, 4096)
        assert kernels["silu_and_mul", 1000, BF16](h.randn(0, 2000, dtype=BF16)).shape == (0, 1000)
        a, b = h.randn(0, 1001, dtype=BF16), h.randn(1001, 1000, dtype=BF16)
        assert kernels["matmul", 1000, 1001, BF16](a, b).shape == (0, 1000)
        q, k = h.randn(0, 4096, dtype=BF16), h.randn(0, 1024, dtype=BF16)
        cache = h.randn(16, 128, dtype=F32)
        kernels["rope", 128, BF16, True](torch.zeros(0, dtype=torch.int64, device=h.device), q, k, cache)

    def misaligned_views() -> None:
        for n, dtype in ((1000, BF16), (5000, BF16), (4096, F16)):
            base = h.randn(65, n, dtype=dtype)
            x = base[1:]  # starts n elements in: 2000 or 10000 bytes, not a multiple of 64 (nor 16 for n=1000 bf16)
            weight = h.randn(n + 1, dtype=dtype)[1:]
            if kernel := kernels.get(("rmsnorm", n, dtype)):
                ref = rmsnorm_reference(x.double(), weight.double(), 1e-6)
                error = relative_error(kernel(x, weight), ref)
                h.record("rmsnorm (views)", f"n={n} {str(dtype)[6:]}", 64, {"y": error}, TOLERANCE[dtype])
            if kernel := kernels.get(("add_rmsnorm", n, dtype)):
                residual_base = h.randn(65, n, dtype=dtype)
                residual = residual_base[1:]
                ref_y, ref_sum = add_rmsnorm_reference(x.double(), residual.double(), weight.double(), 1e-5)
                y = kernel(x, residual, weight)
                errors = {"y": relative_error(y, ref_y), "residual": relative_error(residual, ref_sum)}
                h.record("add_rmsnorm (views)", f"n={n} {str(dtype)[6:]}", 64, errors, TOLERANCE[dtype])
        kernel = kernels.get(("matmul", 1000, 1001, BF16))
        if kernel:
            a = h.randn(101, 1001, dtype=BF16)[1:]
            b = h.randn(1002 * 1000, dtype=BF16)[1000:].view(1001, 1000)
            ref = matmul_reference(a.double(), b.double())
            error = relative_error(kernel(a, b), ref)
            h.record("matmul (views)", "n=1000 k=1001 bfloat16", 100, {"c": error}, TOLERANCE[BF16])

    def rope_positions_outside_the_cache() -> None:
        kernel = kernels["rope", 128, BF16, True]
        cache = h.randn(16, 128, dtype=F32)
        positions = torch.tensor([3, 16, -1, 5], device=h.device)
        query, key = h.randn(4, 256, dtype=BF16), h.randn(4, 128, dtype=BF16)
        before_q, before_k = query.clone(), key.clone()
        kernel(positions, query, key, cache)
        assert torch.equal(query[1:3], before_q[1:3]) and torch.equal(key[1:3], before_k[1:3]), "rotated anyway"
        ref = rope_reference(positions[[0, 3]], before_q[[0, 3]].double(), cache.double(), 128, True)
        assert relative_error(query[[0, 3]], ref) < TOLERANCE[BF16]

    h.guard("M = 0", empty_inputs)
    h.guard("misaligned views", misaligned_views)
    if not h.dry:  # the torch reference refuses such positions instead
        h.guard("rope positions outside the cache", rope_positions_outside_the_cache)


# --- timing ----------------------------------------------------------------------------------------------------


def bench(fn: Callable[[], Any]) -> float:
    """Median milliseconds per call."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def time_kernels(h: Harness, kernels: dict[tuple, Any]) -> list[dict[str, Any]]:
    from lazyops._backends import torch as reference

    results: list[dict[str, Any]] = []

    def add(
        kernel: str, m: int, bytes_moved: float, ours: Callable, theirs: Callable, unit: str = "GB/s", flops: float = 0
    ) -> None:
        ms_ours, ms_theirs = bench(ours), bench(theirs)
        rate = (lambda ms: flops / ms / 1e9) if unit == "TFLOP/s" else (lambda ms: bytes_moved / ms / 1e6)
        results.append(
            {
                "kernel": kernel, "M": m, "unit": unit,
                "tilelang_us": ms_ours * 1e3, "torch_us": ms_theirs * 1e3,
                "tilelang_rate": rate(ms_ours), "torch_rate": rate(ms_theirs),
            }
        )

    n = 4096
    weight = h.randn(n, dtype=BF16)
    for m in (1, 1024, 8192, 32768):
        x = h.randn(m, n, dtype=BF16)
        residual = h.randn(m, n, dtype=BF16)
        size = m * n * 2
        ours, ref = kernels["rmsnorm", n, BF16], reference.rmsnorm_tl(n, BF16)
        add("rmsnorm", m, 2 * size, lambda: ours(x, weight), lambda: ref(x, weight))
        ours, ref = kernels["add_rmsnorm", n, BF16], reference.add_rmsnorm_tl(n, BF16, eps=1e-5)
        add("add_rmsnorm", m, 4 * size, lambda: ours(x, residual, weight), lambda: ref(x, residual, weight))
        ours, ref = kernels["softmax", n, BF16], reference.softmax_tl(n, BF16)
        add("softmax", m, 2 * size, lambda: ours(x), lambda: ref(x))
        gate_up = h.randn(m, 2 * n, dtype=BF16)
        ours, ref = kernels["silu_and_mul", n, BF16], reference.silu_and_mul_tl(n, BF16)
        add("silu_and_mul", m, 3 * size, lambda: ours(gate_up), lambda: ref(gate_up))
        positions = torch.randint(0, 4096, (m,), device=h.device)
        query, key = h.randn(m, 32 * 128, dtype=BF16), h.randn(m, 8 * 128, dtype=BF16)
        cache = h.randn(4096, 128, dtype=F32)
        ours, ref = kernels["rope", 128, BF16, True], reference.rope_tl(128, BF16)
        moved = 2 * (query.numel() + key.numel()) * 2
        add(
            "rope (neox, 32+8 heads)", m, moved,
            lambda: ours(positions, query, key, cache), lambda: ref(positions, query, key, cache),
        )
    b = h.randn(4096, 4096, dtype=BF16)
    for m in (1, 128, 1024, 8192):
        a = h.randn(m, 4096, dtype=BF16)
        ours = kernels["matmul", 4096, 4096, BF16]
        flops = 2 * m * 4096 * 4096
        add("matmul bf16 [M,4096]x[4096,4096]", m, 0, lambda: ours(a, b), lambda: torch.matmul(a, b), "TFLOP/s", flops)
    a, b = h.randn(8192, 8192, dtype=BF16), h.randn(8192, 8192, dtype=BF16)
    ours = kernels["matmul", 8192, 8192, BF16]
    add("matmul bf16 8192^3", 8192, 0, lambda: ours(a, b), lambda: torch.matmul(a, b), "TFLOP/s", 2 * 8192**3)
    a, b = h.randn(4096, 4096, dtype=F32), h.randn(4096, 4096, dtype=F32)
    ours = kernels["matmul", 4096, 4096, F32]
    flops = 2 * 4096**3
    add("matmul fp32 4096^3 (IEEE, no TF32)", 4096, 0, lambda: ours(a, b), lambda: torch.matmul(a, b), "TFLOP/s", flops)
    return results


# --- report ----------------------------------------------------------------------------------------------------


def report(h: Harness, timings: list[dict[str, Any]], environment: dict[str, str]) -> str:
    lines = ["# TileLang kernels on the GPU", ""]
    lines += [f"- {key}: {value}" for key, value in environment.items()]
    build_times = sorted(h.builds.values())
    if build_times:
        slowest = build_times[-1]
        lines += [f"- factories built: {len(build_times)}, slowest {slowest:.1f} s (parallel warm-up, nvcc included)"]
    passed = sum(row["ok"] for row in h.rows)
    lines += ["", f"## Correctness: {passed}/{len(h.rows)} cases within tolerance", ""]
    lines += ["| kernel | config | M values | worst relative error | tolerance | ok |", "|---|---|---|---|---|---|"]
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in h.rows:
        grouped.setdefault((row["kernel"], row["config"]), []).append(row)
    for (kernel, config), rows in grouped.items():
        worst = max(row["error"] for row in rows)
        ok = all(row["ok"] for row in rows)
        ms = ",".join(str(row["M"]) for row in rows)
        verdict = "yes" if ok else "**NO**"
        lines.append(f"| {kernel} | {config} | {ms} | {worst:.2e} | {rows[0]['tolerance']:.0e} | {verdict} |")
    if timings:
        lines += ["", "## Timings", ""]
        lines += ["Medians of do_bench; torch = the lazyops torch reference backend (eager), torch.matmul for GEMM.", ""]
        lines += ["| kernel | M | tilelang µs | torch µs | tilelang rate | torch rate | unit |", "|---|---|---|---|---|---|---|"]
        for t in timings:
            lines.append(
                f"| {t['kernel']} | {t['M']} | {t['tilelang_us']:.1f} | {t['torch_us']:.1f} | "
                f"{t['tilelang_rate']:.0f} | {t['torch_rate']:.0f} | {t['unit']} |"
            )
    if h.problems:
        lines += ["", "## Problems", ""]
        lines += [f"```\n{problem}\n```" for problem in h.problems]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--dry", action="store_true", help="check the harness on the CPU with the torch backend")
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    h = Harness(args.dry)
    environment = {"torch": torch.__version__}
    if not args.dry:
        import tilelang

        environment.update(gpu=torch.cuda.get_device_name(), tilelang=tilelang.__version__)
    start = time.perf_counter()
    kernels = build_all(h)
    environment["warm-up wall time"] = f"{time.perf_counter() - start:.1f} s"
    for stage in (check_rows, check_rope, check_matmul, check_edges):
        h.guard(stage.__name__, lambda stage=stage: stage(h, kernels))
    timings: list[dict[str, Any]] = []
    if not args.dry and not args.no_timing:
        h.guard("timing", lambda: timings.extend(time_kernels(h, kernels)))
    text = report(h, timings, environment)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tilelang_gpu_check.md").write_text(text)
    (out / "tilelang_gpu_check.json").write_text(
        json.dumps({"environment": environment, "cases": h.rows, "timings": timings, "problems": h.problems,
                    "builds": h.builds}, indent=1)
    )
    print(text)
    return 1 if h.problems else 0


if __name__ == "__main__":
    sys.exit(main())
