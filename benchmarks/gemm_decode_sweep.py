"""GEMM tilings at decode sizes (Triton's or TileLang's), timed inside CUDA graphs against cuBLAS: which wins each cell.

Issue 12 asks for Triton at >= 0.9x cuBLAS and TileLang at >= 1.0x at every cell of the grid; at M <= 128 the
product is a stream over the weight ``b`` and what decides the time is how many bytes of ``b`` each SM keeps in
flight (tile width, k-step, pipeline stages, programs per SM) and whether split-K's second launch pays for the
SMs it fills. ``lazyops._backends.triton.matmul.tiling`` picks one tiling per token bucket from a model
(``benchmarks/NOTES.md``); this script times every candidate of a small grid on the real weights so the rule can
be set from measurements, not the model:

- bucket "decode" (M = 1 and 16, one binary: M is not specialized): 16-row tiles (``mma``), block_n in
  {32, 64, 128}, block_k in {128, 256}, 3-5 stages, 4 warps, split-K in {1, 2, 3, 4, 6, 8};
- bucket "small" (M = 128): 64-row tiles, block_n in {32, 64, 128}, block_k in {64, 128, 256}, 3-6 stages, split-K
  in {1, 2, 3, 4, 6, 8} (block_n 32, 256-deep steps and 5-6 stages for the narrow-tile runs, ``--tag narrow``,
  ``--tag narrow32``).

``--backend tilelang`` times TileLang's programs the same way (``lazyops._backends.tilelang.matmul``: the plain
tiled program for split 1, the split-K product and its reduce otherwise), on a smaller grid since each TileLang
program takes seconds to compile (compiled side by side by the backend's own thread pool): 16-row tiles with
block_n in {32, 64, 128, 256}, 128- and 256-deep k-steps, 3-6 stages, split in {1, 2, 4, 8} (32 columns, 256-deep
steps and 5-6 stages for ``--tag narrow16``); 64-row tiles with block_n in
{32, 64, 112, 128, 256}, 64- to 256-deep k-steps, 3-6 stages, split in {1, 2, 4, 8} (8 added after the 2026-12-01
run, which had {1, 2, 4}; block_n 32 and 64, 256-deep steps and 5-6 stages for the narrow-tile runs, ``--tag
narrow``, ``--tag narrow32``; 112, which makes 14336 columns 128 tiles, for ``--tag cols112``). ``rule`` is then the
backend's ``matmul_tl`` as it stands. Results go to ``gemm_decode_sweep_tilelang.{json,md}``; ``--dry-run``
lists the candidates.

Candidates are compiled first by ``--jobs`` worker processes (Triton's on-disk cache then serves the timing
process), each candidate's result checked against ``a.float() @ b.float()`` within the conformance tolerance,
then timed per call in a CUDA graph (20 calls captured, rotating input sets past the L2, replayed 10 times;
``lazyops._bench.graph_us``), cuBLAS (``a @ b``) and today's rule (``tiling``) timed in the same run.

    python3 benchmarks/gemm_decode_sweep.py --out /tmp/results          # H200: gemm_decode_sweep.{json,md}
    python3 benchmarks/gemm_decode_sweep.py --backend tilelang --out /tmp/results   # TileLang's (wheels first)
    python3 benchmarks/gemm_decode_sweep.py --device cpu --small        # this script's logic (interpreter)
    python3 benchmarks/gemm_decode_sweep.py --render benchmarks/results/gemm_decode_sweep.json   # the .md again
    python3 benchmarks/gemm_decode_sweep.py --backend tilelang --small-tokens 64,128 --out DIR   # M = 64 as well
    python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-tokens 64,128 \
        --shared-epilogue --out DIR      # the 64-row tilings storing through shared memory (TMA)
    python3 benchmarks/gemm_decode_sweep.py --buckets small --small-rows 64,128 --tag rows128 --out DIR
        # 128-row tiles beside the 64-row ones at M = 128 (either backend)
    python3 benchmarks/gemm_decode_sweep.py --tma --tag tma --out DIR   # Triton's TMA kernel on the same grid
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gemm_decode_sweep.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from _tilelang_tile import tilelang_tile  # noqa: E402 - benchmarks/ is on sys.path now

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
SMALL_SHAPES = ((128, 256), (64, 512))
BUCKETS = {"decode": (1, 16), "small": (128,)}
SMALL_BUCKETS = {"decode": (1, 5), "small": (40,)}
ROTATE_BYTES = 256 * 2**20
#: shared memory a block may use on a Hopper (227 KiB), less room for the epilogue
SHARED_LIMIT = 200 * 1024


@dataclasses.dataclass(frozen=True)
class Candidate:
    bucket: str
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    split: int
    #: TileLang only: the result (or split-K's float32 partial) staged in shared memory for a TMA store
    shared_epilogue: bool = False
    #: Triton only: the TMA kernel (loads, and the partials' or result's store, by tensor descriptors)
    tma: bool = False

    @property
    def label(self) -> str:
        label = f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages} split {self.split}"
        return label + (" tma-store" if self.shared_epilogue else "") + (" tma" if self.tma else "")


def candidates(
    n: int,
    k: int,
    small: bool,
    backend: str = "triton",
    shared_epilogue: bool = False,
    small_rows: tuple[int, ...] = (64,),
    tma: bool = False,
) -> list[Candidate]:
    """The grid for one weight shape, without tilings that do not fit or split k into slices too short.
    (For TileLang ``num_warps`` is the block's threads / 32: one warpgroup of 128 threads; ``shared_epilogue``
    stages every TileLang candidate's result in shared memory, counted as float32 against the limit.)
    ``small_rows``: the row blocks of the "small" bucket; 128-row tiles (the whole of M = 128 in one block, so each
    slice of the weight is read once) take 8 warps, two warpgroups, and block_n in {64, 128}."""
    found = []
    grids: list[tuple[str, tuple[Any, ...]]] = [
        ("decode", (16, (32, 64, 128), (128, 256), (4,), (3, 4, 5), (1, 2, 3, 4, 6, 8))),
        ("small", (64, (32, 64, 128), (64, 128, 256), (4,), (3, 4, 5, 6), (1, 2, 3, 4, 6, 8))),
    ]
    wide_rows = ("small", (128, (64, 128), (64,), (8,), (3, 4), (1, 2, 4)))
    if backend == "tilelang":
        grids = [
            ("decode", (16, (32, 64, 128, 256), (128, 256), (4,), (3, 4, 5, 6), (1, 2, 4, 8))),
            ("small", (64, (32, 64, 112, 128, 256), (64, 128, 256), (4,), (3, 4, 5, 6), (1, 2, 4, 8))),
        ]
        wide_rows = ("small", (128, (32, 64, 112, 128), (64, 128), (8,), (3, 4, 5), (1, 2, 4)))
    if small:
        grids = [
            ("decode", (16, (32, 64), (32, 64), (4,), (2, 3), (1, 2, 3))),
            ("small", (16, (32,), (32,), (4,), (2,), (1, 2))),
        ]
        wide_rows = ("small", (32, (32,), (32,), (4,), (2,), (1, 2)))
    if 128 in small_rows:
        grids.append(wide_rows)
    if 64 not in small_rows:
        grids = [(bucket, grid) for bucket, grid in grids if bucket != "small" or grid is wide_rows[1]]
    for bucket, (block_m, widths, depths, warps, stages, splits) in grids:
        for block_n, block_k, num_warps, num_stages, split in itertools.product(widths, depths, warps, stages, splits):
            if block_n > n or block_k > k:
                continue
            staged = block_m * block_n * 4 if shared_epilogue or tma else 0
            if num_stages * (block_m + block_n) * block_k * 2 + staged > SHARED_LIMIT:
                continue
            steps = -(-k // block_k)
            if split > 1 and (steps // split < 2 or k_slice(k, block_k, split) * (split - 1) >= k):
                continue
            found.append(
                Candidate(bucket, block_m, block_n, block_k, num_warps, num_stages, split, shared_epilogue, tma)
            )
    return found


def k_slice(k: int, block_k: int, split: int) -> int:
    """The slice length ``tiling`` would give ``split`` slices: whole k-steps, the last slice the shortest."""
    steps = -(-k // block_k)
    return -(-steps // split) * block_k


def tiling_of(candidate: Candidate, k: int) -> Any:
    from lazyops._backends.triton.matmul import Tiling

    slice_length = k_slice(k, candidate.block_k, candidate.split) if candidate.split > 1 else 0
    split = -(-k // slice_length) if slice_length else 1
    return Tiling(
        candidate.block_m,
        candidate.block_n,
        candidate.block_k,
        candidate.num_warps,
        candidate.num_stages,
        split,
        slice_length,
        tma=candidate.tma,
    )


def build(n: int, k: int, dtype: Any, candidate: Candidate | None, backend: str = "triton") -> Any:
    """The launch for ``candidate`` (None: today's rule, ``tiling``), as ``call(a, b) -> c``."""
    import torch

    if backend == "tilelang":
        return build_tilelang(n, k, dtype, candidate)

    from lazyops._backends.triton.matmul import build_matmul, tiling

    fixed = tiling_of(candidate, k) if candidate else None
    launch = build_matmul(n, k, dtype, (lambda *_: fixed) if fixed else tiling)

    def call(a: Any, b: Any) -> Any:
        out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
        launch(a, b, out)
        return out

    return call


def tilelang_programs(n: int, k: int, dtype: Any, candidate: Candidate) -> dict[tuple[Any, ...], Any]:
    """The TileLang programs of ``candidate``, by variant key: the tiled program for split 1, else the split-K
    product over slices of whole k-steps and its reduce."""
    from lazyops._backends.tilelang import matmul as tilelang_matmul
    from lazyops._backends.tilelang._runtime import tl_dtype

    name = tl_dtype(dtype)
    tile = tilelang_tile(candidate)
    if candidate.split == 1:
        return {("plain", name, n, k, tile): lambda: tilelang_matmul.matmul_program(n, k, name, tile)}
    plan = tilelang_plan(k, candidate)
    return {
        ("split", name, n, k, plan): lambda: tilelang_matmul.split_k_program(n, k, name, plan),
        ("reduce", name, n, plan.split): lambda: tilelang_matmul.reduce_program(n, name, plan.split),
    }


def tilelang_plan(k: int, candidate: Candidate) -> Any:
    from lazyops._backends.tilelang import matmul as tilelang_matmul

    tile = tilelang_tile(candidate)
    k_steps = -(-k // candidate.block_k)
    steps = -(-k_steps // candidate.split)
    return tilelang_matmul.SplitK(tile, steps, -(-k_steps // steps), 16 if candidate.bucket == "decode" else 128)


def build_tilelang(n: int, k: int, dtype: Any, candidate: Candidate | None) -> Any:
    """TileLang's launch for ``candidate`` (None: the backend's ``matmul_tl``), compiled once in this process."""
    import torch

    from lazyops import _api
    from lazyops._backends.tilelang._runtime import compiled, direct

    if candidate is None:
        return _api.kernel_factory("tilelang", "matmul_tl")(n, k, dtype)
    kernels = [
        direct(kernel) for kernel in compiled("gemm_decode_sweep", tilelang_programs(n, k, dtype, candidate)).values()
    ]
    if candidate.split == 1:
        (plain,) = kernels

        def call(a: Any, b: Any) -> Any:
            out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
            plain(a, b, out)
            return out

        return call
    product, reduce = kernels
    split = tilelang_plan(k, candidate).split

    def call_split(a: Any, b: Any) -> Any:
        out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
        partial = torch.empty((split, a.shape[0], n), dtype=torch.float32, device=a.device)
        product(a, b, partial)
        reduce(partial, out)
        return out

    return call_split


def compile_tilelang(jobs: list[tuple[int, int, str, str, Candidate]]) -> dict[tuple[int, int, Candidate], str]:
    """Every candidate's programs compiled in one call of the backend's ``compiled`` (its thread pool compiles
    them side by side); where that fails, one candidate at a time, so that one bad tiling costs only its rows."""
    import torch

    from lazyops._backends.tilelang._runtime import compiled

    everything: dict[tuple[Any, ...], Any] = {}
    for n, k, dtype_name, _, candidate in jobs:
        everything.update(tilelang_programs(n, k, getattr(torch, dtype_name), candidate))
    try:
        compiled("gemm_decode_sweep", everything)
        return {}
    except Exception:  # noqa: BLE001 - find which ones, below
        pass
    errors = {}
    for n, k, dtype_name, _, candidate in jobs:
        try:
            compiled("gemm_decode_sweep", tilelang_programs(n, k, getattr(torch, dtype_name), candidate))
        except Exception as error:  # noqa: BLE001
            errors[(n, k, candidate)] = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    return errors


def compile_one(job: tuple[int, int, str, str, Candidate]) -> str | None:
    """Worker: compile ``candidate`` by running it once on real-shaped inputs (M is not specialized, so one
    token's call compiles the binary every token count of its bucket uses). Returns an error line or None."""
    n, k, dtype_name, device, candidate = job
    import torch

    dtype = getattr(torch, dtype_name)
    try:
        a = torch.randn(1, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        build(n, k, dtype, candidate)(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - a candidate that fails is reported, not fatal
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--backend", choices=("triton", "tilelang"), default="triton")
    parser.add_argument("--dry-run", action="store_true", help="list the candidates and exit")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--render", type=Path, help="write the Markdown of this result JSON beside it, time nothing")
    parser.add_argument(
        "--shared-epilogue", action="store_true", help="TileLang: every candidate stores through shared memory (TMA)"
    )
    parser.add_argument("--buckets", help="only these buckets, comma-separated (decode, small)")
    parser.add_argument(
        "--small-rows",
        default="64",
        help="row blocks of the small bucket's tiles, comma-separated (64, 128; --small: 128 means 32)",
    )
    parser.add_argument("--tag", help="suffix of the result files' names (gemm_decode_sweep[_backend]_TAG)")
    parser.add_argument("--tma", action="store_true", help="Triton: every candidate on the TMA kernel")
    parser.add_argument(
        "--only", help="only candidates whose label starts with one of these, comma-separated (e.g. '16x128x128 w4 s4')"
    )
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop timing new shapes after this long")
    parser.add_argument(
        "--small-tokens",
        help=f"token counts of the 64-row bucket (default {','.join(map(str, BUCKETS['small']))}; "
        "64,128 times the M <= 64 decode batches too)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        payload = json.loads(args.render.read_text())
        args.render.with_suffix(".md").write_text(render(payload))
        return 0
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    from _environment import describe_environment

    from lazyops import _bench
    from lazyops.testing import TOLERANCE, relative_error

    out = args.out or Path(tempfile.gettempdir()) / "lazyops-gemm-sweep"
    out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    started = time.perf_counter()
    shapes = SMALL_SHAPES if args.small else SHAPES
    buckets = dict(SMALL_BUCKETS if args.small else BUCKETS)
    if args.small_tokens:
        buckets["small"] = tuple(int(m) for m in args.small_tokens.split(","))
    if args.buckets:
        buckets = {name: tokens for name, tokens in buckets.items() if name in args.buckets.split(",")}

    def grid(n: int, k: int) -> list[Candidate]:
        rows = tuple(int(r) for r in args.small_rows.split(","))
        found = candidates(n, k, args.small, args.backend, args.shared_epilogue, rows, args.tma)
        prefixes = tuple(args.only.split(",")) if args.only else ("",)
        return [c for c in found if c.bucket in buckets and c.label.startswith(prefixes)]

    jobs = [(n, k, args.dtype, args.device, c) for n, k in shapes for c in grid(n, k)]
    if args.dry_run:
        for n, k, _, _, candidate in jobs:
            print(f"n={n} k={k} {candidate.bucket}: {candidate.label}")
        print(f"{len(jobs)} {args.backend} candidates")
        return 0
    if args.backend == "tilelang" and args.device != "cuda":
        print("TileLang's programs run on a CUDA device only: --dry-run lists them here", file=sys.stderr)
        return 2
    print(f"{len(jobs)} candidates; compiling with {args.jobs} processes", flush=True)
    compile_errors: dict[tuple[int, int, Candidate], str] = {}
    if args.backend == "tilelang":
        compile_errors = compile_tilelang(jobs)
    elif args.device == "cuda" and args.jobs > 1:
        import multiprocessing

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for job, error in zip(jobs, pool.map(compile_one, jobs, chunksize=2), strict=True):
                if error:
                    compile_errors[(job[0], job[1], job[4])] = error
    compiled_s = time.perf_counter() - started
    print(f"compiled in {compiled_s:.0f} s, {len(compile_errors)} failed", flush=True)

    rows: list[dict[str, Any]] = []
    generator = torch.Generator(device="cpu").manual_seed(0)
    for n, k in shapes:
        if time.perf_counter() - started > args.budget_s:
            print(f"budget spent: {n}x{k} not timed", flush=True)
            break
        for bucket, tokens in buckets.items():
            entries: list[tuple[str, Candidate | None]] = [("cuBLAS", None), ("rule", None)]
            entries += [(c.label, c) for c in grid(n, k) if c.bucket == bucket]
            for m in tokens:
                first = draw(torch, m, n, k, dtype, args.device, generator)
                size = sum(t.numel() * t.element_size() for t in first)
                count = max(1, min(64, math.ceil(ROTATE_BYTES / size))) if args.device == "cuda" else 1
                sets = [first] + [draw(torch, m, n, k, dtype, args.device, generator) for _ in range(count - 1)]
                reference = first[0].float() @ first[1].float()
                for name, candidate in entries:
                    row: dict[str, Any] = {"m": m, "n": n, "k": k, "bucket": bucket, "impl": name}
                    if candidate is not None:
                        row.update(dataclasses.asdict(candidate))
                    if candidate is not None and (n, k, candidate) in compile_errors:
                        row["error"] = compile_errors[(n, k, candidate)]
                        rows.append(row)
                        continue
                    try:
                        call = (lambda a, b: a @ b) if name == "cuBLAS" else build(n, k, dtype, candidate, args.backend)
                        with torch.no_grad():
                            row["relative_error"] = float(relative_error(call(*first), reference))
                        if row["relative_error"] > TOLERANCE[dtype]:
                            row["error"] = f"relative error {row['relative_error']:.2e}"
                        elif args.device == "cuda":
                            row["graph_us"] = _bench.graph_us(call, sets, captures=20, replays=10)
                            row["b_gbps"] = k * n * dtype.itemsize / (row["graph_us"] * 1e-6) / 1e9
                    except Exception as error:  # noqa: BLE001
                        row["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
                    rows.append(row)
                print(summary(rows, m, n, k), flush=True)
                del sets, first, reference
            if args.device == "cuda":
                torch.cuda.empty_cache()
    elapsed = time.perf_counter() - started
    payload = {
        **describe_environment(torch, args.device, "Triton interpreter; timings meaningless"),
        "dtype": args.dtype,
        "compile_s": round(compiled_s, 1),
        "elapsed_s": round(elapsed, 1),
        "rows": rows,
        "backend": args.backend,
    }
    stem = "gemm_decode_sweep" if args.backend == "triton" else f"gemm_decode_sweep_{args.backend}"
    if args.tag:
        stem += f"_{args.tag}"
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    markdown = render(payload)
    (out / f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0


def draw(torch: Any, m: int, n: int, k: int, dtype: Any, device: str, generator: Any) -> tuple[Any, Any]:
    a = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
    b = (torch.randn(k, n, generator=generator) / math.sqrt(k)).to(device=device, dtype=dtype)
    return a, b


def cell(rows: list[dict[str, Any]], m: int, n: int, k: int) -> list[dict[str, Any]]:
    return [r for r in rows if (r["m"], r["n"], r["k"]) == (m, n, k)]


def summary(rows: list[dict[str, Any]], m: int, n: int, k: int) -> str:
    here = cell(rows, m, n, k)
    timed = sorted((r for r in here if r.get("graph_us")), key=lambda r: r["graph_us"])
    by_name = {r["impl"]: r for r in here}
    cublas, rule = by_name.get("cuBLAS", {}).get("graph_us"), by_name.get("rule", {}).get("graph_us")
    best = next((r for r in timed if r["impl"] not in ("cuBLAS", "rule")), None)
    failed = sum(1 for r in here if r.get("error"))
    text = f"M={m} n={n} k={k}: cuBLAS {fmt(cublas)} µs, rule {fmt(rule)} µs"
    if best:
        text += f", best {best['impl']} {best['graph_us']:.2f} µs"
        if cublas:
            text += f" ({cublas / best['graph_us']:.2f}x cuBLAS)"
    return text + (f"; {failed} failed" if failed else "")


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render(payload: dict[str, Any]) -> str:
    rows = payload["rows"]
    backend = payload.get("backend", "triton")
    flag = "" if backend == "triton" else f" --backend {backend}"
    default_command = f"python3 {SCRIPT}{flag} --out /tmp/results"
    rule_text = "`tiling()`" if backend == "triton" else "the backend's `matmul_tl`"
    title = "Triton" if backend == "triton" else "TileLang"
    lines = [
        f"# {title} GEMM tilings at decode sizes, in CUDA graphs, against cuBLAS",
        "",
        f"Generated by `benchmarks/gemm_decode_sweep.py`: `{payload.get('command') or default_command}`",
        "",
        f"{payload['date']}, {payload['device']}, {payload['dtype']}; "
        f"{', '.join(f'{name} {version}' for name, version in payload['versions'].items())}; lazyops at "
        f"{payload['commit']}. µs per call inside a CUDA graph (20 calls captured, input sets rotating past the "
        "L2, replayed 10 times); `b GB/s` is the weight's k*n*2 bytes over that time. `rule` is "
        f"{rule_text} as it was at that commit. Compiled in {payload['compile_s']} s, {payload['elapsed_s']} s in all.",
        "",
        "## Best per cell",
        "",
        "| M | n | k | cuBLAS µs | rule µs | rule × cuBLAS | best tiling | best µs | best × cuBLAS | best b GB/s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    cells = sorted({(r["m"], r["n"], r["k"]) for r in rows}, key=lambda c: (c[1], c[2], c[0]))
    for m, n, k in cells:
        here = cell(rows, m, n, k)
        by_name = {r["impl"]: r for r in here}
        cublas = by_name.get("cuBLAS", {}).get("graph_us")
        rule = by_name.get("rule", {}).get("graph_us")
        timed = sorted(
            (r for r in here if r.get("graph_us") and r["impl"] not in ("cuBLAS", "rule")), key=lambda r: r["graph_us"]
        )
        best = timed[0] if timed else {}

        def ratio(us: float | None, cublas: float | None = cublas) -> str:
            return f"{cublas / us:.2f}" if cublas and us else "—"

        lines.append(
            f"| {m} | {n} | {k} | {fmt(cublas)} | {fmt(rule)} | {ratio(rule)} | {best.get('impl', '—')} | "
            f"{fmt(best.get('graph_us'))} | {ratio(best.get('graph_us'))} | "
            f"{best.get('b_gbps', 0):.0f} |"
        )
    lines += [
        "",
        "## Every candidate",
        "",
        "| M | n | k | tiling | µs | × cuBLAS | error |",
        "| ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for m, n, k in cells:
        here = cell(rows, m, n, k)
        cublas = next((r.get("graph_us") for r in here if r["impl"] == "cuBLAS"), None)
        for r in sorted(here, key=lambda r: r.get("graph_us") or math.inf):
            us = r.get("graph_us")
            lines.append(
                f"| {m} | {n} | {k} | {r['impl']} | {fmt(us)} | {f'{cublas / us:.2f}' if cublas and us else '—'} | "
                f"{r.get('error', '')} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
