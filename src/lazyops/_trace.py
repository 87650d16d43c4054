"""``LAZYOPS_TRACE``: a JSON line per kernel factory's first construction, to see what a run really built.

One line per kernel (or, with ``LAZYOPS_TRACE_ARGS=1``, per distinct argument combination) keeps the file
small enough to read after a long serving run, while still answering "which backend built rmsnorm, with what,
and how long did building take". Lines are appended with one ``write`` each, so processes sharing a file do not
interleave within a line.

Tracing is an observer: it must never break the kernel it observes. A trace that cannot be written (a full disk,
a directory, no permission, a name too long) is reported once, on stderr, and tracing stops for the rest of the
configuration; the kernel is built and returned as if tracing were off.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

from lazyops._once import fork_safe


class Tracer:
    def __init__(self, path: str, with_args: bool, rank: int, report_failure: Callable[[str], None]) -> None:
        self.path = path
        self.with_args = with_args
        self.rank = rank
        self._report_failure = report_failure
        self._seen: set[Any] = set()
        self._failed = False
        self._lock = threading.Lock()
        fork_safe(self)

    def constructed(
        self, kernel: str, backend: str, reason: str, args: tuple[Any, ...], kwargs: dict[str, Any], seconds: float
    ) -> None:
        """Append the line for this construction, if it is the first of its kind; never raises."""
        try:
            arguments = _describe_arguments(args, kwargs) if self.with_args else None
        except Exception as error:  # noqa: BLE001 - an argument whose repr() raises: traced, not fatal
            arguments = f"<arguments could not be described: {type(error).__name__}>"
        key = (kernel, arguments)
        with self._lock:
            if self._failed or key in self._seen:
                return
            record: dict[str, Any] = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "pid": os.getpid(),
                "rank": self.rank,
                "kernel": kernel,
                "backend": backend,
                "reason": reason,
                "construct_ms": round(seconds * 1e3, 3),
            }
            if arguments is not None:
                record["args"] = arguments
            try:
                _append(self.path, json.dumps(record) + "\n")
            except (OSError, ValueError) as error:
                self._failed = True
                failure = f"{type(error).__name__}: {error}"
            else:
                self._seen.add(key)  # only once written: a line that failed is not a line that exists
                return
        self._report_failure(
            f"lazyops: LAZYOPS_TRACE={self.path!r} cannot be written ({failure}); tracing is off until the next "
            "configure(), and kernels are unaffected"
        )

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


def _append(path: str, line: str) -> None:
    """Append ``line`` to the regular file ``path`` in one write; a FIFO or a device is an ``OSError``: opening a
    FIFO without O_NONBLOCK blocked the first factory call forever (issue 33.4)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
    descriptor = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(f"not a regular file: {path!r}")
        os.write(descriptor, line.encode("utf-8"))
    finally:
        os.close(descriptor)


def _describe_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A stable text of the construction arguments (``torch.bfloat16`` stays readable as such)."""
    parts = [repr(value) for value in args] + [f"{key}={value!r}" for key, value in sorted(kwargs.items())]
    return ", ".join(parts)
