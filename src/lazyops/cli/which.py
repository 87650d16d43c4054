"""lazyops which NAME: where one kernel resolves under the current environment, and why.

The resolution reads names only; the backend it names is then asked whether it can run here (its package loaded,
its ``unavailable_reason()``), as building the kernel would: a backend that cannot is reported with why, and the
way out.

Exit status: 0; 1 when NAME is not a kernel or is unavailable (the message says where it is available, or the
nearest kernel names); 2 when the configuration is wrong, or NAME resolves to a backend that cannot load here.
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
    from lazyops._plan import check_in_force

    check_in_force()  # a plan that cannot be used fails every kernel access: exit 2, not an answer
    try:
        resolution = lazyops.which(name)
    except AttributeError as error:  # KernelUnavailableError included
        raise CommandError(str(error), exit_status=FOUND_PROBLEMS) from None
    from lazyops.cli._status import backend_status

    # Resolution reads names only; the kernel would then be built from this backend, so ask whether it can be.
    status = backend_status(resolution.backend)
    if args.json:
        print(
            json.dumps(
                {
                    "kernel": name,
                    "backend": resolution.backend,
                    "reason": resolution.reason,
                    "chain": list(resolution.chain),
                    "backend_status": status.status,
                    "why_not": status.reason,
                }
            )
        )
    else:
        explanation = {
            "selected": "the selected backend exports it",
            "fallback-list": "LAZYOPS_FALLBACK forces it to the platform default",
            "inherited": f"the selected backend {','.join(resolution.lacking)!r} lacks it",
        }[resolution.reason]
        print(f"{name}: {resolution.backend} ({resolution.reason}: {explanation})")
    if not status.runs:
        raise CommandError(f"{name} resolves to a backend that cannot load: {status.sentence()}")
    return OK
