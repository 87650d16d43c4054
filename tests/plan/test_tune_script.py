"""``make gpu-tune`` (``benchmarks/bench_tune.py``) in its smoke mode on this CPU, so that the H200's run cannot rot: the
layer's trace, ``lazyops tune`` twice, the layer by the plan, and the result files saying how they were made. No
figure is asserted; the reproducibility and goal verdicts are checked on synthetic reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_scripts import load
from lazyops import _plan

ROOT = Path(__file__).resolve().parents[2]
tune = load("bench_tune")


def test_make_gpu_tune_runs_every_step_on_the_cpu(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("LAZYOPS_PLAN", None)
    options = f"--smoke --device cpu --out {tmp_path}"
    result = subprocess.run(
        ["make", "-s", "gpu-tune", f"PYTHON={sys.executable}", f"TUNE={options}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    payload = json.loads((tmp_path / "tune.json").read_text())
    environment = payload["environment"]
    steps = {step["step"]: step for step in environment["steps"]}
    assert list(steps) == ["trace", "tune 1", "tune 2", "layer"]
    assert all(step["status"] == 0 for step in steps.values()), steps
    assert steps["tune 1"]["command"].startswith("lazyops tune --from-trace ")
    assert (
        steps["trace"]["command"].startswith("LAZYOPS_TRACE=")
        and "benchmarks/bench_layer.py" in steps["trace"]["command"]
    )
    markdown = (tmp_path / "tune.md").read_text()
    assert environment["command"] in markdown and all(f"`{step['command']}`" in markdown for step in steps.values())

    rows = payload["rows"]
    picked = [row for row in rows if row["kind"] == "choice"]
    assert len(picked) == 8  # rmsnorm, add_rmsnorm, rope, silu_and_mul and the four GEMMs of the layer
    assert {row["kernel"] for row in picked} == {
        "rmsnorm_tl",
        "add_rmsnorm_tl",
        "rope_tl",
        "silu_and_mul_tl",
        "matmul_tl",
    }
    compared = [row for row in rows if row["kind"] == "layer"]
    assert {(row["workload"], row["compiled"]) for row in compared} == {
        (workload, compiled) for workload in ("prefill-16", "decode-2") for compiled in (False, True)
    }
    assert all("error" not in row and row["best_single"].startswith("lazyops torch") for row in compared), compared
    for name in ("tune_plan.json", "tune_plan_2.json"):
        assert len(_plan.load(tmp_path / name).entries) == 8
    layer_rows = json.loads((tmp_path / "tune_layer.json").read_text())["rows"]
    assert {"lazyops plan", "lazyops plan + torch.compile"} <= {row["impl"] for row in layer_rows}


def report(choices: dict[str, tuple[str, dict[str, float]]]) -> dict:
    """A ``lazyops tune --json`` report: ``{label: (choice, {backend: total µs})}`` at one token count."""
    return {
        "configurations": [
            {"label": label, "choice": choice, "switch": None, "us": {b: {"1": us} for b, us in totals.items()}}
            for label, (choice, totals) in choices.items()
        ]
    }


def test_a_choice_that_differs_between_runs_is_judged_against_the_noise_between_them():
    steady = {f"steady {i}": ("torch", {"torch": 10.0, "triton": 20.0}) for i in range(20)}
    first = report(
        {
            **steady,
            "close": ("triton", {"triton": 10.0, "tilelang": 10.1}),
            "far": ("triton", {"triton": 10, "tilelang": 20}),
        }
    )
    assert tune.differences(first, first) == [] and tune.drift(first, first) == 0.0
    # every candidate's time 3 % up in the second run: the noise; 'close' flips within it, 'far' beyond it
    later = {
        label: (choice, {b: us * 1.03 for b, us in totals.items()}) for label, (choice, totals) in {**steady}.items()
    }
    second = report(
        {
            **later,
            "close": ("tilelang", {"triton": 10.4, "tilelang": 10.3}),
            "far": ("tilelang", {"triton": 20.6, "tilelang": 10.3}),
        }
    )
    assert tune.drift(first, second) == pytest.approx(0.03)
    found = {row["label"]: row for row in tune.differences(first, second)}
    assert set(found) == {"close", "far"}
    assert found["close"]["verdict"] == "within the noise between the runs"
    assert found["close"]["gap"] == pytest.approx([0.01, 0.1 / 10.3])
    assert found["far"]["verdict"] == "differs beyond the noise" and found["far"]["gap"] == pytest.approx([1.0, 1.0])


def test_the_plan_layer_is_compared_with_the_best_single_backend_layer():
    def row(impl: str, us: float, workload: str = "decode-1") -> dict:
        return {"workload": workload, "impl": impl, "kind": "lazyops", "us": us}

    rows = [
        row("lazyops plan", 9.0),
        row("lazyops plan + torch.compile", 8.0),
        row("lazyops triton", 10.0),
        row("lazyops tilelang", 9.5),
        row("lazyops tilelang, cuBLAS GEMMs", 5.0),  # a mix, not a single backend
        row("lazyops triton + torch.compile", 8.4),
        row("lazyops tilelang, cuBLAS GEMMs + torch.compile", 4.0),
        {"workload": "decode-1", "impl": "torch.compile", "kind": "peer", "us": 1.0},
    ]
    eager, compiled = tune.comparisons(rows)
    assert eager["best_single"] == "lazyops tilelang" and eager["ratio"] == pytest.approx(9.5 / 9.0)
    assert compiled["best_single"] == "lazyops triton + torch.compile" and compiled["ratio"] == pytest.approx(8.4 / 8)
    assert "error" in tune.comparisons([row("lazyops triton", 10.0)])[0]


def test_the_layer_refuses_a_missing_plan_before_anything_runs(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_layer.py"), "--smoke", "--plan", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "no such file; make one with `lazyops tune --from-trace" in result.stderr
