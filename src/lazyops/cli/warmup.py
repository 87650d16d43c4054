"""lazyops warmup: build, and so compile, kernels ahead of time, so that a server starts with them compiled.

With --from-trace, exactly the configurations a trace recorded (LAZYOPS_TRACE with LAZYOPS_TRACE_ARGS=1, from
an earlier run of the server), each from the backend that built it then; without it, every kernel's benchmark
configuration (--dtype) from the backend it resolves to now. Each kernel is then called once per token count of
--tokens on fresh inputs on its device: Triton compiles at the first call, not at construction, and specialises
on the token count (1, multiples of 16). TileLang compiles at construction and keeps what it compiled in its disk
cache (TILELANG_CACHE_DIR, ~/.tilelang/cache), so the server's own start then finds it there; TileLang's own
INFO lines and progress bar are silenced.

Reports the time of each configuration (construction and calls) and the total.

Exit status: 0 when every configuration was built; 1 when one failed (its row says why); 2 when a trace cannot
be read or holds no arguments.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

from lazyops.cli._errors import FOUND_PROBLEMS, OK, CommandError

HELP = "construct (compile) kernels ahead of time: a trace's configurations, or each kernel's"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lazyops.cli.bench import DTYPES

    parser.add_argument(
        "--from-trace", nargs="+", metavar="FILE", help="trace files (LAZYOPS_TRACE with LAZYOPS_TRACE_ARGS=1)"
    )
    parser.add_argument(
        "--tokens",
        default="1",
        metavar="M[,M]",
        help="call each kernel once per token count after building it (default: 1; 0: build only)",
    )
    parser.add_argument(
        "--dtype", default="bfloat16", choices=DTYPES, help="without a trace: the dtype to build (default bfloat16)"
    )
    parser.add_argument("--json", action="store_true", help="print the timings as JSON")


@dataclass
class Job:
    kernel: str
    backend: str | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    text: str
    build_s: float | None = None
    calls_s: float | None = None
    error: str | None = None


def main(args: argparse.Namespace) -> int:
    # Before anything imports tqdm: TileLang draws its parallel-compile bar with it, and tqdm reads this once.
    os.environ.setdefault("TQDM_DISABLE", "1")
    from lazyops.cli._output import Output

    output = Output()
    tokens = _tokens(args.tokens)
    jobs = jobs_from_traces(args.from_trace, output) if args.from_trace else default_jobs(args.dtype)
    started = time.perf_counter()
    with output.progress(len(jobs), "warming up") as progress:
        for job in jobs:
            progress.working_on(f"{job.kernel} ({job.backend})")
            warm(job, tokens)
            progress.advance()
    total = time.perf_counter() - started
    if args.json:
        output.json(
            {
                "tokens": list(tokens),
                "total_s": round(total, 3),
                "kernels": [
                    {
                        "kernel": job.kernel,
                        "backend": job.backend,
                        "args": job.text,
                        "build_s": _round(job.build_s),
                        "calls_s": _round(job.calls_s),
                        "error": job.error,
                    }
                    for job in jobs
                ],
            }
        )
    else:
        render(output, jobs, tokens, total)
    return FOUND_PROBLEMS if any(job.error for job in jobs) else OK


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _tokens(text: str) -> tuple[int, ...]:
    from lazyops.cli.bench import token_counts

    if text.strip() == "0":
        return ()
    try:
        return token_counts(text)
    except argparse.ArgumentTypeError as error:
        raise CommandError(f"--tokens: {error}") from None


def jobs_from_traces(paths: list[str], out: Any) -> list[Job]:
    """A job per distinct configuration of the traces; each line that is not a record is a warning on ``out``."""
    from lazyops.cli._output import count
    from lazyops.cli._traces import parse_arguments, read_traces
    from lazyops.cli.trace import canonical

    log = read_traces(paths)
    jobs: dict[tuple[str, str, str], Job] = {}
    without_arguments = set()
    for record in log.records:
        if record.args is None:
            without_arguments.add(record.kernel)
            continue
        # `4096, 'bfloat16'` and `4096, torch.bfloat16` build one kernel: built once here too
        key = (record.kernel, record.backend, canonical(record.kernel, record.args))
        if key in jobs:
            continue
        try:
            positional, keywords = parse_arguments(record.args)
        except ValueError as error:
            raise CommandError(f"{record.where}: {error}") from None
        jobs[key] = Job(record.kernel, record.backend, positional, keywords, record.args)
    if not jobs:
        if without_arguments:
            why = "holds no arguments; record it with LAZYOPS_TRACE_ARGS=1"
        elif log.skipped:
            why = f"holds no trace record: {count(len(log.skipped), 'line')} skipped, the first {log.skipped[0]}"
        else:
            why = "is empty"
        raise CommandError(f"the trace {', '.join(map(repr, paths))} {why}")
    for skipped in log.skipped:
        out.warn(f"skipped {skipped}")
    return list(jobs.values())


def default_jobs(dtype: str) -> list[Job]:
    """Every kernel's benchmark configuration, from the backend it resolves to now."""
    import torch

    import lazyops
    from lazyops.specs import kernel_names, spec

    jobs = []
    for kernel in kernel_names():
        example = spec(kernel).benchmark(getattr(torch, dtype))
        text = ", ".join([repr(a) for a in example.args] + [f"{k}={v!r}" for k, v in example.kwargs.items()])
        resolved = lazyops.which(kernel).backend  # a ConfigError is the user's to fix first (exit 2)
        jobs.append(Job(kernel, resolved, tuple(example.args), dict(example.kwargs), text))
    return jobs


