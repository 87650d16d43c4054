"""Check every kernel of every backend that imports here against the float64 torch reference, on GPU-sized inputs.

    python3 benchmarks/gpu_conformance.py [--out DIR]              # on a CUDA machine
    python3 benchmarks/gpu_conformance.py --device cpu --small     # the script's logic, on a CPU (Triton interpreted)

Writes ``gpu_conformance.md`` (a table: kernel x backend x dtype -> pass/fail, worst relative error, cases) and
``gpu_conformance.json`` (every case) into DIR (default ``benchmarks/results``). CI has no GPU: these files are
what the repository knows about the kernels on one.

Each case draws fresh random inputs, computes the reference in float64 on the device, leaves a NaN-filled block of
the output's size free just before the call (the caching allocator hands it to the kernel's output, so an element
the kernel never writes reads NaN), and compares by ``‖out − ref‖ / ‖ref‖``; the in-place results
(add_rmsnorm's residual, rope's query and key) are compared the same way. A backend that fails to import, a
factory that raises, a kernel that crashes: each is recorded with its message and the run goes on.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from _environment import describe_environment as shared_environment  # benchmarks/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("torch", "triton", "tilelang")
KERNELS = ("softmax", "rmsnorm", "add_rmsnorm", "silu_and_mul", "rope", "matmul")
#: The kernel tests' tolerances (tests/kernels/conftest.py): one unit in the last place for 16-bit types.
TOLERANCE_BY_NAME = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


@dataclass(frozen=True)
class Sizes:
    tokens: tuple[int, ...]
    hidden: tuple[int, ...]
    matmul_tokens: tuple[int, ...]
    matmul_shapes: tuple[tuple[int, int], ...]  # (n, k)
    rope_heads: tuple[int, int]  # query, key
    rope_head_dim: int
    rope_rotary: tuple[int, ...]
    cache_rows: int


GPU_SIZES = Sizes(
    tokens=(1, 7, 128, 4096, 32768),
    hidden=(128, 1000, 4096, 8192),
    matmul_tokens=(1, 7, 128, 4096),
    matmul_shapes=((128, 128), (4096, 4096), (1000, 8192)),
    rope_heads=(32, 8),
    rope_head_dim=128,
    rope_rotary=(128, 64),
    cache_rows=8192,
)
#: Small enough for Triton's interpreter on a CPU: checks the script, not the kernels.
SMALL_SIZES = Sizes(
    tokens=(1, 7, 33),
    hidden=(128, 1000),
    matmul_tokens=(1, 33),
    matmul_shapes=((128, 128), (100, 300)),
    rope_heads=(4, 2),
    rope_head_dim=128,
    rope_rotary=(128, 64),
    cache_rows=64,
)


@dataclass
class Outcome:
    """One kernel x backend x dtype: its cases, the worst error seen, and what went wrong, if anything."""

    kernel: str
    backend: str
    dtype: str
    tolerance: float
    cases: int = 0
    failed: int = 0
    worst: float = 0.0
    worst_case: str = ""
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.cases > 0 and self.failed == 0 and not self.errors


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="where the results go")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="small sizes (for a CPU, or a quick look)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list (default: all)")
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma list (default: all)")
    parser.add_argument("--dtypes", default="bfloat16,float16", help="comma list of float32, float16, bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warm-up-threads", type=int, default=16,
        help="build every factory of a backend in this many threads first (TileLang compiles for seconds each)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        # Triton runs on a CPU only in its interpreter, chosen when a kernel is decorated: before any import.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --small to check the script here", file=sys.stderr)
        return 2
    sizes = SMALL_SIZES if args.small else GPU_SIZES
    dtypes = [getattr(torch, name) for name in args.dtypes.split(",")]
    backends = [name for name in args.backends.split(",") if name]
    kernels = [name for name in args.kernels.split(",") if name]
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    cases: list[dict[str, Any]] = []
    environment = describe_environment(torch, args.device)
    for backend in backends:
        problem = backend_problem(backend)
        if not problem:
            warm_up(backend, kernels, dtypes, sizes, args.warm_up_threads)
        for kernel in kernels:
            for dtype in dtypes:
                outcome = Outcome(kernel, backend, str(dtype).removeprefix("torch."), tolerance_for(dtype))
                outcomes.append(outcome)
                if problem:
                    outcome.errors.append(problem)
                    continue
                check_kernel(outcome, kernel, backend, dtype, sizes, args, cases)
                print(summary_line(outcome), flush=True)
        # What one backend left cached must not crowd the next one's largest cases.
        if args.device == "cuda":
            torch.cuda.empty_cache()
    elapsed = time.perf_counter() - started
    write_results(args.out, outcomes, cases, environment, elapsed)
    print(render_markdown(outcomes, environment, elapsed))
    checked = [o for o in outcomes if not unavailable(o)]
    return 0 if all(o.passed for o in checked) else 1


def unavailable(outcome: Outcome) -> bool:
    return bool(outcome.errors) and outcome.errors[0].startswith("unavailable")


# --- backends and kernels ------------------------------------------------------------------------------------------


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot be checked here (prefixed "unavailable: "), or None."""
    try:
        package = importlib.import_module(f"lazyops._backends.{backend}")
        reason = getattr(package, "unavailable_reason", lambda: None)()
    except Exception as error:  # noqa: BLE001 - recorded, not raised: one backend must not stop the run
        return f"unavailable: importing lazyops._backends.{backend} failed: {type(error).__name__}: {error}"
    if reason:
        return f"unavailable: {reason}"
    return None


