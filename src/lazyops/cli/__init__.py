"""The ``lazyops`` subcommands: ``doctor``, ``list``, ``which``, ``bench``, ``warmup``, ``trace``, ``tune``,
``plan`` and ``stubs``.

One module per subcommand, each with ``HELP`` (its one-line summary), ``add_arguments(parser)`` and
``main(args) -> exit status``, its docstring the ``--help`` description; ``_output`` renders for all of them (rich
on a terminal, plain text otherwise), ``_errors`` holds the one set of exit statuses, ``_traces`` reads
``LAZYOPS_TRACE`` files. ``lazyops.__main__`` builds the parser from these and dispatches.

Importing this package or a subcommand module imports neither torch nor rich: ``lazyops --help`` stays instant,
and the heavy imports happen inside ``main`` (rich and matplotlib are the ``cli`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from lazyops.cli._errors import CLOSED_PIPE, INTERNAL, INTERRUPTED, USAGE, CommandError, did_you_mean

#: Each subcommand and its module, in the order ``lazyops --help`` lists them (``list`` is ``listing``: a module
#: named ``list`` would shadow the builtin in this package's namespace once imported).
SUBCOMMANDS = {
    "doctor": "doctor",
    "list": "listing",
    "which": "which",
    "bench": "bench",
    "warmup": "warmup",
    "trace": "trace",
    "tune": "tune",
    "plan": "plan",
    "stubs": "stubs",
}


class Parser(argparse.ArgumentParser):
    """argparse's parser, with a did-you-mean for a mistyped choice (a subcommand, ``--dtype``)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and isinstance(value, str) and value not in choices:
            hint = did_you_mean(value, map(str, choices))
            if hint:
                listed = ", ".join(map(repr, choices))
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}.{hint} (choose from {listed})")
        super()._check_value(action, value)


def add_subcommands(commands: Any) -> None:
    """Add each subcommand's parser to ``commands`` (an argparse subparsers action); ``args.run(args)`` runs it."""
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(f"lazyops.cli.{module_name}")
        parser = commands.add_parser(
            name, help=module.HELP, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(parser)
        # SUPPRESS: a `--debug` given before the subcommand (a top-level option) is not reset by this default.
        parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error"
        )
        parser.set_defaults(run=functools.partial(run, module.main))


def run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``command(args)``, with every error turned into one line on stderr and its exit status (see ``_errors``)."""
    try:
        status = command(args)
        sys.stdout.flush()  # here, not at exit: a reader that closed the pipe is answered in lazyops.__main__
        return status
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print("lazyops: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as error:
        if getattr(args, "debug", False):
            raise
        from lazyops.cli._output import printable

        status, message = describe(error)
        print(f"lazyops {args.command}: {printable(message)}", file=sys.stderr)
        return status


def reader_gone() -> int:
    """The reader of stdout closed it (``lazyops list | head``): stop quietly, with a SIGPIPE-ended tool's status.
    Python ignores SIGPIPE, so without this a closed pipe is a traceback; stdout goes to /dev/null so that the
    interpreter's last flush at exit cannot fail again (the recipe of the ``signal`` module's documentation)."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: no file descriptor behind stdout (a capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return CLOSED_PIPE


def describe(error: Exception) -> tuple[int, str]:
    """The exit status and the one line an error is reported with."""
    from lazyops._errors import BackendError, ConfigError

    text = " ".join(str(error).split())
    if isinstance(error, CommandError):
        return error.exit_status, text
    if isinstance(error, (ConfigError, BackendError)):
        return USAGE, f"{type(error).__name__}: {text}"
    if isinstance(error, OSError):
        return USAGE, text
    return INTERNAL, f"unexpected {type(error).__name__}: {text} (rerun with --debug for the traceback)"
