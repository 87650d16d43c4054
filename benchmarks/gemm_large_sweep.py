"""GEMM tilings at prefill sizes (M >= 1024), Triton's and TileLang's, timed against cuBLAS: which wins each shape.

Issue 12 asks for TileLang at >= 1.0x cuBLAS and Triton at >= 0.9x on every shape of its grid; at M = 1024 and
8192 (and 8192^3) the product is compute-bound and ``gemm_grid.md`` has TileLang at 0.83-0.96x and Triton at
0.69-0.80x with one large tiling each. What decides the time there is how busy the tensor cores stay: the
``wgmma`` shape each warpgroup issues, how deep the pipeline of loads runs ahead, how the tiles fill the SMs'
last wave, and the epilogue's stores. This script times a small grid of large tilings on the real shapes so
that the backends' rules are set from measurements:

- Triton (``lazyops._backends.triton.matmul``): block shapes 128 x 128, 128 x 256 and 256 x 128 with 64-deep
  k-steps, 4 or 8 warps, 3 or 4 stages, the pointer kernel or the TMA one, persistent (one or two programs an
  SM walking the tiles) or not; ``rule`` is the backend's ``tiling`` as it stands.
- TileLang (``lazyops._backends.tilelang.matmul``): the 128 x 256 x 64 tile with its warpgroups split square
  (two m64n128 ``wgmma`` each, TileLang's default) or by full rows (one m64n256), the result staged in shared
  memory for a TMA store, a block a tile or persistent (``T.Persistent``: one block an SM walking the tiles);
  256 x 128 and 128 x 128 beside it. ``rule`` is the backend's ``matmul_tl``. (The first sweep, in git history,
  also timed stores straight from the accumulators and 4 stages: 0.906-0.920 against 0.976.)

Every candidate's result is checked against ``a.float() @ b.float()`` within the conformance tolerance, then
timed by ``triton.testing.do_bench`` (median, L2 flushed, input sets rotating past the L2), cuBLAS (``a @ b``)
in the same run; results go to ``gemm_large_sweep_<backend>.{json,md}``.

    python3 benchmarks/gemm_large_sweep.py --backend triton --out /tmp/results     # on the GPU
    python3 benchmarks/gemm_large_sweep.py --backend tilelang --out /tmp/results   # TileLang's (wheels first)
    python3 benchmarks/gemm_large_sweep.py --backend triton --dry-run              # the candidates, no GPU
    python3 benchmarks/gemm_large_sweep.py --render benchmarks/results/gemm_large_sweep_triton.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gemm_large_sweep.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from _tilelang_tile import tilelang_tile  # noqa: E402 - benchmarks/ is on sys.path now

#: (M, n, k): issue 12's grid at M = 1024 and 8192, and 8192^3.
SHAPES = (
    *((m, n, k) for m in (1024, 8192) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))),
    (8192, 8192, 8192),
)
#: Input sets rotate until one round holds this much (four times an H200's L2).
ROTATE_BYTES = 256 * 2**20
MAX_SETS = 8


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One tiling. Triton: ``num_warps`` warps; TileLang: ``32 * num_warps`` consumer threads (its producer
    warpgroup comes on top), ``warp_policy`` and ``shared_epilogue`` as in ``tilelang.matmul.Tile``."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    warp_policy: str = "square"
    shared_epilogue: bool = False
    #: Triton only: the TMA kernel (TileLang's large tiles load by TMA anyway)
    tma: bool = False
    #: programs (blocks) an SM when persistent, each walking the tiles; 0: a program a tile
    persistent: int = 0

    @property
    def label(self) -> str:
        extra = ""
        if self.warp_policy != "square":
            extra += f" {self.warp_policy}"
        if self.shared_epilogue:
            extra += " tma-store"
        if self.tma:
            extra += " tma"
        if self.persistent:
            extra += f" persistent x{self.persistent}"
        return f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages}{extra}"


TRITON_CANDIDATES = (
    Candidate(128, 256, 64, 8, 4),
    Candidate(128, 256, 64, 8, 3),
    Candidate(128, 256, 64, 8, 3, tma=True),
    Candidate(128, 256, 64, 8, 3, tma=True, persistent=1),
    Candidate(256, 128, 64, 8, 3, tma=True, persistent=1),
    Candidate(128, 128, 64, 8, 4, tma=True),
    Candidate(128, 128, 64, 8, 4, tma=True, persistent=1),
    Candidate(128, 128, 64, 4, 4, tma=True, persistent=2),
    Candidate(128, 128, 128, 8, 3, tma=True, persistent=1),
)
TILELANG_CANDIDATES = (
    Candidate(128, 256, 64, 8, 3, "full_row", True),
    Candidate(128, 256, 64, 8, 3, "full_row", True, persistent=1),
    Candidate(128, 256, 64, 8, 3, "square", True, persistent=1),
    Candidate(256, 128, 64, 8, 3, "full_row", True, persistent=1),
    Candidate(128, 128, 64, 8, 4, "full_row", True, persistent=1),
)


def candidates(backend: str) -> tuple[Candidate, ...]:
    return TILELANG_CANDIDATES if backend == "tilelang" else TRITON_CANDIDATES


def build(backend: str, n: int, k: int, dtype: Any, candidate: Candidate | None, kernels: dict[Any, Any]) -> Any:
    """``call(a, b) -> c`` for ``candidate`` (None: the backend's rule as it stands). TileLang's binaries come
    from ``kernels`` (compiled together beforehand by :func:`compile_tilelang`)."""
    import torch

    from lazyops import _api

    if candidate is None:
        return _api.kernel_factory(backend, "matmul_tl")(n, k, dtype)
    if backend == "tilelang":
        from lazyops._backends.tilelang._runtime import direct

        launch = direct(kernels[(n, k, candidate)])
    else:
        from lazyops._backends.triton.matmul import Tiling, build_matmul

        fixed = Tiling(
            candidate.block_m,
            candidate.block_n,
            candidate.block_k,
            candidate.num_warps,
            candidate.num_stages,
            tma=candidate.tma,
            persistent=candidate.persistent,
        )
        launch = build_matmul(n, k, dtype, lambda *_: fixed)

    def call(a: Any, b: Any) -> Any:
        out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
        launch(a, b, out)
        return out

    return call


def compile_tilelang(weights: list[tuple[int, int]], dtype: Any) -> tuple[dict[Any, Any], dict[Any, str]]:
    """Every TileLang candidate for every weight shape, compiled side by side by the backend's pool; where that
    fails, one at a time, so that a tiling that does not fit costs only its own rows."""
    import torch

    from lazyops._backends.tilelang import matmul as tilelang_matmul
    from lazyops._backends.tilelang._runtime import compiled, tl_dtype

    name = tl_dtype(dtype)
    sm_count = torch.cuda.get_device_properties().multi_processor_count

    def program(n: int, k: int, candidate: Candidate) -> Any:
        return lambda: tilelang_matmul.matmul_program(n, k, name, tilelang_tile(candidate), sm_count)

    jobs = {(n, k, candidate): program(n, k, candidate) for n, k in weights for candidate in TILELANG_CANDIDATES}
    try:
        return compiled("gemm_large_sweep", jobs), {}
    except Exception:  # noqa: BLE001 - find which ones, below
        pass
    kernels, errors = {}, {}
    for key, make in jobs.items():
        try:
            kernels.update(compiled("gemm_large_sweep", {key: make}))
        except Exception as error:  # noqa: BLE001
            errors[key] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
    return kernels, errors


def draw(torch: Any, m: int, n: int, k: int, dtype: Any, generator: Any) -> tuple[Any, Any]:
    """One input set, unit-variance values scaled so that c stays near 1 (no bf16 overflow at k = 14336)."""
    a = torch.randn(m, k, generator=generator).to(device="cuda", dtype=dtype)
    b = (torch.randn(k, n, generator=generator) / math.sqrt(k)).to(device="cuda", dtype=dtype)
    return a, b


def cublas(a: Any, b: Any) -> Any:
    return a @ b


def median_us(testing: Any, call: Any, sets: list[tuple[Any, Any]]) -> float:
    """``do_bench``'s median of ``call`` (L2 flushed before each call), the input sets taken in turn."""
    calls = 0

    def step() -> None:
        nonlocal calls
        call(*sets[calls % len(sets)])
        calls += 1

    return float(testing.do_bench(step, warmup=25, rep=200, return_mode="median")) * 1e3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("triton", "tilelang"), default="triton")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--dry-run", action="store_true", help="list the candidates and shapes, then stop")
    parser.add_argument("--render", type=Path, help="write the Markdown of a results JSON again")
    parser.add_argument("--tag", help="suffix of the result files' names (gemm_large_sweep_<backend>_TAG)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        payload = json.loads(args.render.read_text())
        args.render.with_suffix(".md").write_text(render(payload))
        return 0
    if args.dry_run:
        for candidate in candidates(args.backend):
            print(candidate.label)
        print(f"{len(candidates(args.backend))} candidates x {len(SHAPES)} shapes: {SHAPES}")
        return 0
    import torch
    from _environment import describe_environment

    from lazyops.specs._checks import canonical_dtype
    from lazyops.testing import TOLERANCE, relative_error

    if not torch.cuda.is_available():
        print("no CUDA device: --dry-run lists what would be timed", file=sys.stderr)
        return 2
    import triton.testing

    out = args.out or Path(tempfile.gettempdir()) / "lazyops-gemm-large-sweep"
    out.mkdir(parents=True, exist_ok=True)
    dtype = canonical_dtype("gemm_large_sweep", args.dtype)
    started = time.perf_counter()
    weights = sorted({(n, k) for _, n, k in SHAPES})
    kernels: dict[Any, Any] = {}
    errors: dict[Any, str] = {}
    if args.backend == "tilelang":
        kernels, errors = compile_tilelang(weights, dtype)
        print(f"compiled {len(kernels)} TileLang programs in {time.perf_counter() - started:.0f} s", flush=True)
    rows: list[dict[str, Any]] = []
    for m, n, k in SHAPES:
        generator = torch.Generator(device="cpu").manual_seed(m * 7 + n * 3 + k)
        first = draw(torch, m, n, k, dtype, generator)
        size = sum(t.numel() * t.element_size() for t in first)
        count = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / size)))
        sets = [first] + [draw(torch, m, n, k, dtype, generator) for _ in range(count - 1)]
        reference = first[0].float() @ first[1].float()
        impls: list[tuple[str, Candidate | None]] = [("cuBLAS", None), ("rule", None)]
        impls += [(candidate.label, candidate) for candidate in candidates(args.backend)]
        cublas_us = None
        for label, candidate in impls:
            row: dict[str, Any] = {"m": m, "n": n, "k": k, "impl": label}
            row["candidate"] = dataclasses.asdict(candidate) if candidate else None
            try:
                if candidate is not None and (n, k, candidate) in errors:
                    raise RuntimeError(errors[(n, k, candidate)])
                call = cublas if label == "cuBLAS" else build(args.backend, n, k, dtype, candidate, kernels)
                with torch.no_grad():
                    row["relative_error"] = relative_error(call(*first), reference)
                    if row["relative_error"] > TOLERANCE[dtype]:
                        raise RuntimeError(f"relative error {row['relative_error']:.2e} > {TOLERANCE[dtype]:.0e}")
                    us = median_us(triton.testing, call, sets)
                row["us"] = us
                row["tflops"] = 2 * m * n * k / (us * 1e-6) / 1e12
                if label == "cuBLAS":
                    cublas_us = us
                row["vs_cublas"] = cublas_us / us if cublas_us else None
            except Exception as error:  # noqa: BLE001 - one failing candidate is a row that says why
                row["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
            rows.append(row)
            ratio = f"{row['vs_cublas']:.3f}x cuBLAS" if row.get("vs_cublas") else row.get("error", "")
            print(f"[{m}, {k}] x [{k}, {n}] {label}: {row.get('us', float('nan')):.1f} us {ratio}", flush=True)
        del sets, first, reference
        torch.cuda.empty_cache()
    environment = describe_environment(torch, "cuda", "")
    command = " ".join(
        ["python3", SCRIPT, "--backend", args.backend, *(["--tag", args.tag] if args.tag else []), "--out", str(out)]
    )
    payload = {
        **environment,
        "backend": args.backend,
        "dtype": str(dtype).removeprefix("torch."),
        "command": command,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    stem = f"gemm_large_sweep_{args.backend}" + (f"_{args.tag}" if args.tag else "")
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    markdown = render(payload)
    (out / f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0


def best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest candidate row (not cuBLAS, not the rule) of one shape's rows."""
    timed = [row for row in rows if row.get("us") and row["candidate"]]
    return min(timed, key=lambda row: row["us"]) if timed else None


def render(payload: dict[str, Any]) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in payload["versions"].items())
    rows = payload["rows"]
    lines = [
        f"# GEMM tilings at prefill sizes: {payload['backend']} against cuBLAS",
        "",
        f"Generated by `{SCRIPT}`: `{payload['command']}`",
        "",
        f"{payload['date']}, {payload['device']}, {payload['dtype']}; {versions}; lazyops at {payload['commit']}. "
        "Medians of `triton.testing.do_bench` (L2 flushed, input sets rotating past the L2), each result checked "
        "against `a.float() @ b.float()` first; `rule` is the backend's tiling rule at that commit. "
        f"{payload['elapsed_s']} s in all.",
        "",
        *([payload["note"], ""] if payload.get("note") else []),
    ]
    shapes = sorted(
        {(row["m"], row["n"], row["k"]) for row in rows},
        key=lambda shape: SHAPES.index(shape) if shape in SHAPES else 99,
    )
    labels = list(dict.fromkeys(row["impl"] for row in rows))
    lines.append("| tiling | " + " | ".join(f"[{m}, {k}] × [{k}, {n}]" for m, n, k in shapes) + " | geomean |")
    lines.append("| --- |" + " ---: |" * (len(shapes) + 1))
    by_key = {(row["m"], row["n"], row["k"], row["impl"]): row for row in rows}
    for label in labels:
        cells, ratios = [], []
        for shape in shapes:
            row = by_key.get((*shape, label))
            if row is None or not row.get("us"):
                cells.append("fails" if row is not None else "")
                continue
            fastest = best([r for r in rows if (r["m"], r["n"], r["k"]) == shape])
            mark = "**" if fastest is row else ""
            cells.append(f"{mark}{row['tflops']:.0f} ({row['vs_cublas']:.2f}×){mark}")
            ratios.append(row["vs_cublas"])
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if len(ratios) == len(shapes) else None
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {'' if geomean is None else f'{geomean:.3f}'} |")
    lines += ["", "TFLOP/s (× cuBLAS); bold: the fastest candidate of the column.", ""]
    failures = [row for row in rows if row.get("error")]
    if failures:
        lines += ["Failures:", ""]
        lines += [f"- [{r['m']}, {r['k']}] × [{r['k']}, {r['n']}] {r['impl']}: {r['error']}" for r in failures]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
