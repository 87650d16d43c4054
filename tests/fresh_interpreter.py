"""Running code in a fresh interpreter: import-time behaviour can only be observed from a new process.

A module of its own, not a conftest: ``tests/conftest.py`` and ``tests/plugin/conftest.py`` are both imported as
``conftest``, so ``from conftest import ...`` finds whichever was imported last when both directories are collected.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``env``; extra ``args`` become its ``sys.argv[1:]``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
