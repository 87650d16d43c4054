"""Reading ``LAZYOPS_TRACE`` files back: what ``lazyops trace`` summarises and ``lazyops warmup`` rebuilds.

A trace is JSON lines, one per first construction of a kernel factory (per distinct argument combination with
``LAZYOPS_TRACE_ARGS=1``), written by ``lazyops._trace``. The arguments are stored as the text of their reprs
(``4096, torch.bfloat16, eps=1e-06``), readable by people; :func:`parse_arguments` turns that text back into
values without ``eval``: the text is parsed as a call's argument list, each value must be a Python literal or a
``torch.<dtype>`` name, and anything else is refused. A trace file is input from elsewhere (another machine, a
server's log directory): nothing in it may run code.
"""

from __future__ import annotations

import ast
import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lazyops.cli._errors import CommandError


@dataclass
class Record:
    """One trace line."""

    kernel: str
    backend: str
    #: the arguments' text, or None when the trace was written without LAZYOPS_TRACE_ARGS=1
    args: str | None
    pid: int | None = None
    rank: int | None = None
    construct_ms: float | None = None
    where: str = ""


@dataclass
class TraceLog:
    records: list[Record] = field(default_factory=list)
    #: lines that are not a trace record: ``file:line: why`` (a process killed mid-write leaves half a line)
    skipped: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


#: The largest trace read (a plan's limit too): a long serving run's trace is a few thousand lines of ~200 bytes.
MAX_TRACE_BYTES = 64 * 1024 * 1024
#: The longest line read; a longer one is skipped, never held whole (issue 33.4: a link to /dev/zero).
MAX_LINE_BYTES = 1024 * 1024


def _lines(path: str) -> Iterator[str | None]:
    """The file's lines, read a bounded line at a time (None for a line over :data:`MAX_LINE_BYTES`); a regular
    file only, of at most :data:`MAX_TRACE_BYTES`: a FIFO must not block, nor /dev/zero exhaust memory (33.4)."""
    try:
        # O_NONBLOCK: opening a FIFO would wait for a writer; the kind is checked on the descriptor opened
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise CommandError(f"cannot read the trace {path!r}: {error.strerror or error}") from None
    with os.fdopen(descriptor, "rb") as trace:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise CommandError(f"cannot read the trace {path!r}: not a regular file")
        if status.st_size > MAX_TRACE_BYTES:
            raise CommandError(
                f"cannot read the trace {path!r}: {status.st_size:,} bytes, over a trace's limit of {MAX_TRACE_BYTES:,}"
            )
        total = 0
        while True:
            try:
                raw = trace.readline(MAX_LINE_BYTES + 1)
            except OSError as error:
                raise CommandError(f"cannot read the trace {path!r}: {error.strerror or error}") from None
            if not raw:
                return
            total += len(raw)
            if total > MAX_TRACE_BYTES:  # it grew while being read
                raise CommandError(f"cannot read the trace {path!r}: over a trace's limit of {MAX_TRACE_BYTES:,} bytes")
            if len(raw) > MAX_LINE_BYTES:
                while raw and not raw.endswith(b"\n"):  # the rest of the long line, a bounded piece at a time
                    raw = trace.readline(MAX_LINE_BYTES)
                    total += len(raw)
                yield None
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CommandError(f"{path!r} is not a lazyops trace (not UTF-8 text)") from None


def read_traces(paths: Iterable[str]) -> TraceLog:
    """Every record of every file; an unreadable file is a :class:`CommandError`, a malformed line is skipped."""
    log = TraceLog()
    for path in paths:
        log.files.append(path)
        for number, line in enumerate(_lines(path), 1):
            where = f"{path}:{number}"
            if line is None:
                log.skipped.append(f"{where}: not a trace record: longer than {MAX_LINE_BYTES:,} bytes")
                continue
            if not line.strip():
                continue
            try:
                data = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as error:
                log.skipped.append(f"{where}: not JSON (column {error.colno}: {error.msg})")
                continue
            except RecursionError:
                log.skipped.append(f"{where}: not a trace record: JSON nested too deeply to read")
                continue
            except ValueError as error:  # a number too long to convert, say
                log.skipped.append(f"{where}: not JSON ({error})")
                continue
            try:
                log.records.append(_record(data, where))
            except (ValueError, TypeError) as error:
                log.skipped.append(f"{where}: {error}")
    return log


#: The fields a trace record must have, each a string.
REQUIRED = ("kernel", "backend")
_JSON_NAMES = {
    list: "array",
    dict: "object",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _record(data: Any, where: str) -> Record:
    if not isinstance(data, dict):
        raise TypeError(f"not a trace record: a JSON {_json_name(data)}, not an object")
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        raise ValueError(f"not a trace record: it has no {' and no '.join(map(repr, missing))} field")
    kernel, backend, args = data["kernel"], data["backend"], data.get("args")
    if not isinstance(kernel, str) or not isinstance(backend, str) or not (args is None or isinstance(args, str)):
        raise TypeError("not a trace record: 'kernel', 'backend' (and 'args') must be strings")
    pid, rank, construct_ms = data.get("pid"), data.get("rank"), data.get("construct_ms")
    for name, value, kinds in (
        ("pid", pid, (int,)),
        ("rank", rank, (int,)),
        ("construct_ms", construct_ms, (int, float)),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            raise TypeError(f"not a trace record: {name!r} must be a number, not a JSON {_json_name(value)}")
    return Record(kernel, backend, args, pid, rank, construct_ms, where)


def _json_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), "value")


def parse_arguments(text: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``"4096, torch.bfloat16, eps=1e-06"`` -> ``((4096, torch.bfloat16), {"eps": 1e-06})``, or ``ValueError``.

    Literals (numbers, strings, booleans, None, tuples and lists of them) and ``torch.<dtype>`` names only.
    """
    try:
        call = ast.parse(f"f({text})", mode="eval").body
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id != "f":
            raise ValueError(f"cannot read the arguments {text!r}")
        args = tuple(_value(node, text) for node in call.args)
        kwargs = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ValueError(f"cannot read the arguments {text!r}: '**' is not an argument")
            kwargs[keyword.arg] = _value(keyword.value, text)
    except (SyntaxError, RecursionError, MemoryError):  # text nested deeply enough fails in the parser itself
        raise ValueError(f"cannot read the arguments {text[:80]!r}{'...' if len(text) > 80 else ''}") from None
    return args, kwargs


def _value(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        import torch

        dtype = getattr(torch, node.attr, None)
        if isinstance(dtype, torch.dtype):
            return dtype
        raise ValueError(f"{text!r}: torch.{node.attr} is not a torch dtype")
    if isinstance(node, (ast.Tuple, ast.List)):
        values = [_value(item, text) for item in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values
    if isinstance(node, ast.Starred):
        # ValueError, not TypeError: parse_arguments refuses every unreadable text alike
        raise ValueError(f"cannot read the arguments {text!r}: '*' is not an argument")
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(
            f"cannot read the arguments {text!r}: {ast.unparse(node)!r} is neither a literal nor a torch dtype"
        ) from None
