"""Tuned choices kept as data beside the backend that reads them: ``<backend>/configs/<op>.json``.

A file holds one table per device, keyed by the name torch gives the device (``torch.cuda.get_device_name()``, for
example ``"NVIDIA H200"``), and names the table every other device takes (``"default"``), as vLLM keeps its tuned
kernel configurations (``configs/<op>/<device>.json``, a default where none matches). Only the values a
measurement chose live there; the rule that picks among them stays in the backend's code, and why each value was
chosen in docs/decisions/. A file is read once per process, when the first kernel that needs it is built (or its
module imported), never on a call.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any


def device_table(path: Path, device: str | None) -> dict[str, Any]:
    """The table of the file at ``path`` for the device named ``device``: its own where the file has one, else the
    file's default (also for None: no device, as in Triton's interpreter)."""
    default, tables = _read(path)
    table: dict[str, Any] = tables[device] if device in tables else tables[default]
    return table


@functools.cache
def _read(path: Path) -> tuple[str, dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["default"], data["tables"]
