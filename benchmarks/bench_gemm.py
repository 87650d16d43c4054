"""GEMM against cuBLAS at a decoder's token counts: the grid, and (``--sweep``) a backend's candidate tilings.

    python benchmarks/bench_gemm.py                        # on the H200: results/h200/gemm.{md,json}
    python benchmarks/bench_gemm.py --device cpu --backend torch --shapes 1024x1024 --tokens 1,128,1024 --no-cube
    python benchmarks/bench_gemm.py --sweep tilelang --tokens 1,16 --shapes 4096x4096 --name narrow16 --tiles \\
        'block_m=16,block_n=64,block_k=128,stages=6,threads=128;block_m=16,block_n=128,block_k=128,stages=4,split=4'
    python benchmarks/bench_gemm.py --smoke --device cpu --out /tmp/g     # the script's logic, tiny shapes
    python benchmarks/bench_gemm.py --fp8 tensor,rowwise,block --name fp8_gemm   # matmul_fp8_tl (issue 35)

The grid: M in ``--tokens`` (1, 16, 128, 1024, 8192) times ``[M, k] @ [k, n]`` for (n, k) in ``--shapes``
(Llama-3-8B's projections), plus 8192^3, in bfloat16: cuBLAS (``a @ b``) and each backend's ``matmul_tl``, each
cell checked against ``a.float() @ b.float()`` first, then timed interleaved: stream time (inputs rotating through
256 MiB), TFLOP/s and × cuBLAS; up to ``--graph-max`` tokens (128), where a GEMM is bound by reading its weight,
also that read in GB/s and the time per call inside a CUDA graph (what decode pays).

``--sweep BACKEND --tiles 'T;T;...'``: each tiling ``T`` (the backend's own tile fields as ``key=value,...``, and
``split``, the k-slices) timed in CUDA graphs beside the backend's rule and cuBLAS at every cell:
``results/<device>/sweeps/<--name>.{md,json}``.

``--fp8 SCALES``: ``matmul_fp8_tl`` (float8 e4m3 ``a[M, k]`` and ``b[n, k]``, bfloat16 out) with each scale kind of
the comma list instead, against ``torch._scaled_mm`` (cuBLASLt; per-tensor and rowwise) and the bfloat16 GEMM of
the dequantised operands (the peer of block scales), each checked against the float32 dequantised product. With
``--sweep triton``, ``--tiles`` are rows of ``configs/matmul_fp8.json`` (``block_m,block_n,num_warps,num_stages``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import bench_harness as harness

ROTATE_BYTES = 256 * 2**20
MAX_SETS = 64


Cell = namedtuple("Cell", "m n k dtype scales", defaults=("",))  # [m, k] @ [k, n] in dtype (a name); fp8 scales


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--tokens", help="comma list of M (default 1,16,128,1024,8192)")
    parser.add_argument("--shapes", help="comma list of NxK weights (default 4096x4096,14336x4096,4096x14336)")
    parser.add_argument("--no-cube", dest="cube", action="store_false", help="leave out 8192^3")
    parser.add_argument("--graph-max", type=int, default=128, help="CUDA-graph time up to this M (default 128)")
    parser.add_argument("--dtypes", default="bfloat16", help="comma list (default bfloat16)")
    parser.add_argument("--sweep", metavar="BACKEND", help="time --tiles of this backend (triton or tilelang)")
    parser.add_argument("--tiles", default="", help="';'-separated tilings, each 'field=value,...' (with --sweep)")
    parser.add_argument("--name", help="the result files' stem (default gemm; a sweep: sweeps/<backend>)")
    parser.add_argument("--fp8", default="", help="comma list of matmul_fp8_tl scale kinds (tensor,rowwise,block)")
    options = parser.parse_args(argv)
    device = harness.start(options)
    import torch

    from lazyops.testing import TOLERANCE

    cuda = device.startswith("cuda")
    tokens = [int(m) for m in (options.tokens or ("1,16,40" if options.smoke else "1,16,128,1024,8192")).split(",")]
    shapes = options.shapes or ("128x128,256x128" if options.smoke else "4096x4096,14336x4096,4096x14336")
    cells = []
    for dtype in options.dtypes.split(","):
        cells += [Cell(m, *map(int, shape.split("x")), dtype) for shape in shapes.split(",") for m in tokens]
        if options.fp8:  # the fp8 GEMM's cells instead, bfloat16 out
            cells = [Cell(*cell[:3], "bfloat16", s) for s in options.fp8.split(",") for cell in cells if not cell[4]]
        elif options.cube and not options.smoke:
            cells.append(Cell(8192, 8192, 8192, dtype))
    status = harness.backends(options.backend or ("torch" if not cuda else None))
    peer = "cuBLAS" if cuda else "a @ b"  # torch's own GEMM: cuBLAS on CUDA, oneDNN or a loop on a CPU
    cases = [Case(peer, "peer", lambda n, k, dtype: lambda a, b: a @ b)]
    cases += [Case(f"lazyops {backend}", "lazyops", _matmul(backend, problem)) for backend, problem in status.items()]
    tiles = [_tile(text) for text in options.tiles.split(";") if text.strip()]
    if tiles and not options.sweep:
        sys.exit("--tiles needs --sweep BACKEND: whose tilings they are")
    fp8_cases = _fp8_cases(status)
    for tile in tiles:
        build = functools.cache(lambda n, k, dtype, t=tile: harness.tiled_matmul(options.sweep, n, k, dtype, t))
        cases.append(Case(" ".join(f"{key}={value}" for key, value in tile.items()), "candidate", build, tile))
        fp8_cases.append(dataclasses.replace(cases[-1], build=_fp8_tiled(options.sweep, tile)))
    env = (
        harness.environment(device, status)
        | ({"fp8": options.fp8} if options.fp8 else {})
        | {"peer": "torch._scaled_mm (block: bf16 cuBLAS)" if options.fp8 else peer}
    )
    env["tolerance"] = {name: TOLERANCE[getattr(torch, name)] for name in options.dtypes.split(",")}
    out, name = options.out, options.name or "gemm"
    if options.sweep:
        out, name = out / "sweeps", options.name or options.sweep
    rows: list[dict[str, Any]] = []
    for cell in cells:
        dtype = getattr(torch, cell.dtype)
        fp8 = bool(cell.scales)
        here = [c for c in fp8_cases if c.kind != "fp8 peer" or cell.scales != "block"] if cell.scales else cases
        sets = (_fp8_sets if cell.scales else _input_sets)(cell, dtype, device, ROTATE_BYTES if cuda else 0)
        reference, tolerance = _reference(cell, sets[0], TOLERANCE[dtype])
        timed = [
            harness.Case(c.name, c.kind, lambda cell, c=c, s=sets, f=fp8: (c.build(*cell[1:4], *cell[4:5] * f), s))
            for c in here
        ]
        check = functools.partial(_judge, reference=reference, tolerance=tolerance)
        graphs = (
            harness.measure(timed, cell, "graph", device, check=check) if cuda and cell.m <= options.graph_max else {}
        )
        stream = {} if options.sweep and graphs else harness.measure(timed, cell, "stream", device, check=check)
        rows += _compare([_row(cell, case, stream.get(case.name), graphs.get(case.name), dtype) for case in here])
        del sets, reference
        harness.release(device)
        written = harness.write(out, name, TITLE, env, rows, _render(rows, env, options.graph_max))
    print(f"wrote {written} and its .json")
    return 0


TITLE = "GEMM against cuBLAS"


@dataclass(frozen=True)
class Case:
    """One implementation: ``build(n, k, dtype) -> call(a, b)``, cached: built once per weight and dtype; ``tile``:
    a sweep's tiling."""

    name: str
    kind: str
    build: Any
    tile: dict[str, Any] | None = None


