"""``benchmarks/gemm_large_sweep.py`` without a GPU: its candidates, their TileLang programs lowered for Hopper,
and its Markdown from a results JSON (the committed one, once the H200 has made it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import pytest

import benchmark_script  # tests/benchmark_script.py

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def load_script() -> ModuleType:
    return benchmark_script.load("gemm_large_sweep")


def test_the_candidates_are_distinct_and_fit_a_hopper_block() -> None:
    script = load_script()
    for backend in ("triton", "tilelang"):
        found = script.candidates(backend)
        assert found and len(set(found)) == len(found)
        for candidate in found:
            pipeline = (candidate.block_m + candidate.block_n) * candidate.block_k * 2 * candidate.num_stages
            epilogue = candidate.block_m * candidate.block_n * 2 if candidate.shared_epilogue else 0
            assert pipeline + epilogue <= 227 * 1024 - 8 * 1024, candidate.label
    assert all(m >= 1024 for m, _, _ in script.SHAPES)


@pytest.mark.parametrize("result", sorted(RESULTS.glob("gemm_large_sweep_*.json")), ids=lambda p: p.stem)
def test_the_committed_markdown_is_rendered_from_the_committed_json(result: Path) -> None:
    script = load_script()
    expected = script.render(json.loads(result.read_text()))
    assert result.with_suffix(".md").read_text() == expected, (
        f"{result.stem}.md is stale: python3 benchmarks/gemm_large_sweep.py --render benchmarks/results/{result.name}"
    )


def test_render_marks_each_shapes_fastest_candidate_and_lists_failures() -> None:
    script = load_script()
    shape = script.SHAPES[0]
    rows = [
        {"m": shape[0], "n": shape[1], "k": shape[2], "impl": "cuBLAS", "candidate": None, "us": 10.0},
        {"m": shape[0], "n": shape[1], "k": shape[2], "impl": "rule", "candidate": None, "us": 9.0},
        {"m": shape[0], "n": shape[1], "k": shape[2], "impl": "a", "candidate": {"block_m": 1}, "us": 12.0},
        {"m": shape[0], "n": shape[1], "k": shape[2], "impl": "b", "candidate": {"block_m": 2}, "us": 11.0},
        {
            "m": shape[0],
            "n": shape[1],
            "k": shape[2],
            "impl": "c",
            "candidate": {"block_m": 3},
            "error": "OutOfResources: x",
        },
    ]
    for row in rows:
        if "us" in row:
            row["tflops"] = 2 * shape[0] * shape[1] * shape[2] / (row["us"] * 1e-6) / 1e12
            row["vs_cublas"] = 10.0 / row["us"]
    payload = {
        "backend": "triton",
        "versions": {"torch": "x"},
        "command": "python3 benchmarks/gemm_large_sweep.py",
        "date": "d",
        "device": "NVIDIA H200",
        "dtype": "bfloat16",
        "commit": "c",
        "elapsed_s": 1.0,
        "rows": rows,
    }
    markdown = script.render(payload)
    assert re.search(r"\| b \| \*\*\d+ \(0\.91×\)\*\* \| 0\.909 \|", markdown), markdown
    assert "| rule | " in markdown and "**" not in markdown.split("| rule | ")[1].splitlines()[0]
    assert "| c | fails |" in markdown and "OutOfResources: x" in markdown


def test_tilelang_candidates_lower_for_hopper_with_the_asked_wgmma_and_epilogue() -> None:
    """Before the H200 run: each TileLang candidate lowers for sm_90a with M dynamic; a full-row split issues
    m64n256 ``wgmma`` for a 128 x 256 tile (square: m64n128), and the shared-memory epilogue is a TMA store."""
    tilelang = pytest.importorskip("tilelang")
    from tvm.target import Target as TvmTarget

    from lazyops._backends.tilelang import matmul

    script = load_script()
    hopper = TvmTarget({"kind": "cuda", "arch": "sm_90a"})
    for candidate in script.candidates("tilelang"):
        tile = script.tilelang_tile(candidate)
        with hopper:
            source = tilelang.lower(matmul.matmul_program(4096, 14336, "bfloat16", tile), target=hopper).kernel_source
        assert "int M" in source, candidate.label
        shapes = set(re.findall(r"wgmma_ss<[^>]*?, (\d+), (\d+), 16,", source))
        if (candidate.block_m, candidate.block_n) == (128, 256):
            assert shapes == ({("64", "256")} if candidate.warp_policy == "full_row" else {("64", "128")})
        assert ("tma_store" in source) == candidate.shared_epilogue, candidate.label
