"""lazyops plan check PLAN: does a plan written by lazyops tune apply on this machine?

A plan is the lock as well as the choice: it records the device it was measured on, its compute capability, and
the versions of torch, Triton, TileLang, lazyops and each backend it timed. lazyops applies it only where all of
them are the same here (otherwise it warns, once, naming what differs, and resolves as without a plan; under
LAZYOPS_PLAN_STRICT=1 that is an error). This command says so ahead of time, on the machine that will use it: a
server's start-up script can run it before the ranks start.

Prints the plan's entries, where and how it was measured, and each difference from here.

Exit status: 0 when the plan applies here; 1 when it does not (the differences are listed; make a new plan here
with lazyops tune); 2 when the file cannot be read as a plan (missing, not JSON, another schema version: the
message says what is wrong).
"""

from __future__ import annotations

import argparse
from typing import Any

from lazyops.cli._errors import FOUND_PROBLEMS, OK

HELP = "check that a plan from lazyops tune applies here (same device and versions)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("check",), help="check: does the plan apply here")
    parser.add_argument("plan", metavar="PLAN", help="the plan file (lazyops tune --output)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def main(args: argparse.Namespace) -> int:
    from lazyops import _api, _plan
    from lazyops.cli._output import Output

    output = Output()
    plan = _plan.load(args.plan)  # a ConfigError: exit 2, the message names the file and what is wrong
    found = _plan.applies_here(plan, _api.backend_origins())
    if args.json:
        output.json(
            {
                "plan": args.plan,
                "entries": len(plan.entries),
                "created": plan.created,
                "command": plan.command,
                "environment": plan.environment,
                "applies": not found,
                "differences": found,
            }
        )
    else:
        render(output, plan, args.plan, found)
    return FOUND_PROBLEMS if found else OK


def render(out: Any, plan: Any, path: str, found: list[str]) -> None:
    from lazyops._plan import brief
    from lazyops.cli._output import count

    timing = plan.timing
    tokens = brief(", ".join(map(str, timing["tokens"])))
    out.line(  # each string from the file cut short: plain output costs what --json does (issue 33.6)
        ("lazyops plan check", "head"),
        f" {path}: {count(len(plan.entries), 'entry', 'entries')}, measured on {brief(plan.environment['device'])} "
        f"({timing['method']}, M = {tokens}) on {brief(plan.created)} by {brief(plan.command)}",
    )
    if not found:
        out.line(("applies here", "ok"), ": the same device and versions")
        return
    out.line(("does not apply here", "fail"), f" ({count(len(found), 'difference')}):")
    for difference in found:
        out.line(f"  {difference}")
    out.line("make a new plan here with `lazyops tune` (with --from-trace for an engine's configurations)")