def warm_up(backend: str, kernels: list[str], dtypes: list, sizes: Sizes, threads: int) -> None:
    """Build every factory configuration the cases will ask for, in parallel, so compiles overlap.

    A backend that caches built kernels per configuration (TileLang does, in memory and on disk) then serves the
    cases from its cache; a failure here is ignored, since the case that needs the factory reports it.
    """
    from concurrent.futures import ThreadPoolExecutor

    calls = []
    for kernel in kernels:
        for dtype in dtypes:
            if kernel == "rope":
                calls += [(kernel, (sizes.rope_head_dim, dtype), {"is_neox": neox}) for neox in (True, False)]
            elif kernel == "matmul":
                calls += [(kernel, (n, k, dtype), {}) for n, k in sizes.matmul_shapes]
            else:
                calls += [(kernel, (n, dtype), {}) for n in sizes.hidden]

    def build(call):
        kernel, positional, keywords = call
        try:
            factory(backend, kernel)(*positional, **keywords)
        except Exception:  # noqa: BLE001 - reported by the case that needs it
            pass

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        list(pool.map(build, calls))
    print(f"{backend}: {len(calls)} factories built in {time.perf_counter() - started:.1f} s", flush=True)


def factory(backend: str, kernel: str) -> Callable[..., Any]:
    module = importlib.import_module(f"lazyops._backends.{backend}.{kernel}")
    return getattr(module, f"{kernel}_tl")


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else ""


def tolerance_for(dtype: Any) -> float:
    return TOLERANCE_BY_NAME[str(dtype).removeprefix("torch.")]


def check_kernel(outcome: Outcome, kernel: str, backend: str, dtype: Any, sizes: Sizes, args, cases: list) -> None:
    started = time.perf_counter()
    try:
        make = factory(backend, kernel)
    except Exception as error:  # noqa: BLE001
        outcome.errors.append(f"importing the kernel failed: {type(error).__name__}: {error}")
        return
    for label, run in CASES[kernel](make, dtype, sizes, args.device, args.seed):
        try:
            errors = run()
        except Exception as error:  # noqa: BLE001
            message = f"{label}: {type(error).__name__}: {first_line(error)}"
            outcome.errors.append(message)
            cases.append({"kernel": kernel, "backend": backend, "dtype": outcome.dtype, "case": label,
                          "error": message, "traceback": traceback.format_exc(limit=4)})
            continue
        outcome.cases += 1
        worst = max(errors.values())
        ok = worst <= outcome.tolerance
        outcome.failed += not ok
        if worst >= outcome.worst:
            outcome.worst, outcome.worst_case = worst, label
        cases.append({"kernel": kernel, "backend": backend, "dtype": outcome.dtype, "case": label,
                      "relative_errors": errors, "passed": ok})
    outcome.seconds = time.perf_counter() - started


