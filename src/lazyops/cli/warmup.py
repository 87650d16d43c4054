"""lazyops warmup: build, and so compile, kernels ahead of time, so that a server starts with them compiled.

With --from-trace, exactly the configurations a trace recorded (LAZYOPS_TRACE with LAZYOPS_TRACE_ARGS=1, from
an earlier run of the server), each from the backend that built it then; without it, every kernel's benchmark
configuration (--dtype) from the backend it resolves to now. Each kernel is then called once per token count of
--tokens on fresh inputs on its device: Triton compiles at the first call, not at construction, and specialises
on the token count (1, multiples of 16). TileLang compiles at construction and keeps what it compiled in its disk
cache (TILELANG_CACHE_DIR, ~/.tilelang/cache), so the server's own start then finds it there; TileLang's own
INFO lines and progress bar are silenced.

Reports the time of each configuration (construction and calls) and the total.

A trace is input from elsewhere: its arguments are read without eval (literals and torch dtypes only), and a
configuration that names a size above --max-elements (default 2**31), or whose one call at the largest --tokens
would move more elements than that (the spec's traffic model), is refused before anything is built or allocated.

Exit status: 0 when every configuration was built; 1 when one failed or was refused (its row says why); 2 when a
trace cannot be read or holds no arguments.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from lazyops.cli._errors import FOUND_PROBLEMS, OK, CommandError

HELP = "construct (compile) kernels ahead of time: a trace's configurations, or each kernel's"
#: The most elements a configuration may ask for, by default: 2**31, where 32-bit offsets overflow, and beyond the
#: tensors of any one kernel call of an engine (Llama 3 70B's output projection holds 1.05e9).
MAX_ELEMENTS = 2**31


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
    parser.add_argument(
        "--max-elements",
        type=_positive,
        default=MAX_ELEMENTS,
        metavar="N",
        help=f"refuse a configuration whose sizes, or whose one call's tensors together, pass N elements (default "
        f"2**31 = {MAX_ELEMENTS:,}): a trace is input from elsewhere",
    )
    parser.add_argument("--json", action="store_true", help="print the timings as JSON")


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of elements")
    return value


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
    for job in jobs:  # all of them before anything is built: a refused size never reaches an allocation
        reason = oversized(job, tokens, args.max_elements)
        if reason:
            job.error = f"refused: {reason}; raise --max-elements to build it"
    started = time.perf_counter()
    with output.progress(len(jobs), "warming up") as progress:
        for job in jobs:
            progress.working_on(f"{job.kernel} ({job.backend})")
            if not job.error:
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
    from lazyops.testing.cases import examples

    jobs = []
    for kernel in kernel_names():
        example = examples(spec(kernel)).benchmark(getattr(torch, dtype))
        text = ", ".join([repr(a) for a in example.args] + [f"{k}={v!r}" for k, v in example.kwargs.items()])
        resolved = lazyops.which(kernel).backend  # a ConfigError is the user's to fix first (exit 2)
        jobs.append(Job(kernel, resolved, tuple(example.args), dict(example.kwargs), text))
    return jobs


def oversized(job: Job, tokens: tuple[int, ...], limit: int) -> str | None:
    """Why ``job`` asks for more than ``limit`` elements, or None: a size it names, or (for a kernel with a spec) the
    tensors of one call at the largest token count, from the spec's traffic model. Nothing is built or allocated."""
    from lazyops.specs import has_spec, spec
    from lazyops.testing.cases import examples

    largest = max(_integers((*job.args, *job.kwargs.values())), default=0)
    if largest > limit:
        return f"it names a size of {largest:,}, over the limit of {limit:,} elements"
    if not tokens or not has_spec(job.kernel):
        return None
    kernel_spec = spec(job.kernel)
    try:
        config = kernel_spec.bind(*job.args, **job.kwargs)
    except Exception:  # noqa: BLE001 - arguments the factory refuses: building it says why, in the job's row
        return None
    shape = geometry(job, kernel_spec, config)
    moved = examples(kernel_spec).traffic(config, max(tokens), shape).bytes
    elements = moved // config.dtype.itemsize
    if elements > limit:
        return f"one call at M = {max(tokens)} moves about {elements:,} elements, over the limit of {limit:,}"
    # What is allocated counts too, not only what one call moves: a KV cache of 2**20-token blocks is mostly
    # untouched, and was 4 GiB in warmup, 192 GiB in tune (issue 33.7).
    allocated = max(_one_block(config), _input_elements(kernel_spec, config, max(tokens), shape))
    if allocated > limit:
        return f"its inputs at M = {max(tokens)} hold about {allocated:,} elements, over the limit of {limit:,}"
    return None


