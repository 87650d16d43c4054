"""The ``lazyops`` command line (also ``python -m lazyops``): the parser, built from ``lazyops.cli``, and dispatch.

Each subcommand is a module of ``lazyops.cli`` (its help, arguments and ``main``); the exit statuses, the same for
every subcommand, are ``lazyops.cli._errors``'. Building the parser imports neither torch nor rich, so ``lazyops
--help`` is instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    import lazyops
    from lazyops.cli import Parser, add_subcommands

    parser = Parser(prog="lazyops", description="One lazy namespace of compute-kernel factories.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {lazyops.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error, not just its message")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_subcommands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        status: int = args.run(args)  # each subcommand reports its own errors as one line and an exit status
        return status
    except BrokenPipeError:
        from lazyops.cli import reader_gone

        return reader_gone()


if __name__ == "__main__":
    sys.exit(main())
