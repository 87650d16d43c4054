"""lazyops which NAME: where one kernel resolves under the current environment, and why.

Exit status: 0; 1 when NAME is not a kernel or is unavailable (the message says where it is available, or the
nearest kernel names); 2 when the configuration is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys

from lazyops.cli._errors import FOUND_PROBLEMS, OK, CommandError

HELP = "where one kernel resolves now, and why"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="a kernel name, e.g. rmsnorm_tl")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a sentence")


def main(args: argparse.Namespace) -> int:
    import lazyops

    name = args.name
    if name in lazyops.__all__ or (
        not name.startswith("_") and name in vars(lazyops) and name not in lazyops.kernels()
    ):
        value = getattr(lazyops, name)
        kind = "module" if isinstance(value, type(sys)) else "function" if callable(value) else "name"
        raise CommandError(
            f"{name!r} is not a kernel: it is a public {kind} of lazyops (lazyops.{name}). `lazyops list` names "
            "the kernels",
            exit_status=FOUND_PROBLEMS,
        )
    try:
        resolution = lazyops.which(name)
    except AttributeError as error:  # KernelUnavailableError included
        raise CommandError(str(error), exit_status=FOUND_PROBLEMS) from None
    if args.json:
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
        return OK
    explanation = {
        "selected": "the selected backend exports it",
        "fallback-list": "LAZYOPS_FALLBACK forces it to the platform default",
        "inherited": f"the selected backend {','.join(resolution.lacking)!r} lacks it",
    }[resolution.reason]
    print(f"{name}: {resolution.backend} ({resolution.reason}: {explanation})")
    return OK
