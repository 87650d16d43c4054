"""``lazyops doctor``: the report, its exit statuses, and what it says about broken configurations and backends."""

from __future__ import annotations

import json

from cli_support import assert_one_line_error, assert_plain, lazyops_cli

from lazyops.testing.cases import examples


def tolerance_of(kernel: str) -> float:
    """The kernel's tolerance at float32: float32's, or its output's where it converts (float8 for the fp8 norms); a
    kernel of integer outputs (a sampler's tokens, judged by their draws) reports no error at all."""
    import torch

    from lazyops import testing
    from lazyops.specs import spec

    kernel_spec = spec(kernel)
    example = examples(kernel_spec).benchmark(torch.float32)
    out_dtype = kernel_spec.out_dtype(kernel_spec.bind(*example.args, **example.kwargs))
    return testing.TOLERANCE[out_dtype] if out_dtype.is_floating_point else float.fromhex("0x1p-1074")


def test_doctor_runs_and_checks_every_kernel_here(env):
    result = lazyops_cli("doctor", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert_plain(out)
    for section in ("Backends", "Configuration", "Kernels"):
        assert section in out
    assert "torch" in out and "Python" in out and "device" in out
    assert "rmsnorm_tl" in out and "torch (selected)" in out and "pass " in out
    assert "all good" in out
    assert "Failed to initialize NumPy" not in result.stderr


def test_doctor_json_is_the_same_report(env):
    result = lazyops_cli("doctor", "--json", "--dtype", "float32", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["exit_status"] == 0 and report["failures"] == []
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["torch"]["status"] == "ok" and backends["torch"]["selected"]
    assert backends["torch"]["import_s"] is not None
    assert report["configuration"]["chain"] == ["torch"] and report["configuration"]["problems"] == []
    kernels = {k["kernel"]: k for k in report["kernels"]}
    assert set(kernels) >= {"rmsnorm_tl", "softmax_tl", "matmul_tl", "rope_tl"}
    for name, entry in kernels.items():
        assert entry["resolves_to"] == "torch" and entry["problem"] is None
        check = entry["checks"]["torch"]
        assert check["status"] == "pass" and check["error"] < tolerance_of(name)
    assert report["versions"]["torch"] and report["dtype"] == "float32"


def test_each_configuration_problem_is_listed_with_its_fix_and_exit_2(env):
    env.update(LAZYOPS_BACKEND="tritn", LAZYOPS_STRICT="maybe", LAZYOPS_BACKENDS="torch")
    result = lazyops_cli("doctor", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # the table wraps long messages
    assert "LAZYOPS_STRICT='maybe' is not a boolean; use 1, true, yes or on" in out
    assert "LAZYOPS_BACKEND names backend 'tritn'" in out and "Did you mean 'triton'" in out
    assert "LAZYOPS_BACKENDS is not a lazyops variable and is ignored; did you mean LAZYOPS_BACKEND?" in out
    assert "configuration error" in out
    assert "Traceback" not in result.stderr


def test_a_broken_selected_backend_and_a_failing_kernel_exit_1(env, broken_backend, wrong_backend):
    env["LAZYOPS_BACKEND"] = "wrong,broken"
    result = lazyops_cli("doctor", "--json", "--backend", "wrong,broken", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["broken"]["status"] == "broken" and backends["broken"]["selected"]
    assert "the broken backend fails at import" in backends["broken"]["reason"]
    assert backends["wrong"]["status"] == "ok"
    rmsnorm = next(k for k in report["kernels"] if k["kernel"] == "rmsnorm_tl")
    assert rmsnorm["resolves_to"] == "wrong"
    assert rmsnorm["checks"]["wrong"]["status"] == "FAIL"
    assert "relative error" in rmsnorm["checks"]["wrong"]["message"]
    assert "check_case" in rmsnorm["checks"]["wrong"]["message"]  # how to rerun the failing case
    assert any("selected backend 'broken' is broken" in line for line in report["failures"])
    assert list(rmsnorm["checks"]) == ["wrong"]  # --backend limits the checks


def test_a_broken_backend_that_is_not_selected_is_reported_not_fatal(env, broken_backend):
    result = lazyops_cli("doctor", "--backend", "broken", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and "importing backend 'broken'" in " ".join(result.stdout.split())
    assert_plain(result.stdout)


def test_bad_arguments_exit_2_with_one_line(env):
    assert_one_line_error(lazyops_cli("doctor", "--backend", "nope", env=env), 2, "no backend named 'nope'")
    result = lazyops_cli("doctor", "--dtype", "int8", env=env)
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_a_selected_backend_that_cannot_run_is_one_problem_not_one_per_kernel(env, fake_backends):
    from lazyops.specs import kernel_names

    fake_backends.make("offline", list(kernel_names()), init_code="def unavailable_reason():\n    return 'no device'\n")
    env.update(LAZYOPS_BACKEND="offline", LAZYOPS_STRICT="1")
    result = lazyops_cli("doctor", "--json", "--backend", "offline", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["failures"] == ["selected backend 'offline' cannot run here: no device (every kernel resolves to it)"]
    assert "is cannot run" not in result.stdout


def test_a_nearly_right_third_party_rmsnorm_fails_its_check(env, nearly_right_backends):
    """An rmsnorm that forgets eps, or scales by 1.005, passed one small bfloat16 case (issue 27.4)."""
    result = lazyops_cli("doctor", "--json", "--backend", ",".join(nearly_right_backends), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    rmsnorm = next(k for k in report["kernels"] if k["kernel"] == "rmsnorm_tl")
    for backend in nearly_right_backends:
        assert rmsnorm["checks"][backend]["status"] == "FAIL", (backend, rmsnorm["checks"][backend])
        assert any(line.startswith(f"rmsnorm_tl in {backend}: ") for line in report["failures"]), report["failures"]
    assert rmsnorm["checks"]["noeps"]["message"].startswith("eps=0.5: ")
    assert rmsnorm["checks"]["scaled"]["message"].startswith("float32: ")


def test_a_misspelt_variable_is_a_problem_not_all_good(env, broken_backend):
    """LAZYOPS_BAKEND=triton selects nothing: doctor says so and exits 1 (issue 27.7); --backend broken keeps the run
    short (nothing to check) and shows that a backend that is not selected stays not fatal."""
    env["LAZYOPS_BAKEND"] = "triton"
    result = lazyops_cli("doctor", "--json", "--backend", "broken", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert json.loads(result.stdout)["failures"] == [
        "LAZYOPS_BAKEND is not a lazyops variable and is ignored; did you mean LAZYOPS_BACKEND?"
    ]


def test_unknown_variables_are_the_lazyops_ones_it_does_not_read_with_the_nearest():
    from lazyops._settings import unknown_variables

    environ = {"LAZYOPS_BAKEND": "triton", "LAZYOPS_STRICT": "1", "LAZYOPS_ZZZ": "", "PATH": "/bin", "LAZYOPS": "1"}
    assert unknown_variables(environ) == [("LAZYOPS_BAKEND", "LAZYOPS_BACKEND"), ("LAZYOPS_ZZZ", None)]
    assert unknown_variables({"LAZYOPS_TRACE_ARGS": "1"}) == []
    # gone with the disk cache: named, with no near known variable to suggest
    assert unknown_variables({"LAZYOPS_CACHE_DIR": "/tmp"}) == [("LAZYOPS_CACHE_DIR", None)]


def test_doctor_leaves_nothing_in_the_folder_it_runs_in(env, tmp_path):
    """Issue 33: hypothesis's caches went to ./.hypothesis (79 entries) wherever doctor ran."""
    variables = {key: value for key, value in env.items() if key != "HYPOTHESIS_STORAGE_DIRECTORY"}
    here = tmp_path / "here"
    here.mkdir()
    result = lazyops_cli("doctor", "--dtype", "float32", env=variables, cwd=here)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(here.iterdir()) == []
