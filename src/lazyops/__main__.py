"""The ``lazyops`` command line (also ``python -m lazyops``): what is installed and where each kernel comes from.

``lazyops list``   every kernel × every backend, and where each kernel resolves under the current environment
``lazyops which``  one kernel's resolution and the reason for it
``lazyops stubs``  write (or ``--check``) the generated type stubs

Exit status: 0 on success, 1 when a kernel is unavailable or the stubs are stale, 2 for a configuration or
backend error (the message says which variable or package to fix).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lazyops", description="One lazy namespace of compute-kernel factories.")
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
    import lazyops

    state = lazyops._state()
    universe = state.universe()
    backends = lazyops.backends()
    rows: list[dict[str, Any]] = []
    for kernel in lazyops.kernels():
        exporters = [b for b in backends if b not in universe.unreadable and kernel in universe.exports(b)]
        where: dict[str, str | None]
        try:
            resolution = lazyops.which(kernel)
            where = {"backend": resolution.backend, "reason": resolution.reason}
        except lazyops.KernelUnavailableError as error:
            where = {"backend": None, "reason": f"unavailable: {error}"}
        rows.append({"kernel": kernel, "exported_by": exporters, **where})
    statuses = {name: state.unavailable_reason(name) or "ok" for name in backends}
    settings = state.settings()
    chain = list(settings.chain) if settings.chain is not None else [universe.default]
    if as_json:
        print(json.dumps({"chain": chain, "strict": settings.strict, "backends": statuses, "kernels": rows}, indent=2))
        return 0
    print(f"chain: {','.join(chain)}{' (strict)' if settings.strict else ''}   platform default: {universe.default}")
    print("backends:")
    for name, status in statuses.items():
        print(f"  {name:<10} {status}")
    width = max(len(row["kernel"]) for row in rows) if rows else 6
    header = f"{'kernel':<{width}}  " + "  ".join(f"{b:<8}" for b in backends) + "  resolves to"
    print(header)
    for row in rows:
        marks = "  ".join(f"{'yes' if b in row['exported_by'] else '-':<8}" for b in backends)
        target = f"{row['backend']} ({row['reason']})" if row["backend"] else row["reason"]
        print(f"{row['kernel']:<{width}}  {marks}  {target}")
    return 0


def _which(name: str, as_json: bool) -> int:
    import lazyops

    try:
        resolution = lazyops.which(name)
    except lazyops.KernelUnavailableError as error:
        print(f"lazyops: {error}", file=sys.stderr)
        return 1
    except AttributeError as error:
        print(f"lazyops: {error}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps({"kernel": name, "backend": resolution.backend, "reason": resolution.reason,
                          "chain": list(resolution.chain)}))
    else:
        explanation = {
            "selected": "the selected backend exports it",
            "fallback-list": "LAZYOPS_FALLBACK forces it to the platform default",
            "inherited": f"the selected backend {','.join(resolution.lacking)!r} lacks it",
        }[resolution.reason]
        print(f"{name}: {resolution.backend} ({resolution.reason}: {explanation})")
    return 0


def _stubs(check: bool, output: str | None, backends: str | None) -> int:
    from lazyops._stubgen import main as stubs_main

    return stubs_main(check=check, output=output, backends=backends)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(args, "run"):
        return args.run(args)  # lazyops.cli's subcommands report their own errors
    import lazyops

    try:
        if args.command == "list":
            return _list(args.json)
        if args.command == "which":
            return _which(args.name, args.json)
        return _stubs(args.check, args.output, args.backends)
    except (lazyops.ConfigError, lazyops.BackendError) as error:
        print(f"lazyops: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