def _judge(case: Any, got: Any, reference: Any, tolerance: float) -> None:
    harness.judge([got], [reference], tolerance)


def _matmul(backend: str, problem: str | None, fp8: bool = False) -> Any:
    @functools.cache
    def build(n: int, k: int, dtype: str, scales: str = "") -> Any:
        if problem:
            raise RuntimeError(f"unavailable: {problem}")
        if not fp8:
            return harness.factory(backend, "matmul_tl")(n, k, dtype)
        kernel = harness.factory(backend, "matmul_fp8_tl")(n, k, dtype, scales)
        return lambda a, b, scale_a, scale_b, *dequantised: kernel(a, b, scale_a, scale_b)

    return build


def _fp8_tiled(backend: str, tile: dict[str, Any]) -> Any:
    """A ``--sweep`` candidate on the fp8 cells: ``matmul_fp8_tl``'s kernel on one tile (Triton's ``FP8Tile``)."""

    @functools.cache
    def build(n: int, k: int, dtype: str, scales: str) -> Any:
        call = harness.tiled_matmul(backend, n, k, dtype, {**tile, "scales": scales})
        return lambda a, b, scale_a, scale_b, *dequantised: call(a, b, scale_a, scale_b)

    return build


def _fp8_cases(status: dict[str, str | None]) -> list[Case]:
    """The fp8 cells' implementations (each takes ``a, b, scale_a, scale_b, a16, b16``): torch._scaled_mm (the peer
    of per-tensor and rowwise scales), the bfloat16 GEMM of the dequantised operands, and each backend's kernel."""
    import torch

    def scaled_mm(n: int, k: int, dtype: str, scales: str) -> Any:
        def call(a: Any, b: Any, scale_a: Any, scale_b: Any, *dequantised: Any) -> Any:
            scale_b = scale_b.reshape(1, -1) if scale_a.dim() == 2 else scale_b
            return torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)

        return call

    bf16 = Case("bf16 GEMM (a16 @ b16.T)", "bf16", lambda n, k, dtype, scales: lambda *args: args[4] @ args[5].T)
    cases = [Case("torch._scaled_mm", "fp8 peer", scaled_mm), bf16]
    return cases + [
        Case(f"lazyops {backend}", "lazyops", _matmul(backend, why, fp8=True)) for backend, why in status.items()
    ]


