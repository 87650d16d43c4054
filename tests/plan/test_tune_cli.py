"""``lazyops tune``, ``lazyops plan check``, and the plan in force in ``lazyops doctor`` and ``lazyops list``: the
torch backend beside fake ports (a right one, a wrong one, one that declines), on the host. No figure is asserted:
what is checked is what is timed, checked, rejected, declined, chosen and written."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from plan_support import a_plan, lazyops_cli, origins

from lazyops import _plan
from lazyops.__main__ import main

PLAIN_WIDTH = 80


def assert_plain(text: str) -> None:
    assert "\x1b[" not in text, text
    assert all(len(line) <= PLAIN_WIDTH for line in text.splitlines()), text


def test_tune_checks_every_candidate_and_never_chooses_a_wrong_one(env, ports, tmp_path):
    out = tmp_path / "plan.json"
    backends = "torch,fast,wrong,picky"
    result = lazyops_cli(
        "tune", "rmsnorm", "--backends", backends, "--tokens", "1,8", "--rounds", "1", "--output", str(out), env=env
    )
    assert result.returncode == 1, result.stdout + result.stderr  # a candidate was rejected
    assert_plain(result.stdout)
    text = " ".join(result.stdout.split())
    assert "lazyops tune on cpu: 1 configuration, host time at M = 1, 8" in text
    assert re.search(r"rejected: rmsnorm_tl\(n=256, dtype=torch.bfloat16, eps=1e-06\) in wrong: wrong: ", text), text
    assert "declined: rmsnorm_tl(n=256, dtype=torch.bfloat16, eps=1e-06) in picky: n 256: picky takes n <= 128" in text
    assert "1 candidate rejected in" in text and f"wrote {out} (1 entry)" in text

    plan = _plan.load(out)
    (entry,) = plan.entries
    assert set(entry.candidates) == {"torch", "fast"}
    assert entry.choice in {"torch", "fast"} and (entry.switch is None or entry.switch.backend in {"torch", "fast"})
    assert set(entry.rejected) == {"wrong"} and entry.rejected["wrong"].startswith("wrong: ")
    assert entry.declined == {"picky": "n 256: picky takes n <= 128"}
    for figures in entry.candidates.values():
        assert set(figures.us) == {1, 8} and all(us > 0 for us in figures.us.values())
        assert set(figures.spread) == {1, 8} and figures.error is not None and figures.error < 1e-2
    assert plan.timing == {"method": "host", "tokens": [1, 8], "rounds": 1, "checked_at": [1, 7]}
    assert plan.environment["device"] == "cpu"
    assert plan.environment["backends"] == {name: _version(name) for name in backends.split(",")}
    assert plan.command == f"lazyops tune rmsnorm --backends {backends} --tokens 1,8 --rounds 1 --output {out}"


def _version(backend: str) -> str:
    import lazyops

    return lazyops.__version__ if backend == "torch" else "1.0"  # the fake ports' distributions are version 1.0


def test_tune_json_says_the_default_and_the_gain_over_it(env, ports, tmp_path):
    out = tmp_path / "plan.json"
    result = lazyops_cli(
        "tune",
        "softmax",
        "--backends",
        "torch,fast",
        "--tokens",
        "2",
        "--rounds",
        "1",
        "--output",
        str(out),
        "--json",
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    (softmax,) = report["configurations"]
    assert softmax["default"] == "torch" and softmax["choice"] in {"torch", "fast"} and softmax["switch"] is None
    assert set(softmax["us"]) == {"torch", "fast"} and set(softmax["gain"]) == {"2"}
    if softmax["choice"] == "torch":
        assert softmax["gain"]["2"] == 1.0
    assert report["plan"] == str(out) and report["timing"]["method"] == "host" and report["skipped"] == []
    assert _plan.load(out).entries[0].label == softmax["label"]


def record(kernel: str, args: str, backend: str = "torch") -> str:
    return json.dumps({"pid": 1, "rank": 0, "kernel": kernel, "backend": backend, "args": args})


def test_tune_takes_each_distinct_configuration_of_a_trace_once(env, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(
            [
                record("rmsnorm_tl", "64, torch.bfloat16"),
                record("rmsnorm_tl", "64, 'bfloat16', 1e-06", backend="triton"),  # the same configuration
                record("rmsnorm_tl", "32, torch.float16, eps=1e-05"),
                record("rmsnorm_tl", "100000, torch.bfloat16"),  # over --max-elements
                record("softmax_tl", "0, torch.bfloat16"),  # refused by its spec
                record("mykernel_tl", "8"),  # no spec
            ]
        )
        + "\n"
    )
    out = tmp_path / "plan.json"
    result = lazyops_cli(
        "tune", "--from-trace", str(trace), "--backends", "torch", "--tokens", "1,4",
        "--rounds", "1", "--max-elements", "50000", "--output", str(out), "--json", env=env,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr  # configurations were skipped
    report = json.loads(result.stdout)
    assert [c["label"] for c in report["configurations"]] == [
        "rmsnorm_tl(n=64, dtype=torch.bfloat16, eps=1e-06)",
        "rmsnorm_tl(n=32, dtype=torch.float16, eps=1e-05)",
    ]
    reasons = {s["args"]: s["reason"] for s in report["skipped"]}
    assert reasons["100000, torch.bfloat16"].startswith("refused: it names a size of 100,000, over the limit of 50,000")
    assert reasons["0, torch.bfloat16"].startswith("its spec refuses it: KernelInputError")
    assert reasons["8"].startswith("lazyops specifies no such kernel")
    assert len(_plan.load(out).entries) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--tokens", "0"], "--tokens: '0': token counts are positive integers"),
        (["--tokens", "1,x"], "is not a comma list of token counts"),
        (["--backends", "trch"], "--backends: no backend named 'trch' (did you mean 'torch'?)"),
        (["--output", "/nonexistent/folder/plan.json"], "the folder '/nonexistent/folder' does not exist"),
        (["--from-trace", "/nonexistent/trace.jsonl"], "cannot read the trace '/nonexistent/trace.jsonl'"),
        (["--timing", "cuda-graph"], "--timing cuda-graph needs a CUDA device"),
        (["nokernel"], "no kernel 'nokernel'"),
    ],
)
def test_tune_bad_input_is_one_line_and_exit_2(arguments, message, tmp_path, capsys, monkeypatch):
    if "--timing" in arguments and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    monkeypatch.chdir(tmp_path)
    assert main(["tune", *(arguments if "--backends" in arguments else ["--backends", "torch", *arguments])]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "lazyops-plan.json")  # refused before anything was timed or written


# -- lazyops plan check ------------------------------------------------------------------------------------------


def test_plan_check_exit_statuses(tmp_path, capsys):
    here = tmp_path / "here.json"
    _plan.save(a_plan(), here)
    assert main(["plan", "check", str(here)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"lazyops plan check {here}: 2 entries, measured on" in out and "applies here" in out

    elsewhere = tmp_path / "elsewhere.json"
    environment = dict(_plan.environment_here(origins("torch")), device="NVIDIA H200", capability="9.0", triton="0.0.1")
    _plan.save(a_plan(environment), elsewhere)
    assert main(["plan", "check", str(elsewhere)]) == 1
    out = capsys.readouterr().out
    assert "does not apply here (3 differences):" in out
    assert "  device: plan NVIDIA H200, here " in out and "  triton: plan 0.0.1, here " in out
    assert main(["plan", "check", str(elsewhere), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["applies"] is False and len(verdict["differences"]) == 3 and verdict["entries"] == 2

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"schema": "lazyops-plan", "version": 0}))
    assert main(["plan", "check", str(broken)]) == 2
    err = capsys.readouterr().err
    assert f"ConfigError: plan {str(broken)!r}: version: schema version 0" in err and "lazyops tune" in err
    assert main(["plan", "check", str(tmp_path)]) == 2
    assert "not a regular file (a folder)" in capsys.readouterr().err


# -- the plan in force: doctor and list ----------------------------------------------------------------------------


def test_list_and_doctor_show_the_plan_in_force(env, tmp_path):
    path = tmp_path / "plan.json"
    _plan.save(a_plan(dict(_plan.environment_here(origins("torch")), device="NVIDIA H200", capability="9.0")), path)
    env["LAZYOPS_PLAN"] = str(path)
    listing = lazyops_cli("list", env=env)
    assert listing.returncode == 0, listing.stderr
    text = " ".join(listing.stdout.split())
    assert f"plan (LAZYOPS_PLAN): {path}: 2 entries, not applied here: device: plan NVIDIA H200, here " in text
    as_json = json.loads(lazyops_cli("list", "--json", env=env).stdout)
    assert as_json["plan"].startswith(f"{path}: 2 entries, not applied here: device: plan NVIDIA H200")

    doctor = json.loads(lazyops_cli("doctor", "--backend", "torch", "--json", env=env).stdout)
    assert doctor["configuration"]["plan"] == as_json["plan"]
    assert doctor["configuration"]["variables"]["LAZYOPS_PLAN"] == str(path)

    del env["LAZYOPS_PLAN"]
    assert json.loads(lazyops_cli("list", "--json", env=env).stdout)["plan"] is None


def test_a_traced_configuration_is_timed_on_the_benchmark_geometry_scaled_to_it():
    from lazyops.cli.tune import traced_geometry
    from lazyops.specs import spec

    geometry = traced_geometry("rope_tl", spec("rope_tl").bind(64, torch.bfloat16, False))
    # the rotary part follows the head; the heads and the cache are the benchmark's (a trace does not record them)
    assert geometry["rotary_dim"] == 64 and geometry["query_heads"] == 32 and geometry["cache_rows"] == 32768
    assert traced_geometry("rmsnorm_tl", spec("rmsnorm_tl").bind(64, torch.bfloat16)) == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and do_bench need a GPU")
@pytest.mark.parametrize("timing", ["auto", "stream", "host"])
def test_on_a_gpu_every_way_of_timing_times_every_backend_that_runs(env, tmp_path, timing):
    out = tmp_path / "plan.json"
    result = lazyops_cli(
        "tune", "rmsnorm", "matmul", "--tokens", "1,64", "--rounds", "2", "--timing", timing, "--output", str(out),
        "--json", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["timing"]["method"] == {"auto": "cuda-graph"}.get(timing, timing)
    plan = _plan.load(out)
    assert _plan.applies_here(plan, origins()) == []
    for entry in plan.entries:
        assert set(entry.candidates) == set(plan.environment["backends"]), entry.rejected
        assert all(set(figures.us) == {1, 64} for figures in entry.candidates.values())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_tune_output_refuses_special_files_and_writes_through_a_symlink(tmp_path, capsys, monkeypatch):
    """Issue 33.5: --output naming a FIFO (or a device) is refused, not replaced; a symlink is written through."""
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["tune", "rmsnorm", "--backends", "torch", "--tokens", "1", "--output", str(fifo)]) == 2
    assert "is not a regular file" in capsys.readouterr().err
    assert fifo.is_fifo()
    with pytest.raises(_plan.ConfigError, match="not a regular file"):
        _plan.save(a_plan(), "/dev/null")
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    _plan.save(a_plan(), link)
    assert link.is_symlink() and len(_plan.load(target).entries) == 2


def test_tune_table_in_an_80_column_pipe_wraps_labels_and_cuts_none(env, tmp_path):
    """Issue 33: in a pipe the labels were cut to ``block_s...`` and ``dtype=torch.flo...``."""
    trace = tmp_path / "trace.jsonl"
    lines = [
        {"kernel": "kv_cache_write_tl", "backend": "torch", "args": "2, 64, torch.float32, block_size=16"},
        {"kernel": "paged_attention_tl", "backend": "torch", "args": "4, 2, 64, torch.float32, block_size=16"},
    ]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "plan.json"
    arguments = ["--from-trace", str(trace), "--backends", "torch", "--tokens", "1", "--rounds", "1"]
    result = lazyops_cli("tune", *arguments, "--output", str(out), env=dict(env, COLUMNS="80"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert_plain(result.stdout)
    table = result.stdout.split("x M=T:", 1)[0]
    assert "..." not in table, table
    assert table.count("block_size=16") == 2 and table.count("dtype=torch.float32") == 2, table
    assert len(table.splitlines()) <= 12, table


def test_plain_output_shows_a_huge_plan_string_cut_short(tmp_path, capsys, monkeypatch):
    """Issue 33.6: a 5 MB `command` took `plan check` 26 s (rich wrapping it), a 5 MB device `list` 14 s."""
    path = tmp_path / "huge.json"
    data = _plan.as_json(a_plan())
    data["command"] = "x" * 2_000_000
    path.write_text(json.dumps(data))
    assert main(["plan", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "lazyops plan check" in out and "xxx..." in out and len(out) < 2_000, len(out)
    data["environment"]["device"] = "y" * 2_000_000
    path.write_text(json.dumps(data))
    monkeypatch.setenv("LAZYOPS_PLAN", str(path))
    line = _plan.plan_status(origins("torch"))
    assert line is not None and "yyy..." in line and len(line) < 2_000, len(line or "")
    assert main(["plan", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "yyy..." in out and len(out) < 2_000, len(out)


def test_a_plan_that_cannot_be_used_fails_doctor_list_which_and_configure(env, tmp_path):
    """Issue 33.9: with LAZYOPS_PLAN naming a missing file doctor said "no problems" and exited 0, list and which
    exited 0, while every kernel access raised ConfigError; configure(plan="missing.json") was accepted."""
    missing = str(tmp_path / "missing.json")
    env["LAZYOPS_PLAN"] = missing
    doctor = lazyops_cli("doctor", "--backend", "torch", "--dtype", "float32", env=env)
    assert doctor.returncode == 2 and "no problems" not in doctor.stdout, doctor.stdout + doctor.stderr
    assert "problem: LAZYOPS_PLAN: cannot be used" in " ".join((doctor.stdout + doctor.stderr).split())
    for command in (["list"], ["which", "rmsnorm_tl"]):
        result = lazyops_cli(*command, env=env)
        assert result.returncode == 2 and "no such file" in result.stderr, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
    import lazyops

    with pytest.raises(lazyops.ConfigError, match="no such file"):
        lazyops.configure(plan=missing)
    assert lazyops.configure().plan is None  # the refused plan changed nothing


NEVER = """
from lazyops.specs import rmsnorm

