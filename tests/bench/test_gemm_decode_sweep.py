"""``benchmarks/gemm_decode_sweep.py`` without a GPU: its logic under Triton's interpreter, and its committed result.

The H200 run's Markdown is made from its JSON by the same ``render``; a stale or hand-edited Markdown fails here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import ModuleType

# As in tests/kernels/conftest.py: Triton reads TRITON_INTERPRET when a kernel module is first imported.
if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

import benchmark_script  # tests/benchmark_script.py

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "gemm_decode_sweep.json"


def load_script() -> ModuleType:
    return benchmark_script.load("gemm_decode_sweep")


@pytest.mark.parametrize(
    "result",
    [
        RESULT,
        RESULT.with_name("gemm_decode_sweep_tilelang.json"),
        RESULT.with_name("gemm_decode_sweep_tilelang_tma.json"),
    ],
    ids=lambda p: p.stem,
)
def test_the_committed_markdown_is_rendered_from_the_committed_json(result: Path) -> None:
    script = load_script()
    expected = script.render(json.loads(result.read_text()))
    assert result.with_suffix(".md").read_text() == expected, (
        f"{result.stem}.md is stale: python3 benchmarks/gemm_decode_sweep.py --render benchmarks/results/{result.name}"
    )


def test_the_small_bucket_takes_the_token_counts_asked_for() -> None:
    """``--small-tokens 64,128`` times the 64-row tilings at M = 64 too (the decode batches a 128-token plan
    serves with half its row blocks empty)."""
    script = load_script()
    assert script.parse_args(["--small-tokens", "64,128"]).small_tokens == "64,128"
    assert script.parse_args([]).small_tokens is None
    tilelang = script.candidates(4096, 4096, small=False, backend="tilelang")
    assert {c.split for c in tilelang if c.bucket == "small"} == {1, 2, 4, 8}


def test_every_candidate_fits_a_hopper_and_splits_k_into_whole_slices() -> None:
    script = load_script()
    for n, k in script.SHAPES:
        found = script.candidates(n, k, small=False)
        assert found and len(set(found)) == len(found)
        for candidate in found:
            stage = (candidate.block_m + candidate.block_n) * candidate.block_k * 2
            assert candidate.num_stages * stage <= script.SHARED_LIMIT
            tiles = script.tiling_of(candidate, k)
            assert tiles.split == candidate.split
            if tiles.split > 1:
                assert (tiles.split - 1) * tiles.k_slice < k <= tiles.split * tiles.k_slice


def test_small_run_checks_every_candidate_against_the_float_product(tmp_path: Path) -> None:
    """On the CPU (interpreter) nothing is timed, but every candidate runs and is checked: no row has an error."""
    script = load_script()
    assert script.main(["--device", "cpu", "--small", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "gemm_decode_sweep.json").read_text())["rows"]
    assert rows and not [row for row in rows if row.get("error")]
    assert all(row["relative_error"] < 1e-2 for row in rows)
    assert {row["impl"] for row in rows} >= {"cuBLAS", "rule"}


def test_tilelang_candidates_fit_and_the_extreme_ones_lower_for_hopper() -> None:
    """Before the H200 run of ``--backend tilelang``: its grid, and that the programs at its corners (the widest
    tiles, the most slices, a 16-row tile without split-K) lower for sm_90a with the token count dynamic."""
    tilelang = pytest.importorskip("tilelang")
    script = load_script()
    found = script.candidates(4096, 14336, small=False, backend="tilelang")
    assert {c.bucket for c in found} == {"decode", "small"}
    for candidate in found:
        assert (
            candidate.num_stages * (candidate.block_m + candidate.block_n) * candidate.block_k * 2
            <= script.SHARED_LIMIT
        )
    widest = max((c for c in found if c.bucket == "decode"), key=lambda c: (c.block_n, c.num_stages, c.split))
    small = max((c for c in found if c.bucket == "small"), key=lambda c: (c.block_n, c.num_stages, c.split))
    plain = next(c for c in found if c.bucket == "decode" and c.split == 1)
    import torch
    from tvm.target import Target as TvmTarget

    hopper = TvmTarget({"kind": "cuda", "arch": "sm_90a"})
    for candidate in (widest, small, plain):
        programs = script.tilelang_programs(4096, 14336, torch.bfloat16, candidate)
        assert len(programs) == (1 if candidate.split == 1 else 2)
        for build in programs.values():
            with hopper:
                source = tilelang.lower(build(), target=hopper).kernel_source
            assert "__global__" in source and "int M" in source


def test_shared_epilogue_candidates_fit_and_store_their_partials_by_tma() -> None:
    """``--shared-epilogue``: every TileLang candidate stages its result in shared memory (counted as float32
    against the limit), and a split-K product lowers for sm_90a with a TMA store of its float32 partial."""
    tilelang = pytest.importorskip("tilelang")
    import torch
    from tvm.target import Target as TvmTarget

    script = load_script()
    assert script.parse_args(["--shared-epilogue", "--buckets", "small"]).buckets == "small"
    found = script.candidates(4096, 14336, small=False, backend="tilelang", shared_epilogue=True)
    assert found and all(candidate.shared_epilogue for candidate in found)
    for candidate in found:
        stages = candidate.num_stages * (candidate.block_m + candidate.block_n) * candidate.block_k * 2
        assert stages + candidate.block_m * candidate.block_n * 4 <= script.SHARED_LIMIT
    split = next(c for c in found if c.bucket == "small" and c.split == 4 and c.block_n == 256)
    hopper = TvmTarget({"kind": "cuda", "arch": "sm_90a"})
    product = next(
        build
        for key, build in script.tilelang_programs(4096, 14336, torch.bfloat16, split).items()
        if key[0] == "split"
    )
    with hopper:
        source = tilelang.lower(product(), target=hopper).kernel_source
    assert "tma_store" in source and "int M" in source
