"""Helpers of the stub tests: running tools in a clean environment, and the wheel-installed lazyops they check."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: Files a user of lazyops might write, checked by mypy, pyright and jedi against the installed wheel.
USER_CODE = HERE / "user_code"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a tool run: no lazyops settings, no PYTHONPATH that could reach ``src/``."""
    dropped = ("PYTHONPATH", "EAGER_IMPORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYOPS_") and k not in dropped}
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=timeout)


def lazyops_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m lazyops ARGS`` in this test environment (the source tree), in ``env`` or a clean one."""
    return subprocess.run(
        [sys.executable, "-m", "lazyops", *args], cwd=ROOT, env=env or clean_env(), capture_output=True, text=True,
        timeout=600,
    )


@dataclass(frozen=True)
class InstalledWheel:
    """lazyops installed from its wheel into a fresh venv; ``python`` is that venv's interpreter."""

    wheel: Path
    venv: Path
    python: Path
    site_packages: Path
    workdir: Path

    @property
    def mypy_cache(self) -> Path:
        """One cache for every mypy run on this venv: torch's types are read once, not once a run."""
        return self.workdir.parent / "mypy_cache"

    def env(self, **extra: str) -> dict[str, str]:
        path = f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return clean_env(PATH=path, VIRTUAL_ENV=str(self.venv), **extra)

    def run(
        self, *args: str, cwd: Path | None = None, timeout: float = 600, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """``args`` run from the user's folder (no lazyops sources in it) with the venv's ``bin`` first on PATH."""
        return subprocess.run(
            args, cwd=cwd or self.workdir, env=self.env(**env), capture_output=True, text=True, timeout=timeout
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``args`` started as :meth:`run` would run them, in the background; read it with ``communicate()``."""
        return subprocess.Popen(
            args, cwd=self.workdir, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
