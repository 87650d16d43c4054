"""Running the command line as users run it: ``python -m lazyops ...`` in a fresh interpreter, stdout a pipe."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

#: Any ANSI escape sequence: plain output must have none.
ESCAPE = re.compile(r"\x1b\[")


def lazyops_cli(*args: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lazyops", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def assert_plain(text: str) -> None:
    """Plain output: no escape sequence, no line wider than 80 columns."""
    assert not ESCAPE.search(text), text
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide


def assert_one_line_error(result: subprocess.CompletedProcess, status: int, fragment: str) -> None:
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