# --- the cases: each yields (label, run) where run() returns {result name: relative error} ------------------------

Case = Iterator[tuple[str, Callable[[], dict[str, float]]]]


def inputs(device: str, seed: int):
    """A generator on ``device`` and a maker of standard-normal tensors from it."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int, dtype, scale: float = 1.0):
        return (torch.randn(*shape, generator=generator, device=device, dtype=torch.float32) * scale).to(dtype)

    return generator, randn


def poison(shape: tuple[int, ...], dtype, device: str) -> None:
    """Free a NaN-filled block of the output's size just before the call: the kernel's output most likely gets it."""
    import torch

    block = torch.full(shape, float("nan"), dtype=dtype, device=device)
    del block


def relative_error(out, ref) -> float:
    import torch

    out = out.to(torch.float64)
    if not torch.isfinite(out).all():
        return float("inf")
    norm = ref.norm().item()
    diff = (out - ref).norm().item()
    return diff / norm if norm else diff


def row_cases(kernel: str):
    def cases(make, dtype, sizes: Sizes, device: str, seed: int) -> Case:
        from lazyops._backends.torch import add_rmsnorm, rmsnorm, silu_and_mul, softmax

        for n in sizes.hidden:
            built = make(n, dtype)
            for m in sizes.tokens:
                label = f"M={m} n={n}"

                def run(built=built, m=m, n=n) -> dict[str, float]:
                    _, randn = inputs(device, seed + m * 7919 + n)
                    if kernel == "softmax":
                        x = randn(m, n, dtype=dtype, scale=3.0)
                        ref = softmax.softmax_reference(x.double())
                        poison((m, n), dtype, device)
                        return {"y": relative_error(built(x), ref)}
                    if kernel == "rmsnorm":
                        x, w = randn(m, n, dtype=dtype), randn(n, dtype=dtype)
                        ref = rmsnorm.rmsnorm_reference(x.double(), w.double(), 1e-6)
                        poison((m, n), dtype, device)
                        return {"y": relative_error(built(x, w), ref)}
                    if kernel == "add_rmsnorm":
                        x, r, w = randn(m, n, dtype=dtype), randn(m, n, dtype=dtype, scale=4.0), randn(n, dtype=dtype)
                        ref, total = add_rmsnorm.add_rmsnorm_reference(x.double(), r.double(), w.double(), 1e-6)
                        poison((m, n), dtype, device)
                        y = built(x, r, w)
                        return {"y": relative_error(y, ref), "residual": relative_error(r, total)}
                    x = randn(m, 2 * n, dtype=dtype, scale=3.0)
                    ref = silu_and_mul.silu_and_mul_reference(x.double())
                    poison((m, n), dtype, device)
                    return {"y": relative_error(built(x), ref)}

                yield label, run

    return cases


def rope_cases(make, dtype, sizes: Sizes, device: str, seed: int) -> Case:
    import torch

    from lazyops._backends.torch.rope import rope_reference

    head_dim = sizes.rope_head_dim
    query_heads, key_heads = sizes.rope_heads
    for is_neox in (True, False):
        built = make(head_dim, dtype, is_neox=is_neox)
        for rotary in sizes.rope_rotary:
            for cache_dtype in (torch.float32, dtype):
                for m in sizes.tokens:
                    label = f"M={m} r={rotary} neox={is_neox} cache={str(cache_dtype).removeprefix('torch.')}"

                    def run(built=built, m=m, rotary=rotary, cache_dtype=cache_dtype, is_neox=is_neox):
                        generator, randn = inputs(device, seed + m * 31 + rotary)
                        # int64 positions with a float32 cache (vLLM's usual), int32 with a cache in the input dtype.
                        index_dtype = torch.int64 if cache_dtype == torch.float32 else torch.int32
                        positions = torch.randint(
                            0, sizes.cache_rows, (m,), generator=generator, device=device, dtype=index_dtype
                        )
                        query = randn(m, query_heads * head_dim, dtype=dtype)
                        key = randn(m, key_heads * head_dim, dtype=dtype)
                        cache = randn(sizes.cache_rows, rotary, dtype=cache_dtype)
                        query_ref = rope_reference(positions, query.double(), cache.double(), head_dim, is_neox)
                        key_ref = rope_reference(positions, key.double(), cache.double(), head_dim, is_neox)
                        built(positions, query, key, cache)
                        return {"query": relative_error(query, query_ref), "key": relative_error(key, key_ref)}

                    yield label, run


def matmul_cases(make, dtype, sizes: Sizes, device: str, seed: int) -> Case:
    from lazyops._backends.torch.matmul import matmul_reference

    for n, k in sizes.matmul_shapes:
        built = make(n, k, dtype)
        for m in sizes.matmul_tokens:
            label = f"M={m} n={n} k={k}"

            def run(built=built, m=m, n=n, k=k) -> dict[str, float]:
                _, randn = inputs(device, seed + m * 13 + n + k)
                a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
                ref = matmul_reference(a.double(), b.double())
                poison((m, n), dtype, device)
                return {"c": relative_error(built(a, b), ref)}

            yield label, run


CASES = {
    "softmax": row_cases("softmax"),
    "rmsnorm": row_cases("rmsnorm"),
    "add_rmsnorm": row_cases("add_rmsnorm"),
    "silu_and_mul": row_cases("silu_and_mul"),
    "rope": rope_cases,
    "matmul": matmul_cases,
}


# --- results ---------------------------------------------------------------------------------------------------


def describe_environment(torch, device: str) -> dict[str, Any]:
    return {
        **shared_environment(torch, device, "Triton interpreter"),
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", ""),
    }


def summary_line(outcome: Outcome) -> str:
    state = "pass" if outcome.passed else "FAIL"
    extra = f"; {outcome.errors[0]}" if outcome.errors else ""
    return (
        f"{outcome.kernel:>13} {outcome.backend:>8} {outcome.dtype:>8}: {state} {outcome.cases} cases, worst "
        f"{outcome.worst:.2e} ({outcome.worst_case}) in {outcome.seconds:.1f}s{extra}"
    )


def render_markdown(outcomes: list[Outcome], environment: dict[str, Any], elapsed: float) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in environment["versions"].items())
    lines = [
        "# Kernel conformance on a GPU",
        "",
        f"Generated by `{environment['command']}`; do not edit.",
        "",
        f"- date: {environment['date']}",
        f"- device: {environment['device']}",
        f"- versions: {versions}; Python {environment['python']}",
        f"- wall time: {elapsed:.0f} s",
        "",
        "Relative error ‖out − ref‖ / ‖ref‖ against the torch reference in float64; an in-place result counts "
        "as an output. Outputs are allocated over freed NaN-filled blocks, so an unwritten element fails the case.",
        "",
        "| kernel | backend | dtype | result | worst rel. error (tolerance) | cases | worst case |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        if unavailable(o):
            result = "unavailable"
        else:
            result = "pass" if o.passed else f"**FAIL** ({o.failed + len(o.errors)})"
        worst = "—" if not o.cases else f"{o.worst:.2e} ({o.tolerance:.0e})"
        lines.append(f"| {o.kernel} | {o.backend} | {o.dtype} | {result} | {worst} | {o.cases} | {o.worst_case} |")
    problems = [(o, error) for o in outcomes for error in o.errors]
    if problems:
        lines += ["", "## Errors", ""]
        seen: set[str] = set()
        for o, error in problems:
            where = o.backend if error.startswith("unavailable") else f"{o.kernel} {o.backend} {o.dtype}"
            key = f"{where}: {error}"
            if key not in seen:
                seen.add(key)
                lines.append(f"- {key}")
    return "\n".join(lines) + "\n"


def write_results(out: Path, outcomes, cases, environment, elapsed: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_conformance.md").write_text(render_markdown(outcomes, environment, elapsed))
    payload = {
        "environment": environment,
        "elapsed_s": round(elapsed, 1),
        "summary": [asdict(o) | {"passed": o.passed} for o in outcomes],
        "cases": cases,
    }
    (out / "gpu_conformance.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
