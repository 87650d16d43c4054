"""``benchmarks/layer/layer_ceiling.py --smoke`` on the host: every part of the layer is timed for torch's ops, the
floor is the sum the script says it is, and both result files are written. No timing is judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lazyops

SRC = str(Path(lazyops.__file__).resolve().parents[1])
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "layer" / "layer_ceiling.py"
PARTS = ("rmsnorm", "qkv", "rope", "attention", "layout", "o", "add_rmsnorm", "gate_up", "silu_and_mul", "down")
MEMORY_BOUND = ("rmsnorm", "rope", "add_rmsnorm", "silu_and_mul")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ceiling")
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAZYOPS_")}
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = SRC
    command = [sys.executable, str(SCRIPT), "--smoke", "--device", "cpu", "--out", str(out), "--repeats", "1"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_every_part_is_timed_and_the_floor_adds_up(smoke_run):
    payload = json.loads((smoke_run / "decoder_layer_ceiling.json").read_text())
    (result,) = payload["results"]
    assert result["workload"] == "prefill-16"
    parts = result["parts_us"]["torch ops"]
    assert tuple(parts) == PARTS and all(us > 0 for us in parts.values())
    # the GPU backends cannot run on this host: their columns say why instead of timing anything
    assert result["parts_us"]["lazyops tilelang"].startswith("unavailable: ")
    floor = result["floor_parts_us"]
    assert set(floor) == set(PARTS)
    for part in MEMORY_BOUND:  # bytes at the copy rate, the bytes from the kernel's spec
        assert result["bytes"][part] > 0
        assert floor[part] == pytest.approx(result["bytes"][part] / result["copy_gbs"] / 1e3, rel=0.01, abs=0.01)
    for part in set(PARTS) - set(MEMORY_BOUND):  # the fastest measured, here torch's (the only column)
        assert floor[part] == parts[part]
    assert result["floor_us"] == pytest.approx(sum(floor.values()), abs=0.2)
    assert result["ceiling_vs_compile"] == pytest.approx(result["compile_us"] / result["floor_us"], rel=1e-2)


def test_markdown_names_the_floor_and_the_goal(smoke_run):
    markdown = (smoke_run / "decoder_layer_ceiling.md").read_text()
    assert markdown.startswith("# The decoder layer's floor at prefill, part by part")
    assert "--smoke" in markdown and "## prefill-16" in markdown
    assert "× torch.compile** (goal: ≥ 1.15×)" in markdown
    for part in PARTS:
        assert f"| {part} | " in markdown
