"""``lazyops bench``: the table, --json parsed back, --plot, and its exit statuses (the timing is lazyops._bench's)."""

from __future__ import annotations

import json

from cli_support import assert_one_line_error, assert_plain, lazyops_cli


def test_bench_json_and_plot(env, tmp_path):
    plot = tmp_path / "bench.png"
    result = lazyops_cli(
        "bench", "rmsnorm", "matmul_tl", "--backend", "torch", "--tokens", "1,4", "--json", "--plot", str(plot), env=env
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tokens"] == [1, 4] and report["sizes"] == "small" and report["dtype"] == "bfloat16"
    rows = report["rows"]
    assert {(r["kernel"], r["impl"], r["tokens"]) for r in rows} == {
        (kernel, impl, m)
        for kernel in ("rmsnorm", "matmul")
        for impl in ("lazyops torch", "torch eager")
        for m in (1, 4)
    }
    for row in rows:
        assert row["error"] is None and row["us"] > 0 and row["rate"] > 0
        assert row["unit"] == ("TFLOP/s" if row["kernel"] == "matmul" else "GB/s")
        assert row["x_eager"] == (1.0 if row["impl"] == "torch eager" else row["x_eager"]) and row["x_eager"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_table_fits_80_columns(env):
    result = lazyops_cli("bench", "softmax", "--tokens", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert_plain(result.stdout)
    assert "x eager" in result.stdout and "lazyops torch" in result.stdout and "torch eager" in result.stdout
    assert "not timed: triton" in result.stdout  # no GPU, no interpreter: said once, not timed


def test_a_backend_that_cannot_build_the_kernel_exits_1(env, fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])  # its factory returns a tuple, not a kernel
    result = lazyops_cli("bench", "rmsnorm", "--backend", "ext,torch", "--tokens", "1", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failed" in result.stdout and "lazyops ext" in result.stdout
    assert "Traceback" not in result.stderr


def test_bad_arguments_exit_2(env):
    assert_one_line_error(lazyops_cli("bench", "nope", env=env), 2, "no kernel 'nope'; the kernels are")
    result = lazyops_cli("bench", "--tokens", "1,x", env=env)
    assert result.returncode == 2 and "not a comma list of token counts" in result.stderr
    assert_one_line_error(lazyops_cli("bench", "--backend", "nope", env=env), 2, "no backend named 'nope'")