def _fp8_sets(cell: Cell, dtype: Any, device: str, rotate: int) -> list[tuple[Any, ...]]:
    """Input sets ``(a, b, scale_a, scale_b, a16, b16)``: float8 operands, power-of-two scales of ``cell.scales``'s
    shapes (c stays near 1), and the dequantised operands in bfloat16 (exact: 4 significant bits times 2**e)."""
    import torch

    from lazyops.specs.matmul_fp8 import dequantised, scale_shapes, spec

    config = spec.bind(cell.n, cell.k, dtype, cell.scales)
    generator = torch.Generator().manual_seed(cell.m * 7 + cell.n * 3 + cell.k)
    shape_a, shape_b = scale_shapes(config, cell.m)
    b_scale = 2.0 ** -round(math.log2(32 * math.sqrt(cell.k)))

    def draw() -> tuple[Any, ...]:
        a = (torch.randn(cell.m, cell.k, generator=generator) * 32).to(device=device, dtype=torch.float8_e4m3fn)
        b = (torch.randn(cell.n, cell.k, generator=generator) * 32).to(device=device, dtype=torch.float8_e4m3fn)
        scales = torch.full(shape_a, 1 / 32, device=device), torch.full(shape_b, b_scale, device=device)
        return (a, b, *scales, *(t.to(dtype) for t in dequantised(config, a, b, *scales)))

    size = (cell.m + cell.n) * cell.k * 3
    return [draw() for _ in range(max(1, min(MAX_SETS, math.ceil(rotate / size))) if rotate else 1)]


def _reference(cell: Cell, first: tuple[Any, ...], tolerance: float) -> tuple[Any, float]:
    """What the cell's results are checked against, and within what: the float32 product (of the dequantised
    operands for an fp8 cell, within ``matmul_fp8_tl``'s tolerance at this k)."""
    if not cell.scales:
        return first[0].float() @ first[1].float(), tolerance
    from lazyops.specs.matmul_fp8 import spec

    return first[4].float() @ first[5].float().T, spec.tolerance(spec.bind(cell.n, cell.k, cell.dtype, cell.scales))


def _tile(text: str) -> dict[str, Any]:
    """``block_m=16,tma=1,warp_policy=full_row`` -> ``{"block_m": 16, "tma": 1, "warp_policy": "full_row"}``."""
    pairs = [part.strip().partition("=") for part in text.split(",")]
    return {key: int(value) if value.lstrip("-").isdigit() else value for key, _, value in pairs}


