"""How the subcommands write: rich on a terminal, plain text in a pipe, a log or under ``NO_COLOR``.

Every subcommand renders through one :class:`Output`, so the choice between colour with live progress bars and
plain text is made once, here, by the same rule: *fancy* needs stdout to be a terminal, ``NO_COLOR`` unset
(https://no-color.org) and ``TERM`` not ``dumb``. Plain output has no escape sequence at all, ASCII table rules
and lines of at most 80 columns, so logs and tests read it as text; progress bars then stay silent rather than
fill a log with redraws. Progress goes to stderr in both modes, so ``--json`` on stdout stays parseable.

rich is imported when an ``Output`` is made, never at import of this module: ``lazyops --help`` and ``import
lazyops`` do not pay for it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from lazyops.cli._errors import MissingExtraError

#: Widest line plain output writes (a terminal wider than this gets rich's own wrapping at its width).
WIDTH = 80


#: The few meanings colour carries; plain output drops the colour and keeps the words.
STYLES = {
    "ok": "green",
    "fail": "bold red",
    "warn": "yellow",
    "dim": "dim",
    "head": "bold",
}


def rich_module(name: str) -> Any:
    """``rich.<name>``, or the one-line install hint when the ``cli`` extra is not installed."""
    import importlib

    try:
        return importlib.import_module(f"rich.{name}")
    except ImportError:
        raise MissingExtraError("rich") from None


def wants_fancy(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _pipe_closed() -> None:
    raise BrokenPipeError(errno.EPIPE, "the reader closed the output")


class Output:
    """One subcommand's output: tables, lines and progress, fancy or plain (see the module's docstring)."""

    def __init__(self, stream: TextIO | None = None, errors: TextIO | None = None) -> None:
        console = rich_module("console")
        self.stream = stream or sys.stdout
        self.errors = errors or sys.stderr
        self.fancy = wants_fancy(self.stream)
        common: dict[str, Any] = {"highlight": False, "markup": False, "emoji": False}
        if self.fancy:
            self.console = console.Console(file=self.stream, **common)
            self.error_console = console.Console(file=self.errors, **common)
        else:
            plain = dict(common, width=WIDTH, no_color=True, color_system=None, force_terminal=False)
            self.console = console.Console(file=_Trimmed(self.stream), **plain)
            self.error_console = console.Console(file=_Trimmed(self.errors), **plain)
        for each in (self.console, self.error_console):
            # rich exits with status 1 on a closed pipe; lazyops.__main__ answers it as every subcommand's (141)
            each.on_broken_pipe = _pipe_closed

    # -- text --------------------------------------------------------------------------------------------------
    def text(self, *parts: str | tuple[str, str]) -> Any:
        """A rich ``Text`` from plain parts and ``(text, style)`` parts; styles vanish in plain mode.

        Every part is :func:`printable`: names and values read from files (a trace's kernel names) reach the
        terminal escaped, in both modes.
        """
        text = rich_module("text").Text()
        for part in parts:
            if isinstance(part, tuple):
                words, style = part
                text.append(printable(words), style=STYLES.get(style, style) if self.fancy else None)
            else:
                text.append(printable(part))
        return text

    def line(self, *parts: str | tuple[str, str]) -> None:
        self.console.print(self.text(*parts))

    def heading(self, title: str) -> None:
        self.console.print()
        self.console.print(self.text((title, "head")))

    def warn(self, message: str) -> None:
        """A warning on stderr, which stays out of ``--json`` output."""
        self.error_console.print(self.text(("warning: ", "warn"), message))

    def json(self, payload: Any) -> None:
        """JSON on stdout, never styled or wrapped: meant to be parsed."""
        self.stream.write(json.dumps(payload, indent=2, default=str) + "\n")
        self.stream.flush()

    # -- tables ------------------------------------------------------------------------------------------------
    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        justify: Sequence[str] | None = None,
        no_wrap: Sequence[str] = (),
    ) -> None:
        """A table; each cell is text or ``(text, style)``. Wide columns wrap so that the table fits."""
        box = rich_module("box")
        table_module = rich_module("table")
        if self.fancy:
            table = table_module.Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
        else:
            # rich's SIMPLE_HEAD in ASCII: one rule under the header, nothing else
            rule = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
            table = table_module.Table(box=rule, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
        for index, column in enumerate(columns):
            table.add_column(
                column,
                justify=(justify[index] if justify else "left"),
                no_wrap=column in no_wrap,
                overflow="fold",
            )
        for row in rows:
            table.add_row(*(self.text(cell) if isinstance(cell, tuple) else self.text(str(cell)) for cell in row))
        self.console.print(table)

    # -- progress ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def progress(self, total: int, description: str) -> Iterator[Progress]:
        """A progress bar on stderr while the block runs (fancy only; it disappears when done)."""
        if not self.fancy or not wants_fancy(self.errors):
            yield Progress(None, None)
            return
        progress = rich_module("progress")
        bar = progress.Progress(
            progress.SpinnerColumn(),
            progress.TextColumn("{task.description}"),
            progress.BarColumn(bar_width=24),
            progress.MofNCompleteColumn(),
            progress.TimeElapsedColumn(),
            console=self.error_console,
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total)
            yield Progress(bar, task)


class _Trimmed:
    """A text stream without trailing blanks on its lines (rich pads table cells to their width)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write("".join(line.rstrip() + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False


class Progress:
    """The handle a ``with output.progress(...)`` block gets: say what runs now, then count it done."""

    def __init__(self, bar: Any, task: Any) -> None:
        self._bar, self._task = bar, task

    def working_on(self, what: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=what)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)


def printable(text: str) -> str:
    """``text`` with each character that is not printable written as its escape (``\\x1b``, ``\\ud800``,
    ``\\n``): a name from a file cannot set the terminal's title, clear its screen, forge a line, or fail to encode
    (a lone surrogate)."""
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def shortened(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters with ``...`` where it was cut: a table cell from a file stays a cell."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 kernel``, ``3 kernels``, ``2 processes``: a number with its noun agreeing (``plural`` when not noun+s)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def seconds(value: float | None) -> str:
    """A duration as people read it: ``0.42 s``, ``12 ms``, ``3.1 µs``."""
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.0f} ms" if value >= 0.01 else f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.1f} µs"
