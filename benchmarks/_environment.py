"""What every GPU result file records about where it was made: date, device, versions, the exact command."""

from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: Packages whose versions a result depends on, beside torch (liger-kernel: a peer the benchmarks time).
PACKAGES = ("triton", "tilelang", "liger_kernel")


def describe_environment(torch: Any, device: str, cpu_note: str) -> dict[str, Any]:
    """The header facts of a result file; ``cpu_note`` says what a run on the host means (it is no GPU result)."""
    versions = {"torch": torch.__version__}
    for package in PACKAGES:
        try:
            module = importlib.import_module(package)
            versions[package] = getattr(module, "__version__", None) or _distribution_version(package)
        except Exception as error:  # noqa: BLE001 - recorded: a missing package is a fact of the environment
            message = str(error).splitlines()[0] if str(error) else ""
            versions[package] = f"not importable ({type(error).__name__}: {message})"
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else f"cpu ({cpu_note})",
        "versions": versions,
        "python": sys.version.split()[0],
        "commit": _commit(),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
    }


def _distribution_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package.replace("_", "-"))
    except PackageNotFoundError:
        return "?"


def _commit() -> str:
    """The checkout's commit (with ``+dirty`` when files differ), or ``?`` outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+dirty" if dirty else "")
