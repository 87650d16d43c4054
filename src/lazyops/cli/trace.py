"""lazyops trace: what a run built, from its LAZYOPS_TRACE files, and what a port still lacks of it.

Per kernel: how often it was built (trace lines: one per process, and per distinct argument combination with
LAZYOPS_TRACE_ARGS=1), by which backend, and its distinct configurations, the code paths a port needs. Each
kernel is marked with whether the backend it is compared with exports it: by default the selected configuration
(LAZYOPS_BACKEND; a kernel it would inherit counts as lacking), or --backend NAME. Configurations that differ
only in spelling (bfloat16 and torch.bfloat16) count once.

Exit status: 0; with --check, 1 when the compared backend lacks a traced kernel; 2 when a file cannot be read
or the configuration is wrong.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from lazyops.cli._errors import FOUND_PROBLEMS, OK, unknown_names

HELP = "summarise LAZYOPS_TRACE files: kernels, configurations, what the backend lacks"
NOT_TRACED = "(not traced; set LAZYOPS_TRACE_ARGS=1)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="trace files (JSON lines from LAZYOPS_TRACE)")
    parser.add_argument(
        "--backend", metavar="NAME", help="compare with this backend (default: the selected configuration)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the compared backend lacks a kernel")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


@dataclass
class Configuration:
    args: str | None
    built: int = 0
    backends: set[str] = field(default_factory=set)


@dataclass
class KernelSummary:
    kernel: str
    built: int = 0
    backends: set[str] = field(default_factory=set)
    configurations: dict[str, Configuration] = field(default_factory=dict)
    #: against the compared backend: "exports", "lacks" (with where it would come from), "unknown"
    status: str = ""
    note: str = ""


def main(args: argparse.Namespace) -> int:
    from lazyops.cli._output import Output
    from lazyops.cli._traces import read_traces

    output = Output()
    log = read_traces(args.files)
    kernels = summarise(log.records)
    compared = compare(kernels, args.backend)
    processes = {(r.where.rsplit(":", 1)[0], r.pid) for r in log.records}
    lacking = [k for k in kernels if k.status != "exports"]
    if args.json:
        output.json(
            {
                "files": log.files,
                "records": len(log.records),
                "processes": len(processes),
                "skipped": log.skipped,
                "compared_with": compared,
                "kernels": [
                    {
                        "kernel": k.kernel,
                        "built": k.built,
                        "backends": sorted(k.backends),
                        "status": k.status,
                        "note": k.note,
                        "configurations": [
                            {"args": c.args, "built": c.built, "backends": sorted(c.backends)}
                            for c in k.configurations.values()
                        ],
                    }
                    for k in kernels
                ],
            }
        )
    else:
        render(output, log, kernels, compared, len(processes), lacking)
    return FOUND_PROBLEMS if args.check and lacking else OK


def summarise(records: list[Any]) -> list[KernelSummary]:
    summaries: dict[str, KernelSummary] = {}
    for record in records:
        summary = summaries.setdefault(record.kernel, KernelSummary(record.kernel))
        summary.built += 1
        summary.backends.add(record.backend)
        key = canonical(record.kernel, record.args)
        configuration = summary.configurations.setdefault(key, Configuration(record.args))
        configuration.built += 1
        configuration.backends.add(record.backend)
    return sorted(summaries.values(), key=lambda s: s.kernel)


def canonical(kernel: str, args: str | None) -> str:
    """The configuration's identity: the spec's normalised label when it can be made, else the text as traced."""
    if args is None:
        return NOT_TRACED
    try:
        from lazyops.cli._traces import parse_arguments
        from lazyops.specs import has_spec, spec

        if has_spec(kernel):
            positional, keywords = parse_arguments(args)
            return str(spec(kernel).bind(*positional, **keywords).label)
    except Exception:  # noqa: BLE001 - unreadable or refused: still a distinct configuration, named as traced
        pass
    return args


def compare(kernels: list[KernelSummary], backend: str | None) -> str:
    """Mark each kernel against ``backend`` (or the selected configuration); returns what it was compared with."""
    import lazyops
    from lazyops import _api

    if backend is not None:
        known = lazyops.backends()
        if backend not in known:
            raise unknown_names("--backend", "backend", [backend], known)
        exports = _api.exports(backend)
        for k in kernels:
            k.status = "exports" if k.kernel in exports else "lacks"
        return backend
    settings = _api.settings()  # a ConfigError here is the user's to fix first (exit 2)
    chain = ",".join(settings.chain) if settings.chain else f"{_api.default_backend()} (default)"
    for k in kernels:
        try:
            resolution = lazyops.which(k.kernel)
        except lazyops.KernelUnavailableError:
            k.status, k.note = "lacks", "unavailable"
            continue
        except AttributeError:
            k.status, k.note = "unknown", "no installed backend exports it"
            continue
        if resolution.reason == "inherited":
            k.status, k.note = "lacks", f"inherits {resolution.backend}"
        else:
            k.status = "exports"
    return chain


def render(out: Any, log: Any, kernels: list[KernelSummary], compared: str, processes: int, lacking: list[Any]) -> None:
    from lazyops.cli._output import count, shortened

    out.line(
        ("lazyops trace", "head"),
        f": {count(len(log.files), 'file')}, {count(len(log.records), 'record')} from "
        f"{count(processes, 'process', 'processes')}; compared with {compared}",
    )
    for skipped in log.skipped[:3]:
        out.warn(f"skipped {skipped}")
    if len(log.skipped) > 3:
        out.warn(f"skipped {count(len(log.skipped) - 3, 'more line')} (not trace records)")
    if not kernels:
        out.line("no kernel was built in these traces")
        return
    rows = []
    for k in kernels:
        mark = {"exports": ("yes", "ok"), "lacks": ("LACKS", "fail"), "unknown": ("unknown", "warn")}[k.status]
        if k.note:
            mark = (f"{mark[0]}: {k.note}", mark[1])
        for index, configuration in enumerate(k.configurations.values()):
            first = index == 0
            arguments = shortened(configuration.args) if configuration.args is not None else (NOT_TRACED, "dim")
            rows.append(
                [
                    k.kernel if first else "",
                    arguments,
                    str(configuration.built),
                    ",".join(sorted(configuration.backends)),
                    mark if first else "",
                ]
            )
    out.table(
        ["kernel", "configuration (factory arguments)", "built", "by", compared.split(" ", maxsplit=1)[0]],
        rows,
        justify=["left", "left", "right", "left", "left"],
        no_wrap=("kernel", "built"),
    )
    configurations = sum(len(k.configurations) for k in kernels)
    out.console.print()
    if lacking:
        names = ", ".join(k.kernel for k in lacking)
        out.line((f"{compared} lacks {len(lacking)} of {count(len(kernels), 'traced kernel')}: ", "fail"), names)
    else:
        out.line(
            (f"{compared} exports every traced kernel", "ok"),
            f" ({count(len(kernels), 'kernel')}, {count(configurations, 'configuration')})",
        )
