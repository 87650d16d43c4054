"""``lazyops bench``: the table, --json parsed back, --plot, and its exit statuses (the timing is lazyops.bench.engine's).

Nothing here asserts a timing: the figures are whatever this machine gives; what is checked is their shape (a
median inside its quartiles, every implementation sampled in every round), the marks and the output files.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from cli_support import assert_one_line_error, assert_plain, lazyops_cli

from lazyops.cli import bench


def test_bench_json_and_plot(env, tmp_path):
    plot = tmp_path / "bench.png"
    options = ["--backend", "torch", "--tokens", "1,4", "--rounds", "2", "--json", "--plot", str(plot)]
    result = lazyops_cli("bench", "rmsnorm", "matmul_tl", *options, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tokens"] == [1, 4] and report["sizes"] == "small" and report["dtype"] == "bfloat16"
    assert report["rounds"] == 2 and report["noisy_spread"] == 0.2
    rows = report["rows"]
    assert {(r["kernel"], r["impl"], r["tokens"]) for r in rows} == {
        (kernel, impl, m)
        for kernel in ("rmsnorm", "matmul")
        for impl in ("lazyops torch", "torch eager")
        for m in (1, 4)
    }
    for row in rows:
        assert row["error"] is None and row["us"] > 0 and row["rate"] > 0
        assert row["low_us"] <= row["us"] <= row["high_us"] and row["samples"] >= 2  # a block or more a round
        assert isinstance(row["noisy"], bool) and isinstance(row["ranked"], bool)
        assert row["unit"] == ("TFLOP/s" if row["kernel"] == "matmul" else "GB/s")
        assert row["x_eager"] == (1.0 if row["impl"] == "torch eager" else row["x_eager"]) and row["x_eager"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_table_fits_80_columns(env):
    result = lazyops_cli("bench", "softmax", "--tokens", "2", "--rounds", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert_plain(result.stdout)
    assert "x eager" in result.stdout and "spread" in result.stdout
    assert "lazyops torch" in result.stdout and "torch eager" in result.stdout
    assert "not timed: triton" in result.stdout  # no GPU, no interpreter: said once, not timed


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("missing/bench.png", "does not exist"),
        ("bench.txt", "matplotlib cannot write .txt"),
        ("bench", "a file without a suffix"),
        (".", "is a folder"),
    ],
)
def test_a_bad_plot_path_is_refused_before_anything_is_timed(env, tmp_path, name, fragment):
    """Issue 27.8: the path is checked first, so a typo costs neither the run nor its table."""
    result = lazyops_cli("bench", "rmsnorm", "--tokens", "1", "--plot", str(tmp_path / name), env=env)
    assert_one_line_error(result, 2, fragment)
    assert result.stdout == ""  # nothing was timed
    assert not (tmp_path / "missing").exists()


def test_a_backend_that_cannot_build_the_kernel_exits_1(env, fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])  # its factory returns a tuple, not a kernel
    result = lazyops_cli("bench", "rmsnorm", "--backend", "ext,torch", "--tokens", "1", "--rounds", "1", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failed" in result.stdout and "lazyops ext" in result.stdout
    assert "Traceback" not in result.stderr


def test_bad_arguments_exit_2(env):
    assert_one_line_error(lazyops_cli("bench", "xyzzy", env=env), 2, "no kernel 'xyzzy'; the kernels are")
    result = lazyops_cli("bench", "--tokens", "1,x", env=env)
    assert result.returncode == 2 and "not a comma list of token counts" in result.stderr
    result = lazyops_cli("bench", "--rounds", "0", env=env)
    assert result.returncode == 2 and "not a positive integer" in result.stderr
    assert_one_line_error(lazyops_cli("bench", "--backend", "nope", env=env), 2, "no backend named 'nope'")


def test_a_mistyped_kernel_or_backend_gets_a_did_you_mean(env):
    result = lazyops_cli("bench", "rmsnrom", env=env)
    assert_one_line_error(result, 2, "no kernel 'rmsnrom' (did you mean 'rmsnorm' or 'rmsnorm_fp8'?); the kernels are")
    result = lazyops_cli("bench", "rmsnorm", "--backend", "torh", env=env)
    assert_one_line_error(result, 2, "--backend: no backend named 'torh' (did you mean 'torch'?); known: torch")


# --- the marks and the plot, on rows made up here (no timing) ----------------------------------------------------


def row(kernel, impl, tokens, us, low, high, kind="lazyops", noisy=False):
    figures = {"us": us, "low_us": low, "high_us": high, "noisy": noisy, "rate": 1000.0 / us, "unit": "GB/s"}
    return SimpleNamespace(
        kernel=kernel, impl=impl, kind=kind, method="stream", tokens=tokens, dtype="bfloat16", error=None, **figures
    )


def made_up_rows():
    rows = []
    for kernel in ("rmsnorm", "softmax"):
        for m in (1, 8, 64):
            rows.append(row(kernel, "lazyops torch", m, 2.0 * m, 1.9 * m, 2.1 * m))
            # eager is noisy at M = 8 for softmax: neither row there may be ranked
            noisy = kernel == "softmax" and m == 8
            rows.append(row(kernel, "torch eager", m, 3.0 * m, 2.0 * m, 4.5 * m, "peer", noisy))
    return rows


def test_a_row_too_noisy_to_rank_is_marked(capsys):
    """Issue 27.9: a ratio read off a row (or an eager row) whose spread is over the limit is marked, with why."""
    from lazyops.cli._output import Output

    rows = made_up_rows()
    bench.add_speedups(rows)
    unranked = {(r.kernel, r.tokens, r.impl) for r in rows if r.ranked is False}
    assert unranked == {("softmax", 8, "lazyops torch"), ("softmax", 8, "torch eager")}
    bench.render(Output(), rows, "CPU", "bfloat16", "small", {})
    out = capsys.readouterr().out
    assert_plain(out)
    marked = [line for line in out.splitlines() if line.rstrip().endswith(bench.NOISY)]
    assert len(marked) == 2 and "1.50?" in marked[0]
    assert "over 20 %" in out and "--rounds" in out


def test_the_plot_keeps_one_colour_per_implementation_on_log_axes_with_the_spread():
    """Issue 27.9: the same colour for an implementation in every panel, log axes, an error bar per point."""
    from matplotlib import pyplot
    from matplotlib.container import ErrorbarContainer

    drawn = bench.figure(made_up_rows(), "test")
    try:
        panels = [axis for axis in drawn.axes if axis.get_visible()]
        assert [axis.get_title() for axis in panels] == ["rmsnorm", "softmax"]
        colours: dict[str, set] = {}
        for axis in panels:
            assert axis.get_yscale() == "log" and axis.get_xscale() == "log"
            bars = [c for c in axis.containers if isinstance(c, ErrorbarContainer)]
            assert len(bars) == 2
            for bar in bars:
                line = bar.lines[0]
                colours.setdefault(bar.get_label(), set()).add(line.get_color())
                low_high = bar.lines[2][0].get_segments()  # one vertical segment per point: the spread
                assert len(low_high) == 3 and all(seg[0][1] < seg[1][1] for seg in low_high)
        assert set(colours) == {"lazyops torch", "torch eager"}
        assert all(len(found) == 1 for found in colours.values())  # one colour in every panel
        assert len({next(iter(found)) for found in colours.values()}) == 2  # and a colour of its own
        assert [text.get_text() for text in drawn.legends[0].get_texts()] == ["lazyops torch", "torch eager"]
    finally:
        pyplot.close(drawn)


@pytest.mark.parametrize("command", ["bench", "tune"])
@pytest.mark.parametrize("tokens", ["99999999999999999999999", "2147483648", "1,1048577"])
def test_an_out_of_range_token_count_is_refused_up_front(env, tmp_path, command, tokens):
    """Issue 33.8: a count no allocation could hold exits 2 before anything is built, not 3 (or 1) after."""
    result = lazyops_cli(command, "rmsnorm", "--tokens", tokens, env=env, cwd=tmp_path)
    assert_one_line_error(result, 2, "token counts go up to 1,048,576")
    assert not (tmp_path / "lazyops-plan.json").exists()