def warm(job: Job, tokens: tuple[int, ...]) -> None:
    """Build ``job``'s kernel from its backend, then call it at each token count; record the times or the error."""
    import lazyops
    from lazyops import _api

    try:
        known = lazyops.backends()
        if job.backend is None or job.backend not in known:
            raise CommandError(f"backend {job.backend!r} is not installed here (known: {', '.join(known)})")
        factory = _api.kernel_factory(job.backend, job.kernel)
        started = time.perf_counter()
        kernel = factory(*job.args, **job.kwargs)
        job.build_s = time.perf_counter() - started
        if tokens:
            started = time.perf_counter()
            call(job, kernel, tokens)
            job.calls_s = time.perf_counter() - started
    except Exception as error:  # noqa: BLE001 - one configuration failing is its row's error; the others still build
        job.error = " ".join(f"{type(error).__name__}: {error}".split())


def call(job: Job, kernel: Any, tokens: tuple[int, ...]) -> None:
    """One call per token count, on inputs the spec draws (the benchmark's geometry: rope's heads and cache)."""
    import torch

    from lazyops.specs import has_spec, spec
    from lazyops.testing import Inputs, default_device

    if not has_spec(job.kernel):
        return  # a third-party kernel without a spec: lazyops cannot make its inputs
    kernel_spec = spec(job.kernel)
    config = kernel_spec.configure(*job.args, **job.kwargs)
    # The benchmark's geometry, no size above the configuration's largest (rope's rotary part within its head).
    largest = max((a for a in job.args if isinstance(a, int) and not isinstance(a, bool)), default=None)
    geometry = {
        key: min(value, largest) if largest and isinstance(value, int) and not isinstance(value, bool) else value
        for key, value in kernel_spec.benchmark(config.dtype).geometry.items()
    }
    device = default_device(job.backend or "torch")
    with torch.inference_mode():
        for m in tokens:
            kernel(*kernel_spec.example_inputs(config, m, Inputs(0, device), geometry))
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()


def render(out: Any, jobs: list[Job], tokens: tuple[int, ...], total: float) -> None:
    from lazyops.cli._output import count, seconds

    calls = f"then called at M = {', '.join(map(str, tokens))}" if tokens else "built only"
    out.line(("lazyops warmup", "head"), f": {count(len(jobs), 'configuration')}, {calls}")
    rows = []
    for job in jobs:
        if job.error:
            rows.append([job.kernel, job.text, job.backend or "", ("failed", "fail"), ""])
        else:
            rows.append([job.kernel, job.text, job.backend or "", seconds(job.build_s), seconds(job.calls_s)])
    out.table(
        ["kernel", "arguments", "backend", "build", "calls"],
        rows,
        justify=["left", "left", "left", "right", "right"],
        no_wrap=("kernel", "backend", "build", "calls"),
    )
    for job in jobs:
        if job.error:
            out.line(("failed: ", "fail"), f"{job.kernel}({job.text}) in {job.backend}: {job.error}")
    failed = sum(1 for job in jobs if job.error)
    out.line(("done" if not failed else f"{failed} failed", "ok" if not failed else "fail"), f" in {seconds(total)}")
