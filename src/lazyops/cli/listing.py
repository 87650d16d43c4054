"""lazyops list: every kernel, the backends that export it, and where it resolves under the current environment.

Reads names and stubs only (the backends' packages are loaded to ask whether they can run here, no kernel
module): the same report as the first resolution's summary line and the pytest header.

Exit status: 0; 2 when the configuration is wrong (the message says which variable to fix).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lazyops.cli._errors import OK

HELP = "every kernel, which backends export it, and where it resolves now"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(args: argparse.Namespace) -> int:
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
    if args.json:
        listing = {
            "chain": list(report.chain),
            "strict": report.strict,
            "backends": statuses,
            "kernels": rows,
            "refused_entry_points": list(report.refused),
        }
        print(json.dumps(listing, indent=2))
        return OK
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
    return OK
