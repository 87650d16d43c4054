"""What every subcommand shares: light imports, help, a terminal (fancy) or not (plain), the missing extra."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap

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
