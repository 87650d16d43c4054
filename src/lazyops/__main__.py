"""The ``lazyops`` command line (also ``python -m lazyops``): what is installed and where each kernel comes from.

``lazyops list``   every kernel × every backend, and where each kernel resolves under the current environment
``lazyops which``  one kernel's resolution and the reason for it
``lazyops stubs``  write (or ``--check``) the generated type stubs

Exit status: 0 on success; 1 when the answer is "no" (a kernel is unavailable, a name is not a kernel, the stubs
are stale); 2 when the command cannot do what was asked (a configuration or backend error, a file that cannot be
written): the message, one line on stderr, says which variable, package or path to fix. ``--debug`` adds the
traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_NO, EXIT_CANNOT = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lazyops", description="One lazy namespace of compute-kernel factories.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error, not just its message")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="every kernel, which backends export it, and where it resolves now")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")

    which = commands.add_parser("which", help="where one kernel resolves now, and why")
    which.add_argument("name", help="a kernel name, e.g. rmsnorm_tl")
    which.add_argument("--json", action="store_true", help="print JSON instead of a sentence")

    stubs = commands.add_parser("stubs", help="generate the .pyi stubs of the namespace")
    stubs.add_argument("--check", action="store_true", help="exit 1 if the file differs from a fresh generation")
    stubs.add_argument(
        "--output",
        default=None,
        help="the file to write or check (default, in a source checkout: stubs/lazyops/__init__.pyi, which the "
        "package's stub links to; an installed lazyops needs it, e.g. typings/lazyops/__init__.pyi)",
    )
    stubs.add_argument(
        "--backends", default=None, help="comma list of backends whose kernels to include (default: the built-ins)"
    )

    from lazyops.cli import add_subcommands

    add_subcommands(commands)  # doctor, bench, warmup, trace: each sets args.run
    return parser


def _list(as_json: bool) -> int:
    from lazyops import _api

    report = _api.report()
    statuses = {name: reason or "ok" for name, reason in _api.backend_statuses().items()}
    rows: list[dict[str, Any]] = [
        {
            "kernel": source.kernel,
            "exported_by": list(source.exported_by),
            "backend": source.backend,
            "reason": source.reason if source.backend else f"unavailable: {source.unavailable}",
        }
        for source in report.kernels
    ]
    if as_json:
        listing = {
            "chain": list(report.chain),
            "strict": report.strict,
            "backends": statuses,
            "kernels": rows,
            "refused_entry_points": list(report.refused),
        }
        print(json.dumps(listing, indent=2))
        return EXIT_OK
    print(f"chain: {','.join(report.chain)}{' (strict)' if report.strict else ''}   platform default: {report.default}")
    print("backends:")
    for name, status in statuses.items():
        print(f"  {name:<10} {status}")
    for refusal in report.refused:
        print(f"  refused entry point: {refusal}")
    backends = report.backends
    width = max((len(row["kernel"]) for row in rows), default=6)
    print(f"{'kernel':<{width}}  " + "  ".join(f"{b:<8}" for b in backends) + "  resolves to")
    for row in rows:
        marks = "  ".join(f"{'yes' if b in row['exported_by'] else '-':<8}" for b in backends)
        target = f"{row['backend']} ({row['reason']})" if row["backend"] else row["reason"]
        print(f"{row['kernel']:<{width}}  {marks}  {target}")
    return EXIT_OK


def _which(name: str, as_json: bool) -> int:
    import lazyops

    if name in lazyops.__all__ or (
        not name.startswith("_") and name in vars(lazyops) and name not in lazyops.kernels()
    ):
        value = getattr(lazyops, name)
        kind = "module" if isinstance(value, type(sys)) else "function" if callable(value) else "name"
        print(
            f"lazyops: {name!r} is not a kernel: it is a public {kind} of lazyops (lazyops.{name}). "
            "`lazyops list` names the kernels",
            file=sys.stderr,
        )
        return EXIT_NO
    try:
        resolution = lazyops.which(name)
    except AttributeError as error:  # KernelUnavailableError included
        print(f"lazyops: {error}", file=sys.stderr)
        return EXIT_NO
    if as_json:
        print(
            json.dumps(
                {
                    "kernel": name,
                    "backend": resolution.backend,
                    "reason": resolution.reason,
                    "chain": list(resolution.chain),
                }
            )
        )
        return EXIT_OK
    explanation = {
        "selected": "the selected backend exports it",
        "fallback-list": "LAZYOPS_FALLBACK forces it to the platform default",
        "inherited": f"the selected backend {','.join(resolution.lacking)!r} lacks it",
    }[resolution.reason]
    print(f"{name}: {resolution.backend} ({resolution.reason}: {explanation})")
    return EXIT_OK


def _stubs(check: bool, output: str | None, backends: str | None) -> int:
    from lazyops._stubgen import main as stubs_main

    return stubs_main(check=check, output=output, backends=backends)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(args, "run"):
        status: int = args.run(args)  # lazyops.cli's subcommands report their own errors
        return status
    from lazyops._errors import LazyopsError

    try:
        if args.command == "list":
            return _list(args.json)
        if args.command == "which":
            return _which(args.name, args.json)
        return _stubs(args.check, args.output, args.backends)
    except (LazyopsError, OSError) as error:
        if args.debug:
            raise
        what = type(error).__name__
        if isinstance(error, OSError):
            path = error.filename if error.filename is not None else getattr(args, "output", None)
            message = f"cannot write {path!r}: {error.strerror or error}"
        else:
            message = str(error)
        print(f"lazyops: {what}: {message} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_CANNOT


if __name__ == "__main__":
    sys.exit(main())