def _one_block(config: Any) -> int:
    """The elements of one block of a paged KV cache (keys and values), 0 for a kernel without one: every sequence
    takes a block at least, whatever its length."""
    sizes = [getattr(config, name, None) for name in ("block_size", "num_kv_heads", "head_dim")]
    counts = [size for size in sizes if isinstance(size, int) and not isinstance(size, bool)]
    return 2 * math.prod(counts) if len(counts) == len(sizes) else 0


def _input_elements(kernel_spec: Any, config: Any, tokens: int, shape: dict[str, Any]) -> int:
    """The elements of the inputs the spec draws for one call, counted on fake tensors (nothing is allocated); 0
    where they cannot be counted so (a value read back while drawing): :func:`_one_block` bounds those."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from lazyops.testing import Inputs
    from lazyops.testing.cases import examples

    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            drawn = examples(kernel_spec).example_inputs(config, tokens, Inputs(0, "cpu"), shape)
    except Exception:  # noqa: BLE001 - a spec whose drawing reads values back: not countable this way
        return 0
    return sum(value.numel() for value in drawn if isinstance(value, torch.Tensor))


def _integers(values: Any) -> list[int]:
    """Every integer in ``values``, nested tuples and lists included (booleans are not sizes)."""
    found = []
    for value in values:
        if isinstance(value, (tuple, list)):
            found += _integers(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            found.append(value)
    return found


def geometry(job: Job, kernel_spec: Any, config: Any) -> dict[str, Any]:
    """The benchmark's geometry (rope's heads and cache), no size above the configuration's largest (rope's rotary
    part within its head)."""
    from lazyops.testing.cases import examples

    largest = max(_integers(job.args), default=None)
    return {
        key: min(value, largest) if largest and isinstance(value, int) and not isinstance(value, bool) else value
        for key, value in examples(kernel_spec).benchmark(config.dtype).geometry.items()
    }


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
    from lazyops.testing.cases import examples

    if not has_spec(job.kernel):
        return  # a third-party kernel without a spec: lazyops cannot make its inputs
    kernel_spec = spec(job.kernel)
    config = kernel_spec.bind(*job.args, **job.kwargs)
    shape = geometry(job, kernel_spec, config)
    device = default_device(job.backend or "torch")
    with torch.inference_mode():
        for m in tokens:
            kernel(*examples(kernel_spec).example_inputs(config, m, Inputs(0, device), shape))
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()


def render(out: Any, jobs: list[Job], tokens: tuple[int, ...], total: float) -> None:
    from lazyops.cli._output import count, seconds, shortened

    calls = f"then called at M = {', '.join(map(str, tokens))}" if tokens else "built only"
    out.line(("lazyops warmup", "head"), f": {count(len(jobs), 'configuration')}, {calls}")
    rows = []
    for job in jobs:
        text = shortened(job.text)
        if job.error:
            rows.append([job.kernel, text, job.backend or "", ("failed", "fail"), ""])
        else:
            rows.append([job.kernel, text, job.backend or "", seconds(job.build_s), seconds(job.calls_s)])
    out.table(
        ["kernel", "arguments", "backend", "build", "calls"],
        rows,
        justify=["left", "left", "left", "right", "right"],
        no_wrap=("kernel", "backend", "build", "calls"),
    )
    for job in jobs:
        if job.error:
            out.line(("failed: ", "fail"), f"{job.kernel}({shortened(job.text)}) in {job.backend}: {job.error}")
    failed = sum(1 for job in jobs if job.error)
    out.line(("done" if not failed else f"{failed} failed", "ok" if not failed else "fail"), f" in {seconds(total)}")
