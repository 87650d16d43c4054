"""The committed GEMM tiling sweeps (``benchmarks/results/h200/sweeps/``) as the tiling tests read them."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h200" / "sweeps"


def timed_cells(sweep: str) -> dict[tuple[int, int, int], list[dict]]:
    """The rows of ``benchmarks/results/h200/sweeps/<sweep>`` timed in CUDA graphs (candidates, ``rule`` and
    ``cuBLAS``), by their cell ``(M, n, k)``."""
    cells: dict[tuple[int, int, int], list[dict]] = {}
    for row in json.loads((RESULTS / sweep).read_text())["rows"]:
        if row.get("graph_us"):
            cells.setdefault((row["m"], row["n"], row["k"]), []).append(row)
    return cells
