"""What every GPU result file records about where it was made: date, device, versions, the exact command."""

from __future__ import annotations

import importlib
import shlex
import sys
from datetime import datetime, timezone
from typing import Any


def describe_environment(torch: Any, device: str, cpu_note: str) -> dict[str, Any]:
    """The header facts of a result file; ``cpu_note`` says what a run on the host means (it is no GPU result)."""
    versions = {"torch": torch.__version__}
    for package in ("triton", "tilelang"):
        try:
            versions[package] = getattr(importlib.import_module(package), "__version__", "?")
        except Exception as error:  # noqa: BLE001 - recorded: a missing package is a fact of the environment
            message = str(error).splitlines()[0] if str(error) else ""
            versions[package] = f"not importable ({type(error).__name__}: {message})"
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({cpu_note})",
        "versions": versions,
        "python": sys.version.split()[0],
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
    }
