"""``benchmarks/layer/layer_ceiling.py --smoke`` on the host: the skeleton layer runs, every part is timed for
torch's ops, the bound and the floor are the ratios the script says they are, and both result files are written. No timing is judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def test_the_floor_is_the_fastest_skeleton_plus_the_bytes_at_the_copy_rate(smoke_run):
    payload = json.loads((smoke_run / "decoder_layer_ceiling.json").read_text())
    (result,) = payload["results"]
    assert result["workload"] == "prefill-16"
    # the GPU backends cannot run on this host: only torch's GEMMs make a skeleton, and their columns say why
    assert list(result["skeleton_us"]) == ["torch ops"] and result["skeleton_us"]["torch ops"] > 0
    assert result["fastest_gemms"] == "torch ops"
    assert result["parts_us"]["lazyops tilelang"].startswith("unavailable: ")
    at_copy_rate = result["at_copy_rate_us"]
    assert tuple(at_copy_rate) == MEMORY_BOUND
    for part in MEMORY_BOUND:  # bytes at the copy rate, the bytes from the kernel's spec
        assert result["bytes"][part] > 0
        assert at_copy_rate[part] == pytest.approx(result["bytes"][part] / result["copy_gbs"] / 1e3, rel=0.01, abs=0.01)
    floor = result["skeleton_us"]["torch ops"] + sum(at_copy_rate.values())
    assert result["floor_us"] == pytest.approx(floor, abs=0.1)
    assert result["floor_vs_compile"] == pytest.approx(result["compile_us"] / result["floor_us"], rel=1e-2)
    # the bound: torch.compile's layer over the fastest skeleton, whatever the memory-bound kernels cost
    assert result["bound_vs_compile"] == pytest.approx(
        result["compile_us"] / result["skeleton_us"]["torch ops"], rel=1e-2
    )
    assert result["lazyops_us"] == {}  # no lazyops backend but torch runs here, and its GEMMs are the skeleton's


def test_every_part_is_timed_alone(smoke_run):
    (result,) = json.loads((smoke_run / "decoder_layer_ceiling.json").read_text())["results"]
    parts = result["parts_us"]["torch ops"]
    assert tuple(parts) == PARTS and all(us > 0 for us in parts.values())


def test_the_skeleton_keeps_the_gemms_and_frees_the_rest():
    """The skeleton's memory-bound kernels launch nothing and keep the shapes the GEMMs need."""
    sys.path.insert(0, str(SCRIPT.parent))
    import layer_ceiling

    def gemm(a, b):
        return a @ b

    gemms = layer_ceiling.layer.Ops(*(None,) * 4, gemm, gemm, gemm, gemm)
    skeleton = layer_ceiling.skeleton_ops(gemms)
    x, w = torch.randn(3, 8), torch.randn(8)
    assert skeleton.rmsnorm(x, w) is x
    assert skeleton.add_rmsnorm(x, w, w) == (x, w)
    assert skeleton.rope(None, x, w, None) == (x, w)
    assert skeleton.silu_and_mul(torch.randn(3, 10)).shape == (3, 5)
    assert (skeleton.qkv, skeleton.o, skeleton.gate_up, skeleton.down) == (gemm,) * 4


def test_markdown_names_the_floor_and_the_goal(smoke_run):
    markdown = (smoke_run / "decoder_layer_ceiling.md").read_text()
    assert markdown.startswith("# The decoder layer's bound and floor at prefill")
    assert "**The bound: " in markdown
    assert "--smoke" in markdown and "## prefill-16" in markdown
    assert "× torch.compile** (goal: ≥ 1.15×)" in markdown
    assert "| skeleton (GEMMs and attention alone), GEMMs from torch ops |" in markdown
    for part in PARTS:
        assert f"| {part} | " in markdown
