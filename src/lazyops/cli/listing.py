"""lazyops list: every kernel, the backends that export it, and where it resolves under the current environment.

Reads names and stubs only (the backends' packages are loaded to ask whether they can run here, no kernel
module): the same sources as the first resolution's summary line and the pytest header.

Each backend is asked whether it can run here (its package loaded, its ``unavailable_reason()``), and a kernel
that resolves to one that cannot is marked "cannot load".

Exit status: 0; 2 when the configuration is wrong (the message says which variable to fix) or a kernel resolves to
a backend that cannot load here (the message says why, and the way out).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from lazyops.cli._errors import OK, CommandError

if TYPE_CHECKING:
    from lazyops.cli._status import BackendStatus

HELP = "every kernel, which backends export it, and where it resolves now"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(args: argparse.Namespace) -> int:
    from lazyops import _api
    from lazyops._plan import check_in_force, plan_status
    from lazyops.cli._status import backend_status

    check_in_force()  # a plan that cannot be used fails every kernel access: exit 2, not a listing
    sources = _api.sources()
    plan = plan_status(_api.backend_origins())
    statuses = {name: backend_status(name) for name in sources.backends}
    rows: list[dict[str, Any]] = [
        {
            "kernel": source.kernel,
            "exported_by": list(source.exported_by),
            "backend": source.backend,
            "reason": source.reason if source.backend else f"unavailable: {source.unavailable}",
            "loads": source.backend is None or statuses[source.backend].runs,
        }
        for source in sources.kernels
    ]
    if args.json:
        listing = {
            "chain": list(sources.chain),
            "strict": sources.strict,
            "plan": plan,
            "backends": {b.name: "ok" if b.runs else b.sentence() for b in statuses.values()},
            "kernels": rows,
            "refused_entry_points": list(sources.refused),
        }
        print(json.dumps(listing, indent=2))
    else:
        from lazyops.cli._output import Output

        render(Output(), sources, statuses, plan)
    return verdict(sources, statuses)


def verdict(sources: Any, statuses: dict[str, BackendStatus]) -> int:
    """OK, or the error for the backends that kernels resolve to but that cannot load here (one line each)."""
    from lazyops.cli._output import count

    served: dict[str, int] = {}
    for source in sources.kernels:
        if source.backend is not None and not statuses[source.backend].runs:
            served[source.backend] = served.get(source.backend, 0) + 1
    if not served:
        return OK
    raise CommandError(
        "; ".join(f"{statuses[b].sentence()} ({count(n, 'kernel')} resolve to it)" for b, n in served.items())
    )


def render(out: Any, sources: Any, statuses: dict[str, BackendStatus], plan: str | None = None) -> None:
    strict = "; strict" if sources.strict else ""
    out.line(("lazyops list", "head"), f": chain {','.join(sources.chain)}{strict}; platform default {sources.default}")
    if plan is not None:
        out.line("plan (LAZYOPS_PLAN): ", plan)

    out.heading("Backends")
    rows = [[b.name, (b.status, "ok" if b.runs else "warn"), b.reason or ""] for b in statuses.values()]
    out.table(["backend", "status", "why not, and the way out"], rows, no_wrap=("backend", "status"))
    for refusal in sources.refused:
        out.line(("refused entry point: ", "warn"), refusal)

    out.heading("Kernels")
    kernels = []
    for source in sources.kernels:
        marks = [("yes", "") if b in source.exported_by else ("-", "dim") for b in sources.backends]
        if source.backend is None:
            where = ("unavailable", "fail")
        elif not statuses[source.backend].runs:
            where = (f"{source.backend} ({source.reason}): cannot load", "fail")
        else:
            where = (f"{source.backend} ({source.reason})", "")
        kernels.append([source.kernel, *marks, where])
    out.table(["kernel", *sources.backends, "resolves to"], kernels, no_wrap=("kernel",))
    for source in sources.kernels:
        if source.backend is None:
            out.line((f"{source.kernel}: ", "fail"), str(source.unavailable))
