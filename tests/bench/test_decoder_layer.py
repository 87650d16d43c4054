"""``benchmarks/layer/decoder_layer.py --smoke`` on the host: every implementation that runs here builds the layer,
agrees with the float32 layer, and lands in both result files; those that cannot run say why. No timing is judged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lazyops

# The lazyops this test run imports: the subprocess gets the same one (as tests/conftest.py arranges elsewhere).
SRC = str(Path(lazyops.__file__).resolve().parents[1])
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "layer" / "decoder_layer.py"
IMPLS = ("torch eager", "torch.compile", "lazyops torch", "lazyops torch + torch.compile")


def smoke(out: Path, *args: str, interpret: bool = False) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAZYOPS_")}
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = SRC
    command = [sys.executable, str(SCRIPT), "--smoke", "--device", "cpu", "--out", str(out), "--repeats", "1", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def rows_of(out: Path) -> dict[tuple[str, str], dict]:
    payload = json.loads((out / "decoder_layer.json").read_text())
    return {(row["workload"], row["impl"]): row for row in payload["rows"]}


def test_smoke_run_writes_correct_rows_for_every_path_that_runs_here(tmp_path):
    result = smoke(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = rows_of(tmp_path)
    payload = json.loads((tmp_path / "decoder_layer.json").read_text())
    assert payload["environment"]["workloads"] == ["prefill-16", "decode-2"]
    assert payload["environment"]["shape"]["hidden"] == 256
    assert {"torch", "triton", "tilelang"} <= set(payload["environment"]["backends"])
    for workload in ("prefill-16", "decode-2"):
        for impl in IMPLS:
            row = rows[workload, impl]
            assert row["error"] is None, row
            assert row["correct"] is True, row
            assert row["us"] > 0 and row["vs_compile"] > 0
            assert 0 < row["error_out"] <= payload["environment"]["tolerance"]
        # without a GPU (and TRITON_INTERPRET unset), the GPU backends get rows that say why, never a crash
        assert rows[workload, "lazyops tilelang"]["error"].startswith("unavailable: ")
    assert [goal["workload"] for goal in payload["goals"]] == ["prefill-16", "decode-2"]
    markdown = (tmp_path / "decoder_layer.md").read_text()
    for fragment in (
        "# A Llama-3-8B decoder layer end to end",
        "--smoke",
        "torch ",
        "| lazyops torch |",
        "## Correctness",
        "## Goals",
        "## What did not run",
    ):
        assert fragment in markdown
    # a verdict per workload; which one is a timing, never asserted
    assert re.search(r"\| (met|not met|not measured) \|", markdown)


@pytest.mark.skipif(sys.platform == "win32", reason="Triton's interpreter")
def test_smoke_run_takes_triton_in_its_interpreter(tmp_path):
    pytest.importorskip("triton")
    result = smoke(tmp_path, "--backend", "triton", "--workloads", "decode-2", interpret=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = rows_of(tmp_path)
    for impl in ("lazyops triton", "lazyops triton + torch.compile"):
        assert rows["decode-2", impl]["error"] is None and rows["decode-2", impl]["correct"] is True, rows
