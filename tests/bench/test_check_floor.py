"""``benchmarks/check_floor.py`` on the host: torch's op, the lightest checked wrapper and lazyops' kernel are each
timed for softmax and layernorm, and both result files are written. No timing is judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lazyops

SRC = str(Path(lazyops.__file__).resolve().parents[1])
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "check_floor.py"


def test_every_side_is_timed_and_written(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAZYOPS_")}
    env["PYTHONPATH"] = SRC
    options = ["--calls", "20", "--rounds", "2", "--dtypes", "bfloat16", "float32", "--out", str(tmp_path)]
    command = [sys.executable, str(SCRIPT), *options]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    payload = json.loads((tmp_path / "check_floor_cpu.json").read_text())
    assert payload["machine"].startswith("cpu (")
    got = [(row["kernel"], row["dtype"]) for row in payload["rows"]]
    assert got == [(k, d) for d in ("bfloat16", "float32") for k in ("softmax", "layernorm")]
    for row in payload["rows"]:
        assert min(row["torch_us"], row["checked_us"], row["lazyops_us"]) > 0
        assert row["lazyops_speed"] == pytest.approx(row["torch_us"] / row["lazyops_us"], rel=1e-2)
        assert row["checked_speed"] == pytest.approx(row["torch_us"] / row["checked_us"], rel=1e-2)
    markdown = (tmp_path / "check_floor_cpu.md").read_text()
    assert markdown.startswith("# The per-call checks at one token, at the least")
    assert "| softmax |" in markdown and "| layernorm |" in markdown