@rmsnorm.spec.implementation
def rmsnorm_tl(config):
    raise RuntimeError("a declined configuration must not be built")

rmsnorm_tl.lazyops_supports = lambda config: "never serves any configuration"
"""


def test_doctor_reports_a_decline_as_a_resolution_not_a_failure(ports, env):
    """Issue 33.10: a backend that declines every configuration showed FAIL and made doctor exit 1, though the
    library serves those configurations from torch."""
    from plan_support import write_port

    write_port(ports, "never", NEVER, ["rmsnorm_tl"])
    result = lazyops_cli("doctor", "--backend", "never,torch", "--dtype", "float32", env=ports.env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "declines" in result.stdout and "FAIL" not in result.stdout, result.stdout


def test_tune_chooses_among_backends_for_the_fp8_gemm(env, tmp_path):
    """``matmul_fp8_tl``'s configurations as ``bench_layer.py --build-only --fp8 block,channel`` traces them (each
    scale kind): the torch backend and Triton (its interpreter here) each checked against the reference, timed, and
    one of them chosen for each; none rejected."""
    trace = tmp_path / "trace.jsonl"
    configurations = ["256, 256, torch.bfloat16, 'block'", "256, 128, torch.bfloat16, 'rowwise'"]
    configurations.append("128, 256, torch.float16, scales='tensor'")
    trace.write_text("\n".join(record("matmul_fp8_tl", args) for args in configurations) + "\n")
    out = tmp_path / "plan.json"
    result = lazyops_cli(
        "tune", "--from-trace", str(trace), "--backends", "torch,triton", "--tokens", "1,16",
        "--rounds", "1", "--output", str(out), "--json", env={**env, "TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    entries = _plan.load(out).entries
    assert sorted(entry.config["scales"] for entry in entries) == ["block", "rowwise", "tensor"]
    for entry in entries:
        assert set(entry.candidates) == {"torch", "triton"} and not entry.rejected, entry
        assert entry.choice in entry.candidates
