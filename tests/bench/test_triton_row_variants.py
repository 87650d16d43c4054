"""``benchmarks/triton_row_variants.py`` on the host (Triton's interpreter): every layout of every row kernel is
built, judged against the spec's float64 reference and written under the name asked for; ``--graph`` refuses a
device without CUDA graphs. No timing is judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lazyops

SRC = str(Path(lazyops.__file__).resolve().parents[1])
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "triton_row_variants.py"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAZYOPS_")}
    env["PYTHONPATH"] = SRC
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)


def test_every_layout_is_checked_and_written_under_its_name(tmp_path):
    result = run("--device", "cpu", "--tokens", "3", "--name", "variants_here", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    payload = json.loads((tmp_path / "variants_here.json").read_text())
    rows = payload["rows"]
    kernels = {row["kernel"] for row in rows}
    assert kernels == {"rmsnorm_fp8", "layernorm", "softmax", "rmsnorm"}
    for kernel in kernels:  # the default and every other rows x warps pair of the grid (3 x 4), once each
        layouts = [row["layout"] for row in rows if row["kernel"] == kernel]
        assert layouts[0] == "default" and len(layouts) == len(set(layouts)) == 12
    assert all("error" not in row and row["relative_error"] < 6e-2 and row["tokens"] == 3 for row in rows)
    assert "interpreter" in payload["method"]
    assert (tmp_path / "variants_here.md").read_text().startswith("# Triton row kernels under other row layouts")


def test_graph_timing_needs_cuda(tmp_path):
    result = run("--device", "cpu", "--graph", "--out", str(tmp_path))
    assert result.returncode == 2 and "needs --device cuda" in result.stderr
    assert not list(tmp_path.iterdir())
