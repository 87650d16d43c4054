"""``benchmarks/gemm_grid.py --plot`` without a GPU: the committed results JSON drawn again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import benchmark_script  # tests/benchmark_script.py

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_the_committed_grid_is_drawn_with_a_panel_pair_per_weight_shape(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    script = benchmark_script.load("gemm_grid")
    results = tmp_path / "gemm_grid.json"
    shutil.copy(RESULTS / "gemm_grid.json", results)
    target = script.plot(results)
    assert target == tmp_path / "gemm_grid.png"
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (RESULTS / "gemm_grid.png").exists(), "python3 benchmarks/gemm_grid.py --plot benchmarks/results/gemm_grid.json"
