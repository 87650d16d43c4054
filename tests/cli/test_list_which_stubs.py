"""``lazyops list``, ``which`` and ``stubs``, and what every run of the command shares: its declaration, the README's
commands, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from cli_support import assert_plain, lazyops_cli

ROOT = Path(__file__).resolve().parents[2]


def test_list_shows_every_kernel_and_where_it_resolves(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl", "alpha_tl"])
    result = lazyops_cli("list", "--json", env=fake_backends.env(LAZYOPS_BACKEND="ext"))
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    rows = {row["kernel"]: row for row in listing["kernels"]}
    assert listing["chain"] == ["ext"]
    assert rows["rmsnorm_tl"]["backend"] == "ext" and rows["rmsnorm_tl"]["reason"] == "selected"
    assert rows["softmax_tl"]["backend"] == "torch" and rows["softmax_tl"]["reason"] == "inherited"
    assert rows["alpha_tl"]["exported_by"] == ["ext"]
    assert listing["backends"]["torch"] == "ok"


def test_list_table_is_plain_and_fits_80_columns_in_a_pipe(fake_backends):
    fake_backends.make("a_third_party_backend", ["rmsnorm_tl", "alpha_tl"])
    result = lazyops_cli("list", env=fake_backends.env())
    assert result.returncode == 0, result.stderr
    assert_plain(result.stdout)
    assert "rmsnorm_tl" in result.stdout and "torch (selected)" in result.stdout


def test_which(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    env = fake_backends.env(LAZYOPS_BACKEND="ext")
    assert lazyops_cli("which", "rmsnorm_tl", env=env).stdout.strip() == (
        "rmsnorm_tl: ext (selected: the selected backend exports it)"
    )
    assert "inherited: the selected backend 'ext' lacks it" in lazyops_cli("which", "rope_tl", env=env).stdout
    missing = lazyops_cli("which", "rope_tl", env=fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_STRICT="1"))
    assert missing.returncode == 1 and "strict mode allows no fallback" in missing.stderr
    typo = lazyops_cli("which", "rmsnrom_tl", env=env)
    assert typo.returncode == 1 and "Did you mean 'rmsnorm_tl'" in typo.stderr


def test_configuration_errors_exit_2_with_the_message(fake_backends):
    result = lazyops_cli("list", env=fake_backends.env(LAZYOPS_BACKEND="tritn"))
    assert result.returncode == 2
    assert "ConfigError: LAZYOPS_BACKEND names backend 'tritn'" in result.stderr and "Traceback" not in result.stderr


def test_console_script_is_declared():
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("lazyops") == "lazyops.__main__:main"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/test.sh" in readme and "bash scripts/doctor.sh" in readme
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    main_job = (ROOT / "scripts" / "doctor.sh").read_text()
    assert "setup.sh cli" in main_job and ".venv/bin/lazyops doctor" in main_job
    assert "cli" in (ROOT / "scripts" / "test.sh").read_text().split("setup.sh", 1)[1].splitlines()[0]


def test_eager_import_with_a_bad_configuration_is_one_line_and_exit_2(fake_backends):
    env = fake_backends.env(EAGER_IMPORT="1", LAZYOPS_BACKEND="nope")
    for command in (
        [sys.executable, "-m", "lazyops", "list"],
        [sys.executable, "-c", "import sys; from lazyops.__main__ import main; sys.exit(main(['list']))"],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line, no traceback
        assert "ConfigError: LAZYOPS_BACKEND names backend 'nope'" in result.stderr


def test_stubs_to_a_path_that_cannot_be_written_is_one_line_and_exit_2(fake_backends, tmp_path):
    for output in ("/dev/full", str(tmp_path)):
        result = lazyops_cli("stubs", "--output", output, env=fake_backends.env())
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and f"cannot write {output!r}" in result.stderr
    debug = lazyops_cli("--debug", "stubs", "--output", str(tmp_path), env=fake_backends.env())
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_which_of_a_public_function_says_it_is_not_a_kernel(fake_backends):
    result = lazyops_cli("which", "configure", env=fake_backends.env())
    assert result.returncode == 1
    assert "'configure' is not a kernel: it is a public function of lazyops" in result.stderr
    assert "no attribute" not in result.stderr


def test_list_survives_a_backend_whose_unavailable_reason_raises(fake_backends):
    fake_backends.make(
        "flaky", ["alpha_tl"], init_code="def unavailable_reason():\n    raise RuntimeError('driver exploded')\n"
    )
    result = lazyops_cli("list", env=fake_backends.env())
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "flaky broken backend 'flaky': its unavailable_reason() raised RuntimeError: driver exploded" in " ".join(
        result.stdout.split()
    )


def test_list_shows_a_refused_entry_point_and_everything_else(fake_backends):
    fake_backends.register("torch", "lazyops_rogue", "rogue-dist")
    result = lazyops_cli("list", env=fake_backends.env())
    assert result.returncode == 0, result.stderr
    assert "refused entry point: backend name 'torch' is claimed by built-in and by rogue-dist" in " ".join(
        result.stdout.split()
    )
    assert "rmsnorm_tl" in result.stdout and "torch (selected)" in result.stdout


def test_which_and_list_say_when_the_backend_a_kernel_resolves_to_cannot_load(fake_backends):
    """Resolution reads names only: `which` and `list` ask the backend too, as building the kernel would (27.6)."""
    fake_backends.make(
        "offline", ["rmsnorm_tl"], init_code="def unavailable_reason():\n    return 'no device; select torch'\n"
    )
    env = fake_backends.env(LAZYOPS_BACKEND="offline")
    which = lazyops_cli("which", "rmsnorm_tl", env=env)
    assert which.returncode == 2, which.stderr
    assert "rmsnorm_tl resolves to a backend that cannot load: backend 'offline' cannot run here: no device" in (
        which.stderr
    )
    assert lazyops_cli("which", "softmax_tl", env=env).returncode == 0  # inherited from torch, which runs

    listing = lazyops_cli("list", env=env)
    assert listing.returncode == 2, listing.stderr
    assert_plain(listing.stdout)
    assert "rmsnorm_tl yes yes yes yes offline (selected): cannot load" in " ".join(listing.stdout.split())
    assert "backend 'offline' cannot run here: no device; select torch (1 kernel resolve" in listing.stderr
    assert json.loads(lazyops_cli("list", "--json", env=env).stdout)["backends"]["offline"] == (
        "backend 'offline' cannot run here: no device; select torch"
    )


def test_strict_mode_suggests_only_backends_that_run_here(fake_backends):
    """Issue 33.13: on a CPU, KernelUnavailableError suggested triton and tilelang, neither of which can run."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("triton and tilelang can run on this machine")
    fake_backends.make("ext", ["rmsnorm_tl"])
    env = fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_STRICT="1")
    env.pop("TRITON_INTERPRET", None)
    missing = lazyops_cli("which", "rope_tl", env=env)
    message = " ".join(missing.stderr.split())
    assert missing.returncode == 1 and "it is available in: torch (triton, tilelang: cannot run here)" in message, (
        message
    )
