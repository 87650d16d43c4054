"""``LAZYOPS_TRACE``: a JSON line per kernel factory's first construction, to see what a run really built.

One line per kernel (or, with ``LAZYOPS_TRACE_ARGS=1``, per distinct argument combination) keeps the file
small enough to read after a long serving run, while still answering "which backend built rmsnorm, with what,
and how long did building take". Lines are appended with one ``write`` each, so processes sharing a file do not
interleave within a line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from lazyops._config import current_rank


class Tracer:
    def __init__(self, path: str, with_args: bool) -> None:
        self.path = path
        self.with_args = with_args
        self._seen: set[Any] = set()
        self._lock = threading.Lock()

    def constructed(self, kernel: str, backend: str, reason: str, args: tuple, kwargs: dict, seconds: float) -> None:
        arguments = _describe_arguments(args, kwargs) if self.with_args else None
        key = (kernel, arguments)
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            record = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "pid": os.getpid(),
                "rank": current_rank(),
                "kernel": kernel,
                "backend": backend,
                "reason": reason,
                "construct_ms": round(seconds * 1e3, 3),
            }
            if arguments is not None:
                record["args"] = arguments
            with open(self.path, "a", encoding="utf-8") as trace:
                trace.write(json.dumps(record) + "\n")


def _describe_arguments(args: tuple, kwargs: dict) -> str:
    """A stable text of the construction arguments (``torch.bfloat16`` stays readable as such)."""
    parts = [repr(value) for value in args] + [f"{key}={value!r}" for key, value in sorted(kwargs.items())]
    return ", ".join(parts)
