"""``lazyops trace`` and ``lazyops warmup``: reading construction traces back, safely, and building from them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cli_support import assert_one_line_error, assert_plain, lazyops_cli


def record(kernel: str, args: str | None, backend: str = "torch", pid: int = 1) -> str:
    line = {
        "time": "2026-11-30T12:00:00+0000",
        "pid": pid,
        "rank": 0,
        "kernel": kernel,
        "backend": backend,
        "reason": "selected",
        "construct_ms": 1.0,
    }
    if args is not None:
        line["args"] = args
    return json.dumps(line)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """A server's trace: two processes, rmsnorm in two spellings of one configuration plus another, and rope."""
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "\n".join(
            [
                record("rmsnorm_tl", "256, torch.bfloat16", pid=1),
                record("rmsnorm_tl", "256, 'bfloat16'", pid=1),
                record("rmsnorm_tl", "256, torch.bfloat16", pid=2),
                record("rmsnorm_tl", "128, torch.float16, eps=1e-05", pid=2),
                record("rope_tl", "64, torch.bfloat16, is_neox=False", pid=2),
                '{"kernel": "softmax_tl", "backe',  # a process killed mid-write
            ]
        )
        + "\n"
    )
    return path


def test_trace_summarises_kernels_and_marks_what_the_port_lacks(env, fake_backends, trace):
    fake_backends.make("halfport", ["rmsnorm_tl"])
    env["LAZYOPS_BACKEND"] = "halfport"
    result = lazyops_cli("trace", str(trace), "--json", env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["records"] == 5 and summary["processes"] == 2 and len(summary["skipped"]) == 1
    assert summary["compared_with"] == "halfport"
    kernels = {k["kernel"]: k for k in summary["kernels"]}
    assert kernels["rmsnorm_tl"]["built"] == 4 and kernels["rmsnorm_tl"]["status"] == "exports"
    assert [c["built"] for c in kernels["rmsnorm_tl"]["configurations"]] == [3, 1]  # 'bfloat16' is torch.bfloat16
    assert kernels["rope_tl"]["status"] == "lacks" and kernels["rope_tl"]["note"] == "inherits torch"

    table = lazyops_cli("trace", str(trace), "--check", env=env)
    assert table.returncode == 1
    assert_plain(table.stdout)
    assert "LACKS" in table.stdout and "halfport lacks 1 of 2 traced kernels: rope_tl" in table.stdout
    assert "skipped" in table.stderr and "trace.jsonl:6" in table.stderr

    against = lazyops_cli("trace", str(trace), "--backend", "torch", "--check", env=env)
    assert against.returncode == 0 and "torch exports every traced kernel" in against.stdout


def test_trace_errors_are_one_line(env, tmp_path):
    assert_one_line_error(lazyops_cli("trace", str(tmp_path / "missing.jsonl"), env=env), 2, "cannot read the trace")
    assert lazyops_cli("trace", env=env).returncode == 2  # FILE is required
    debug = lazyops_cli("trace", str(tmp_path / "missing.jsonl"), "--debug", env=env)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_warmup_builds_each_traced_configuration_once(env, trace):
    result = lazyops_cli("warmup", "--from-trace", str(trace), "--tokens", "1,3", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    built = [(k["kernel"], k["args"]) for k in report["kernels"]]
    assert built == [
        ("rmsnorm_tl", "256, torch.bfloat16"),
        ("rmsnorm_tl", "128, torch.float16, eps=1e-05"),
        ("rope_tl", "64, torch.bfloat16, is_neox=False"),
    ]
    assert all(k["error"] is None and k["build_s"] >= 0 and k["calls_s"] > 0 for k in report["kernels"])

    table = lazyops_cli("warmup", "--from-trace", str(trace), "--tokens", "0", env=env)
    assert table.returncode == 0, table.stderr
    assert_plain(table.stdout)
    assert "3 configurations, built only" in table.stdout and "done in" in table.stdout


def test_warmup_refuses_a_trace_it_cannot_use(env, tmp_path):
    bare = tmp_path / "bare.jsonl"
    bare.write_text(record("rmsnorm_tl", None) + "\n")
    assert_one_line_error(lazyops_cli("warmup", "--from-trace", str(bare), env=env), 2, "LAZYOPS_TRACE_ARGS=1")

    marker = tmp_path / "pwned"
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text(record("rmsnorm_tl", f"__import__('os').system('touch {marker}')") + "\n")
    assert_one_line_error(
        lazyops_cli("warmup", "--from-trace", str(hostile), env=env), 2, "is neither a literal nor a torch dtype"
    )
    assert not marker.exists()


def test_warmup_reports_a_backend_that_cannot_run_here_and_exits_1(env, tmp_path):
    gpu_trace = tmp_path / "gpu.jsonl"
    gpu_trace.write_text(record("softmax_tl", "256, torch.bfloat16", backend="triton") + "\n")
    result = lazyops_cli("warmup", "--from-trace", str(gpu_trace), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failed" in result.stdout and "cannot run here" in " ".join(result.stdout.split())


def test_argument_texts_are_read_without_eval():
    import torch

    from lazyops.cli._traces import parse_arguments

    assert parse_arguments("4096, torch.bfloat16, eps=1e-06") == ((4096, torch.bfloat16), {"eps": 1e-06})
    assert parse_arguments("128, 'float16', is_neox=True") == ((128, "float16"), {"is_neox": True})
    assert parse_arguments("") == ((), {})
    for hostile in ("open('x')", "torch.load('x')", "torch.nn", "*a", "**k", "1) + (2", "x"):
        with pytest.raises(ValueError):
            parse_arguments(hostile)


def test_tilelang_compile_logs_are_silenced_but_warnings_stay():
    from lazyops._backends.tilelang._runtime import quiet_tilelang

    logger = logging.getLogger("tilelang")
    child = logging.getLogger("tilelang.jit.kernel")
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Collect()
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # what TileLang sets at its import
    try:
        with quiet_tilelang():
            with quiet_tilelang():
                child.info("TileLang begins to compile kernel")
            child.info("TileLang completes to compile kernel")
            child.warning("a real warning")
        assert logger.level == logging.INFO
        child.info("after the compile")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
    assert seen == ["a real warning", "after the compile"]


def test_a_line_that_is_not_a_record_says_what_is_wrong_with_it(tmp_path):
    from lazyops.cli._errors import CommandError
    from lazyops.cli._traces import read_traces
    from lazyops.cli.warmup import jobs_from_traces

    path = tmp_path / "t.jsonl"
    path.write_text('{"kernel": "rmsnorm_tl", "args": "256"}\n[1, 2]\n{"kernel": "rmsnorm_tl", "ba\n')
    assert read_traces([str(path)]).skipped == [
        f"{path}:1: not a trace record: it has no 'backend' field",
        f"{path}:2: not a trace record: a JSON array, not an object",
        f"{path}:3: not JSON (column 26: Unterminated string starting at)",
    ]
    with pytest.raises(
        CommandError, match=r"holds no trace record: 3 lines skipped, the first .*:1: not a trace record"
    ):
        jobs_from_traces([str(path)], out=None)


def test_trace_counts_read_as_english(tmp_path, capsys):
    from lazyops.__main__ import main

    path = tmp_path / "t.jsonl"
    path.write_text(record("rmsnorm_tl", "256, torch.bfloat16") + "\n")
    assert main(["trace", str(path), "--backend", "torch"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 file, 1 record from 1 process" in out and "(1 kernel, 1 configuration)" in out


# -- hostile trace files (issue 27.14) ------------------------------------------------------------------------------
#: A kernel name that would set the terminal's title and clear its screen.
ESCAPES = "rmsnorm_tl\x1b]0;pwned\x07\x1b[2J"


def hostile_lines() -> list[str]:
    return [
        "[" * 100_000 + "]" * 100_000,  # nested beyond the JSON reader's recursion
        json.dumps({"kernel": "rmsnorm_tl", "backend": "torch", "pid": [1]}),  # unhashable
        '{"kernel": "rms\\ud800norm_tl", "backend": "torch", "args": "256, torch.float32"}',  # a lone surrogate
        json.dumps({"kernel": ESCAPES, "backend": "torch\x1b[31m", "args": "1\x1b[2J"}),
    ]


def test_hostile_lines_are_skipped_with_a_reason_or_read(tmp_path):
    from lazyops.cli._traces import read_traces

    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(hostile_lines()) + "\n")
    log = read_traces([str(path)])
    assert log.skipped == [
        f"{path}:1: not a trace record: JSON nested too deeply to read",
        f"{path}:2: not a trace record: 'pid' must be a number, not a JSON array",
    ]
    assert [r.kernel for r in log.records] == ["rms\ud800norm_tl", ESCAPES]


def test_trace_of_a_hostile_file_prints_every_name_escaped(env, tmp_path):
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(hostile_lines()) + "\n")
    result = lazyops_cli("trace", str(path), env=env)
    assert result.returncode == 0, result.stderr
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream
    assert_plain(result.stdout)
    out = "".join(result.stdout.split())
    assert "rms\\ud800norm_tl" in out and "rmsnorm_tl\\x1b]0;pwned\\x07\\x1b[2J" in out


def test_fancy_output_escapes_names_too():
    import io

    from lazyops.cli._output import Output

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    output = Output(stream=stream, errors=Terminal())
    assert output.fancy
    output.line(("kernel: ", "head"), ESCAPES)
    output.table(["kernel"], [[ESCAPES], [("rms\ud800norm_tl", "fail")]])
    written = stream.getvalue()
    assert "\x1b]0;" not in written and "\x1b[2J" not in written and "\x07" not in written and "\ud800" not in written
    assert "pwned" in written


def test_warmup_refuses_sizes_beyond_max_elements_before_allocating(env, tmp_path):
    """Under a 4 GiB address-space limit: a trace asking for 4e9 elements, or a 1e5 x 1e5 GEMM, is refused by its
    row; a small configuration still builds."""
    import resource
    import subprocess
    import sys

    path = tmp_path / "big.jsonl"
    path.write_text(
        "\n".join(
            [
                record("rmsnorm_tl", "4000000000, torch.bfloat16"),
                record("matmul_tl", "100000, 100000, torch.bfloat16"),
                record("rmsnorm_tl", "64, torch.float32"),
            ]
        )
        + "\n"
    )

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    result = subprocess.run(
        [sys.executable, "-m", "lazyops", "warmup", "--from-trace", str(path), "--json"],
        env=env,
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [job["error"] for job in json.loads(result.stdout)["kernels"]]
    assert errors[0].startswith("refused: it names a size of 4,000,000,000, over the limit of 2,147,483,648")
    assert errors[1].startswith("refused: one call at M = 1 moves about 10,000,200,000 elements")
    assert errors[2] is None

    lowered = lazyops_cli("warmup", "--from-trace", str(path), "--max-elements", "10", "--tokens", "0", env=env)
    assert lowered.returncode == 1 and "3 failed" in lowered.stdout


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize(
    "command", [["trace"], ["warmup", "--from-trace"], ["tune", "--backends", "torch", "--from-trace"]]
)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_trace_that_is_not_a_regular_file_is_refused_without_blocking(env, tmp_path, command, special):
    """Issue 33.4: a FIFO blocked trace, warmup and tune forever; a link to /dev/zero ended in MemoryError."""
    import os

    path = tmp_path / "t"
    if special == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(special)
    result = lazyops_cli(*command, str(path), env=env, cwd=tmp_path)
    assert_one_line_error(result, 2, "not a regular file")


def test_a_trace_line_too_long_is_skipped_not_held(tmp_path):
    from lazyops.cli import _traces

    path = tmp_path / "trace.jsonl"
    path.write_text("x" * (_traces.MAX_LINE_BYTES * 3) + "\n" + record("rmsnorm_tl", "64, torch.float32"))
    log = _traces.read_traces([str(path)])
    assert [r.kernel for r in log.records] == ["rmsnorm_tl"]
    assert log.skipped == [f"{path}:1: not a trace record: longer than 1,048,576 bytes"]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_lazyops_trace_naming_a_fifo_does_not_block_the_factory(tmp_path):
    """Issue 33.4: LAZYOPS_TRACE=<a FIFO> blocked the first factory call forever; now it is said once, traced off."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "trace"
    os.mkfifo(fifo)
    code = "import lazyops, torch; k = lazyops.rmsnorm_tl(64, torch.float32); print('built')"
    environment = dict(os.environ, LAZYOPS_TRACE=str(fifo), LAZYOPS_BACKEND="torch")
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "built" in result.stdout, result.stderr
    assert "cannot be written" in result.stderr


@pytest.mark.parametrize("command", [["warmup"], ["tune", "--backends", "torch", "--output", "plan.json"]])
def test_a_kv_cache_too_big_is_refused_before_it_is_allocated(env, tmp_path, command):
    """Issue 33.7: block_size=1048576 made warmup allocate 4 GiB a cache and tune 192 GiB: the guard counted what a
    call moves, not what its inputs hold."""
    path = tmp_path / "cache.jsonl"
    path.write_text(
        record("paged_attention_tl", "8, 8, 256, torch.bfloat16, block_size=1048576")
        + "\n"
        + record("kv_cache_write_tl", "8, 256, torch.bfloat16, block_size=1048576")
        + "\n"
    )
    result = lazyops_cli(*command, "--from-trace", str(path), "--tokens", "1", env=env, cwd=tmp_path)
    text = " ".join(result.stdout.split())
    assert result.returncode in (1, 2) and text.count("its inputs at M = 1 hold about") == 2, (
        result.stdout + result.stderr
    )