def _input_sets(cell: Cell, dtype: Any, device: str, rotate: int) -> list[tuple[Any, ...]]:
    """Input sets of ``a [M, k]`` and ``b [k, n]`` (scaled so that c stays near 1), enough to hold ``rotate`` bytes."""
    import torch

    generator = torch.Generator().manual_seed(cell.m * 7 + cell.n * 3 + cell.k)

    def draw() -> tuple[Any, ...]:
        a = torch.randn(cell.m, cell.k, generator=generator).to(device=device, dtype=dtype)
        b = (torch.randn(cell.k, cell.n, generator=generator) / math.sqrt(cell.k)).to(device=device, dtype=dtype)
        return a, b

    size = (cell.m + cell.n) * cell.k * dtype.itemsize
    return [draw() for _ in range(max(1, min(MAX_SETS, math.ceil(rotate / size))) if rotate else 1)]


def _row(cell: Cell, case: Case, stream: dict[str, Any] | None, graph: dict[str, Any] | None, dtype: Any) -> dict:
    row: dict[str, Any] = {**cell._asdict(), "impl": case.name, "kind": case.kind, **(case.tile or {})}
    for timing, prefix in ((stream or {}, ""), (graph or {}, "graph_")):
        row.update({prefix + key: timing[key] for key in ("us", "low_us", "high_us", "noisy") if key in timing})
        row.update({"error": timing["error"]} if "error" in timing else {})
    if row.get("us"):
        row["tflops"] = 2 * cell.m * cell.n * cell.k / (row["us"] * 1e-6) / 1e12
    fastest = row.get("graph_us") or row.get("us")
    if fastest and graph is not None:
        row["b_gbps"] = cell.k * cell.n * (1 if cell.scales else dtype.itemsize) / (fastest * 1e-6) / 1e9
    return row


def _compare(here: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a cell, each with its × cuBLAS (the peer's µs over its own), stream and graph."""
    peers = [row for row in here if row["kind"] in ("peer", "fp8 peer")] or [r for r in here if r["kind"] == "bf16"]
    cublas = peers[0] if peers else {}
    for row in here:
        for key in ("us", "graph_us"):
            if row.get(key) and cublas.get(key):
                row[f"{key.removesuffix('us')}vs_cublas"] = cublas[key] / row[key]
    return here


def _render(rows: list[dict[str, Any]], env: dict[str, Any], graph_max: int) -> list[str]:
    tolerances = ", ".join(f"{k} {v:.0e}" for k, v in env["tolerance"].items())
    lines = [
        f"Every result checked against {'the dequantised product' if 'fp8' in env else '`a.float() @ b.float()`'} "
        f"(relative error; tolerance {tolerances}{' + k' if 'fp8' in env else ''}) before it is "
        "timed; the implementations interleaved. Stream: `do_bench` medians, the L2 flushed, inputs rotating through "
        f"256 MiB. Up to {graph_max} tokens: the weight's read in GB/s (at the graph time when there is one) and µs "
        "per call inside a CUDA graph (50 calls captured, 20 replays).",
        "",
    ]
    body = []
    for row in rows:
        cells = [
            row["m"],
            row["n"],
            row["k"],
            row["dtype"] + (f" fp8 {row['scales']}" if row.get("scales") else ""),
            row["impl"],
        ]
        if "error" in row:
            body.append([*cells, row["error"][:160], "", "", "", ""])
            continue
        graph = harness.figure(row.get("graph_us"), 2, row.get("graph_noisy"))
        graph += f" ({row['graph_vs_cublas']:.2f}×)" if row.get("graph_vs_cublas") else ""
        figures = [
            (row.get("us"), 1, row.get("noisy")),
            (row.get("tflops"), 0, False),
            (row.get("vs_cublas"), 2, False),
        ]
        body.append(
            [*cells, *(harness.figure(*figure) for figure in figures), graph, harness.figure(row.get("b_gbps"), 0)]
        )
    header = ["M", "n", "k", "dtype", "implementation", "µs", "TFLOP/s", f"× {env['peer']}", "µs in a CUDA graph"]
    return lines + harness.table([*header, "b GB/s"], body)


if __name__ == "__main__":
    sys.exit(main())
