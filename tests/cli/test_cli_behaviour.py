"""What every subcommand shares: light imports, help, a terminal (fancy) or not (plain), the missing extra."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_support import ESCAPE, assert_one_line_error, lazyops_cli

CLI_LIBRARIES = ["rich", "matplotlib", "torch", "hypothesis", "lazyops.cli._output"]


def test_import_lazyops_and_building_the_parser_import_no_cli_library(env):
    code = f"""
        import json, sys
        import lazyops
        first = [name for name in {CLI_LIBRARIES!r} if name in sys.modules]
        from lazyops.__main__ import _parser
        _parser().format_help()
        print(json.dumps([first, [name for name in {CLI_LIBRARIES!r} if name in sys.modules]]))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [[], []]


def test_help_lists_the_subcommands(env):
    result = lazyops_cli("--help", env=env)
    assert result.returncode == 0
    for command in ("doctor", "bench", "warmup", "trace", "list", "which", "stubs"):
        assert command in result.stdout
    assert "exit status" in lazyops_cli("doctor", "--help", env=env).stdout.lower()


def test_a_terminal_gets_colour_and_no_color_gets_plain_text(env, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"kernel": "nope_tl", "backend": "torch", "args": "1"}\n')

    def on_a_terminal(**variables: str) -> str:
        leader, follower = pty.openpty()
        process = subprocess.Popen(
            [sys.executable, "-m", "lazyops", "trace", str(trace)],
            env={**env, "TERM": "xterm-256color", "COLUMNS": "100", **variables},
            stdout=follower,
            stderr=follower,
            stdin=subprocess.DEVNULL,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=120)
        os.close(leader)
        return b"".join(chunks).decode()

    fancy = on_a_terminal()
    assert "nope_tl" in fancy and ESCAPE.search(fancy)
    plain = on_a_terminal(NO_COLOR="1")
    assert "nope_tl" in plain and not ESCAPE.search(plain)
    assert "unknown" in plain  # no backend exports nope_tl


def test_without_the_cli_extra_the_error_says_what_to_install(env, tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "rich").mkdir(parents=True)
    (shadow / "rich" / "__init__.py").write_text("raise ImportError('rich is not installed')\n")
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env["PYTHONPATH"]])
    assert_one_line_error(lazyops_cli("doctor", env=env), 2, "pip install 'lazyops[cli]'")


# -- the same options, help and mistakes for every subcommand (issue 27.8) -----------------------------------------
#: The least each subcommand needs on its command line.
REQUIRED_ARGUMENTS = {"which": ["rmsnorm_tl"], "trace": ["trace.jsonl"], "plan": ["check", "plan.json"]}


def test_every_subcommand_takes_debug_and_has_a_description():
    from lazyops.__main__ import _parser

    parser = _parser()
    (subparsers,) = [a for a in parser._actions if a.dest == "command"]
    assert {"list", "which", "stubs", "doctor"} <= set(subparsers.choices)
    for command, subparser in subparsers.choices.items():
        args = parser.parse_args([command, *REQUIRED_ARGUMENTS.get(command, []), "--debug"])
        assert args.debug is True, command
        assert subparser.description and f"lazyops {command}" in subparser.description, command


def test_version_is_the_single_sourced_one(capsys):
    import lazyops
    from lazyops.__main__ import _parser

    with pytest.raises(SystemExit) as stopped:
        _parser().parse_args(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"lazyops {lazyops.__version__}"


def test_the_build_reads_the_version_from_the_package_without_importing_it(tmp_path):
    """pyproject.toml declares the version dynamic, read from lazyops.__version__ by parsing, not importing (torch
    and lazyops itself made unimportable)."""
    import lazyops

    pyproject = Path(lazyops.__file__).resolve().parents[2] / "pyproject.toml"
    code = f"""
        import sys
        sys.modules["torch"] = sys.modules["lazyops"] = None
        from setuptools.config.pyprojecttoml import read_configuration
        print(read_configuration({str(pyproject)!r}, expand=True)["project"]["version"])
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == lazyops.__version__
    assert "\nversion =" not in pyproject.read_text().split("[project]", 1)[1].split("\n[", 1)[0]


def test_a_mistyped_subcommand_or_choice_gets_a_did_you_mean(capsys):
    from lazyops.__main__ import _parser

    for argv, hint in ((["lst"], "Did you mean 'list'?"), (["doctor", "--dtype", "bfloat61"], "'bfloat16'")):
        with pytest.raises(SystemExit) as stopped:
            _parser().parse_args(argv)
        assert stopped.value.code == 2
        assert hint in capsys.readouterr().err


def test_an_unknown_backend_option_names_the_nearest():
    from lazyops.cli._errors import unknown_names

    error = unknown_names("--backend", "backend", ["torh", "xyz"], ["torch", "triton"])
    assert str(error) == "--backend: no backend named 'torh' (did you mean 'torch'?), 'xyz'; known: torch, triton"


def test_counts_agree_with_their_nouns():
    from lazyops.cli._output import count

    assert [count(1, "kernel"), count(2, "kernel"), count(0, "process", "processes")] == [
        "1 kernel",
        "2 kernels",
        "0 processes",
    ]


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["which", "rmsnorm_tl"]])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(env, args):
    """``lazyops list | head``: the reader gone before the first write (its end closed before the start, so no race)
    ends the command with a SIGPIPE-ended tool's status and nothing on stderr, not a traceback or a usage error."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "lazyops", *args], env=env, stdout=writer, stderr=subprocess.PIPE, text=True,
            timeout=300,
        )  # fmt: skip
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (141, "")
