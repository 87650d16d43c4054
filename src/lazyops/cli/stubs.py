"""lazyops stubs: write the generated type stub of the namespace, or with --check compare it.

The stub (``stubs/lazyops/__init__.pyi`` in a source checkout, which the package's stub links to) declares every
kernel factory with its signature and docstring, so that type checkers and IDEs see the kernels that
``__getattr__`` hides. A project that installs a backend with more kernels writes its own:
``lazyops stubs --backends torch,triton,tilelang,mine --output typings/lazyops/__init__.pyi``.

Exit status: 0 when written or current; 1 with --check when the file is stale or missing (a diff on stderr); 2
when a backend is unknown or the file cannot be written.
"""

from __future__ import annotations

import argparse

from lazyops.cli._errors import CommandError

HELP = "write (or --check) the generated .pyi stub of the namespace"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from a fresh generation")
    parser.add_argument(
        "--output",
        default=None,
        help="the file to write or check (default, in a source checkout: stubs/lazyops/__init__.pyi, which the "
        "package's stub links to; an installed lazyops needs it, e.g. typings/lazyops/__init__.pyi)",
    )
    parser.add_argument(
        "--backends", default=None, help="comma list of backends whose kernels to include (default: the built-ins)"
    )


def main(args: argparse.Namespace) -> int:
    from lazyops._stubgen import main as write_stubs

    try:
        return write_stubs(check=args.check, output=args.output, backends=args.backends)
    except OSError as error:
        path = error.filename if error.filename is not None else args.output
        raise CommandError(f"cannot write {path!r}: {error.strerror or error}") from error
