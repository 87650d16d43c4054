"""lazyops tune: measure which backend serves each kernel configuration best here, and write it down as a plan.

With --from-trace, every distinct configuration a trace recorded (LAZYOPS_TRACE with LAZYOPS_TRACE_ARGS=1, from a
run of the engine); without it, every kernel's benchmark configuration in --dtype (on a CPU cut to 256 features,
as lazyops bench does; --full-size for the engine's). KERNELs narrow either to those kernels.

The candidates for a configuration are the backends that can run here (or those of --backends) that export the
kernel and serve the configuration (a backend's supports hook may decline one, with its reason). Each candidate is
first checked against the float64 reference (lazyops.testing.check_case at M = 1 and 7): a wrong kernel is
rejected, reported, and never chosen. Then the candidates are timed at each token count of --tokens, interleaved
over --rounds rounds: per call inside CUDA graphs on a GPU (the calls an engine replays), or back-to-back calls on
the host (the plan records which). A figure is the median of its samples; its spread, their interquartile range
over the median, is recorded beside it.

The choice: the fastest by total time over the token counts, except that a backend within the spread measured (at
least 2 %) of the fastest ties with it, and a tie goes to the default resolution's backend (the one lazyops which
names), so that two runs on one machine choose alike wherever the candidates differ by more than their noise.
Where one backend is at least 5 % faster at every token count below some count and another at least 5 % faster
from it on, the plan switches from the first to the second there.

The plan goes to --output (default lazyops-plan.json), replaced in one step (another rank reading it sees the old
plan or the new one). LAZYOPS_PLAN=FILE makes lazyops resolve by it; lazyops plan check FILE says whether it
applies on a machine. The table shows each configuration's choice and its speed over the default resolution's
backend at each token count (x 1.25: the plan's kernel takes 1/1.25 of the default's time).

A trace is input from elsewhere: as in lazyops warmup, its arguments are read without eval, and a configuration
that names a size above --max-elements, or whose one call at the largest --tokens would move more elements than
that, is refused before anything is built.

Exit status: 0 when every configuration was tuned and every candidate passed its check; 1 when a candidate was
rejected (it failed to build, its check, or its timing) or a configuration could not be tuned (the output says
why); 2 for bad arguments, an unreadable trace, or an --output that cannot be written (checked before timing).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lazyops._plan import Candidate, Entry, Switch
from lazyops.cli._errors import FOUND_PROBLEMS, OK, CommandError

HELP = "time every backend on each kernel configuration (a trace's, or each kernel's) and write the plan"
#: Token counts timed by default: decode batches to long prefills on a GPU; on the host, what a CPU times quickly.
GPU_TOKENS = (1, 16, 128, 1024, 8192)
HOST_TOKENS = (1, 16, 128)
#: The check's token counts: one token (the decode path) and a few rows, as lazyops doctor checks.
CHECK_TOKENS = (1, 7)
#: A switch between backends at a token count needs at least this gain on each side of it (and more than the
#: spread measured): below it, one more comparison per call is not worth it, and the choice would follow noise.
SWITCH_GAIN = 0.05
#: Candidates whose totals differ by less than this (or less than their measured spread) tie: the default wins a
#: tie, so that a plan moves a kernel away from the default only for a gain the machine's drift cannot make.
NEAR_TIE = 0.02
#: The GPU time one CUDA-graph sample aims at (calls captured and replays sized from one call's eager time), and
#: the most calls captured and replays: enough to average launches, few enough that 8192 tokens stay quick.
GRAPH_SAMPLE_S = 0.004
MAX_CAPTURES, MAX_REPLAYS = 50, 20
#: The most back-to-back calls of a host sample (the calls engines make at one token take a few µs each).
MAX_HOST_CALLS = 3000
#: One host sample's time (torch.utils.benchmark's blocked_autorange) and one stream sample's (do_bench).
HOST_SAMPLE_S, STREAM_SAMPLE_S = 0.005, 0.01
OUTPUT = "lazyops-plan.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lazyops.cli.bench import DTYPES, positive
    from lazyops.cli.warmup import MAX_ELEMENTS, _positive

    parser.add_argument("kernels", nargs="*", metavar="KERNEL", help="tune only these kernels, e.g. rmsnorm")
    parser.add_argument(
        "--from-trace", nargs="+", metavar="FILE", help="trace files (LAZYOPS_TRACE with LAZYOPS_TRACE_ARGS=1)"
    )
    parser.add_argument(
        "--tokens",
        metavar="M[,M]",
        help=f"token counts to time (default: {_listed(GPU_TOKENS)} on a GPU, {_listed(HOST_TOKENS)} on the host)",
    )
    parser.add_argument(
        "--backends", metavar="NAME[,NAME]", help="the candidate backends (default: every backend that runs here)"
    )
    parser.add_argument("--output", default=OUTPUT, metavar="FILE", help=f"the plan file (default {OUTPUT})")
    parser.add_argument(
        "--dtype", default="bfloat16", choices=DTYPES, help="without a trace: the dtype to tune (default bfloat16)"
    )
    parser.add_argument(
        "--full-size", action="store_true", help="without a trace on a CPU: the engine's sizes, not 256 (slow)"
    )
    parser.add_argument(
        "--timing",
        choices=("auto", "cuda-graph", "stream", "host"),
        default="auto",
        help="how to time: per call in CUDA graphs, do_bench's stream time, or host time (default auto: "
        "cuda-graph on a GPU, host otherwise)",
    )
    parser.add_argument(
        "--rounds", type=positive, default=5, metavar="N", help="interleaved rounds of timing (default 5)"
    )
    parser.add_argument(
        "--max-elements",
        type=_positive,
        default=MAX_ELEMENTS,
        metavar="N",
        help=f"refuse a configuration whose sizes, or whose one call's tensors together, pass N elements (default "
        f"2**31 = {MAX_ELEMENTS:,}): a trace is input from elsewhere",
    )
    parser.add_argument("--json", action="store_true", help="print what was chosen as JSON")


def _listed(counts: Sequence[int]) -> str:
    return ",".join(map(str, counts))


# -- the choice: a pure function of the measured figures ---------------------------------------------------------


def choose(candidates: Mapping[str, Candidate], default: str | None = None) -> tuple[str, Switch | None]:
    """The backend a plan names for one configuration, and the switch below a token count if there is one.

    ``candidates`` are the figures of every backend that passed its check (µs and spread per token count);
    ``default`` is the backend the configuration resolves to without a plan. See the module's docstring for the
    rule; :func:`tie` and :func:`clearly_faster` are its two comparisons.
    """
    if not candidates:
        raise ValueError("no candidate to choose from")
    tokens = sorted(set.intersection(*(set(figures.us) for figures in candidates.values())))
    if not tokens:
        raise ValueError("the candidates share no token count")
    best = fastest(candidates, tokens, default)
    options = []
    for split in range(1, len(tokens)):
        below, above = tokens[:split], tokens[split:]
        small, large = fastest(candidates, below, default), fastest(candidates, above, default)
        if small == large:
            continue
        if not all(clearly_faster(candidates[small], candidates[large], m) for m in below):
            continue
        if not all(clearly_faster(candidates[large], candidates[small], m) for m in above):
            continue
        combined = sum(candidates[small].us[m] for m in below) + sum(candidates[large].us[m] for m in above)
        if combined < _total(candidates[best], tokens):
            options.append((combined, tokens[split], small, large))
    if not options:
        return best, None
    _, below_count, small, large = min(options, key=lambda option: (option[0], option[1]))
    return large, Switch(below_count, small)


def fastest(candidates: Mapping[str, Candidate], tokens: Sequence[int], default: str | None) -> str:
    """The fastest candidate by total time at ``tokens``, or ``default`` where it ties with that one."""
    # an exact tie between two non-defaults goes to the first name: the same answer whatever order they came in
    quickest = min(candidates, key=lambda name: (_total(candidates[name], tokens), name))
    if default is None or default not in candidates:
        return quickest
    return default if tie(candidates[default], candidates[quickest], tokens) else quickest


def tie(a: Candidate, b: Candidate, tokens: Sequence[int]) -> bool:
    """Whether ``a`` and ``b``'s totals at ``tokens`` differ by no more than :data:`NEAR_TIE` or the noise of
    either (its spreads, weighted by its times)."""
    slow, quick = sorted((_total(a, tokens), _total(b, tokens)), reverse=True)
    margin = max(NEAR_TIE, _noise(a, tokens), _noise(b, tokens))
    return slow <= quick * (1 + margin)


def clearly_faster(a: Candidate, b: Candidate, tokens: int) -> bool:
    """Whether ``a`` is faster than ``b`` at ``tokens`` by :data:`SWITCH_GAIN` at least, and by more than either's
    spread there."""
    margin = max(SWITCH_GAIN, a.spread.get(tokens, 0.0), b.spread.get(tokens, 0.0))
    return b.us[tokens] >= a.us[tokens] * (1 + margin)


def _total(figures: Candidate, tokens: Sequence[int]) -> float:
    return sum(figures.us[m] for m in tokens)


def _noise(figures: Candidate, tokens: Sequence[int]) -> float:
    total = _total(figures, tokens)
    if total <= 0:
        return 0.0
    return sum(figures.us[m] * figures.spread.get(m, 0.0) for m in tokens) / total


# -- what is tuned -----------------------------------------------------------------------------------------------


@dataclass
class Configuration:
    """One distinct kernel configuration to tune, and what became of it."""

    kernel: str
    config: Any
    #: the factory's keyword arguments that rebuild ``config`` (its fields)
    arguments: dict[str, Any]
    geometry: dict[str, Any]
    #: where the configuration resolves without a plan (None: nowhere)
    default: str | None = None
    entry: Entry | None = None
    #: why it was not tuned, when it was not
    problem: str | None = None
    rejected: dict[str, str] = field(default_factory=dict)
    declined: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return str(self.config.label)


@dataclass
class Skipped:
    """A configuration of the trace that is not tuned, and why."""

    kernel: str
    text: str
    reason: str


def main(args: argparse.Namespace) -> int:
    # Before anything imports tqdm: TileLang draws its parallel-compile bar with it, and tqdm reads this once.
    os.environ.setdefault("TQDM_DISABLE", "1")
    from lazyops.cli._output import Output

    output = Output()
    check_output_path(args.output)  # before any timing: a typo must not cost the run
    import lazyops
    from lazyops import _api

    known = lazyops.backends()
    wanted = _backends(args.backends, known)
    kernels = _kernels(args.kernels)
    from lazyops.bench import engine as _bench

    device = _bench.default_device(None)
    on_gpu = device.startswith("cuda")
    tokens = _tokens(args.tokens) if args.tokens else (GPU_TOKENS if on_gpu else HOST_TOKENS)
    method = args.timing if args.timing != "auto" else ("cuda-graph" if on_gpu else "host")
    if method in ("cuda-graph", "stream") and not on_gpu:
        raise CommandError(f"--timing {method} needs a CUDA device, and torch sees none here; use --timing host")
    statuses = _api.backend_statuses()
    candidates = [name for name, reason in statuses.items() if reason is None and name in wanted]
    if args.backends:
        cannot = [f"{name} ({statuses[name]})" for name in wanted if statuses.get(name) is not None]
        if cannot:
            raise CommandError(f"--backends: {'; '.join(cannot)} cannot run here; leave it out of --backends")
    if args.from_trace:
        configurations, skipped = from_traces(args.from_trace, output, kernels, tokens, args.max_elements)
    else:
        configurations, skipped = benchmark_configurations(kernels, args.dtype, small=not (on_gpu or args.full_size))
    for configuration in configurations:
        configuration.default = default_backend(configuration)

    started = time.perf_counter()
    steps = len(configurations) * (len(candidates) + len(tokens))
    with output.progress(steps, "tuning") as progress:
        for configuration in configurations:
            tune(configuration, candidates, tokens, method, args.rounds, progress)
    elapsed = time.perf_counter() - started

    from lazyops import _api, _plan

    origins = _api.backend_origins()
    plan = _plan.Plan(
        created=_now(),
        command=shlex.join(["lazyops", *sys.argv[1:]]) if sys.argv[1:2] == ["tune"] else "lazyops tune",
        environment=_plan.environment_here({name: origins.get(name) for name in candidates}),
        timing={"method": method, "tokens": list(tokens), "rounds": args.rounds, "checked_at": list(CHECK_TOKENS)},
        entries=[c.entry for c in configurations if c.entry is not None],
    )
    try:
        _plan.save(plan, args.output)
    except (OSError, _plan.ConfigError) as error:
        why = getattr(error, "strerror", None) or error
        raise CommandError(f"--output {args.output!r} could not be written: {why}") from None
    if args.json:
        output.json(as_json(configurations, skipped, plan, args.output, elapsed))
    else:
        render(output, configurations, skipped, plan, args.output, elapsed)
    troubled = skipped or any(c.problem or c.rejected for c in configurations)
    return FOUND_PROBLEMS if troubled else OK


def check_output_path(path: str) -> None:
    """Refuse an ``--output`` that cannot be written, before anything is timed."""
    import stat

    folder = os.path.dirname(os.path.abspath(os.path.realpath(path)))
    with contextlib.suppress(OSError):  # a new path is fine; a symlink is written through, to its target
        kind = os.stat(path).st_mode
        if not stat.S_ISREG(kind) and not stat.S_ISDIR(kind):
            raise CommandError(f"--output {path!r} is not a regular file (a device, FIFO or socket); name a plan file")
    if os.path.isdir(path):
        raise CommandError(f"--output {path!r} is a folder; name a file in it, e.g. {os.path.join(path, OUTPUT)}")
    if not os.path.isdir(folder):
        raise CommandError(f"--output {path!r}: the folder {folder!r} does not exist; create it or name another")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CommandError(f"--output {path!r}: the folder {folder!r} cannot be written (permission denied)")


def _backends(option: str | None, known: tuple[str, ...]) -> set[str]:
    if option is None:
        return set(known)
    from lazyops.cli._errors import unknown_names

    names = {name.strip() for name in option.split(",") if name.strip()}
    if not names or not names <= set(known):
        raise unknown_names("--backends", "backend", names or {option}, known)
    return names


def _kernels(names: list[str]) -> list[str] | None:
    if not names:
        return None
    from lazyops.cli.bench import _kernels as named_kernels

    return named_kernels(names)


def _tokens(text: str) -> tuple[int, ...]:
    from lazyops.cli.bench import token_counts

    try:
        return tuple(sorted(set(token_counts(text))))
    except argparse.ArgumentTypeError as error:
        raise CommandError(f"--tokens: {error}") from None


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def from_traces(
    paths: list[str], out: Any, kernels: list[str] | None, tokens: tuple[int, ...], limit: int
) -> tuple[list[Configuration], list[Skipped]]:
    """Every distinct configuration of the traces (spellings of one configuration once, whichever backend built
    it); those without a spec, refused by their spec, or over ``limit`` elements are skipped with the reason."""
    from lazyops.cli.warmup import jobs_from_traces, oversized
    from lazyops.specs import has_spec, spec

    configurations: dict[str, Configuration] = {}
    skipped = []
    for job in jobs_from_traces(paths, out):
        if kernels is not None and job.kernel not in kernels:
            continue
        if not has_spec(job.kernel):
            skipped.append(Skipped(job.kernel, job.text, "lazyops specifies no such kernel: nothing to check it by"))
            continue
        reason = oversized(job, tokens, limit)
        if reason:
            skipped.append(Skipped(job.kernel, job.text, f"refused: {reason}; raise --max-elements to tune it"))
            continue
        try:
            config = spec(job.kernel).bind(*job.args, **job.kwargs)
        except Exception as error:  # noqa: BLE001 - arguments the spec refuses: that configuration's line says why
            skipped.append(Skipped(job.kernel, job.text, f"its spec refuses it: {_one_line(error)}"))
            continue
        _add(configurations, job.kernel, config, traced_geometry(job.kernel, config))
    return list(configurations.values()), skipped


def benchmark_configurations(
    kernels: list[str] | None, dtype: str, *, small: bool
) -> tuple[list[Configuration], list[Skipped]]:
    """Every kernel's benchmark configuration (``small``: cut to 256 as ``lazyops bench`` does on the host)."""
    from lazyops.bench import engine as _bench
    from lazyops.specs import kernel_names, spec

    configurations: dict[str, Configuration] = {}
    for kernel in kernels or kernel_names():
        example = _bench.example(kernel, dtype, small=small)
        config = spec(kernel).bind(*example.args, **example.kwargs)
        _add(configurations, kernel, config, dict(example.geometry))
    return list(configurations.values()), []


def _add(found: dict[str, Configuration], kernel: str, config: Any, geometry: dict[str, Any]) -> None:
    from lazyops import _plan

    key = _plan.config_key(kernel, config)
    if key not in found:
        found[key] = Configuration(kernel, config, _plan.factory_arguments(config), geometry)


def traced_geometry(kernel: str, config: Any) -> dict[str, Any]:
    """The inputs' geometry beyond the configuration (rope's heads and cache), which a trace does not record: the
    benchmark's, where a size tied to the configuration (equal to the benchmark configuration's largest size: rope's
    rotary part, the whole head) follows the traced configuration and the others (heads, cache rows) stay."""
    from lazyops import _plan
    from lazyops.cli.warmup import _integers
    from lazyops.specs import spec
    from lazyops.testing.cases import examples

    example = examples(spec(kernel)).benchmark(config.dtype)
    theirs = max(_integers((*example.args, *example.kwargs.values())), default=None)
    ours = max(_integers(_plan.factory_arguments(config).values()), default=None)
    return {
        key: ours if value == theirs and isinstance(value, int) and not isinstance(value, bool) else value
        for key, value in example.geometry.items()
    }


def default_backend(configuration: Configuration) -> str | None:
    """The backend ``configuration`` resolves to now, by the settings in force (a backend may decline it; a plan
    already in force counts), or None where it resolves nowhere."""
    import lazyops

    try:
        return lazyops.which(configuration.kernel, **configuration.arguments).backend
    except lazyops.KernelUnavailableError:
        return None


# -- tuning one configuration ------------------------------------------------------------------------------------


def tune(
    configuration: Configuration,
    backends: Sequence[str],
    tokens: tuple[int, ...],
    method: str,
    rounds: int,
    progress: Any,
) -> None:
    """Check and time ``configuration`` in each of ``backends`` that serves it; set its entry (or its problem)."""
    from lazyops import _api, _plan

    kernel = configuration.kernel
    kernels: dict[str, Callable[..., Any]] = {}
    figures: dict[str, Candidate] = {}
    for backend in backends:
        progress.working_on(f"{kernel}: checking {backend}")
        progress.advance()
        if kernel not in _api.exports(backend):
            continue
        try:
            factory = _api.kernel_factory(backend, kernel)
            declined = declines(factory, configuration.config)
            if declined is not None:
                configuration.declined[backend] = declined
                continue
            kernels[backend] = factory(**configuration.arguments)
        except Exception as error:  # noqa: BLE001 - one backend failing is its rejection; the others still run
            configuration.rejected[backend] = f"building it failed: {_one_line(error)}"
            continue
        try:
            worst = check(factory, configuration, backend)
            figures[backend] = Candidate({}, error=float(f"{worst:.3g}"))
        except AssertionError as failure:
            configuration.rejected[backend] = f"wrong: {_one_line(failure, with_type=False)}"
        except Exception as failure:  # noqa: BLE001 - a kernel that raises on its check is rejected, not fatal
            configuration.rejected[backend] = f"its check raised {_one_line(failure)}"
        if backend in configuration.rejected:
            del kernels[backend]
    for m in tokens:
        progress.working_on(f"{kernel}: timing at M = {m}")
        timings = time_at(configuration, kernels, m, method, rounds)
        for backend, timing in timings.items():
            if backend not in kernels:
                continue
            if isinstance(timing, str):
                configuration.rejected[backend] = f"timing it at M = {m} failed: {timing}"
                del kernels[backend]
                continue
            figures[backend].us[m] = round(timing.median, 4)
            spread = timing.spread
            figures[backend].spread[m] = round(spread, 4) if math.isfinite(spread) else 1.0
        progress.advance()
    timed = {backend: figures[backend] for backend in kernels}
    if not timed:
        why = "no backend here exports it" if not (configuration.rejected or configuration.declined) else "none left"
        configuration.problem = f"no candidate: {why}"
        return
    choice, switch = choose(timed, configuration.default)
    configuration.entry = _plan.Entry(
        kernel=kernel,
        config=_plan.config_fields(configuration.config),
        label=configuration.label,
        choice=choice,
        switch=switch,
        candidates=timed,
        rejected=dict(configuration.rejected),
        declined=dict(configuration.declined),
    )


def declines(factory: Any, config: Any) -> str | None:
    """Why ``factory``'s backend does not serve ``config`` (its ``lazyops_supports`` hook), or None: it serves it
    (also when the factory has no hook: then it serves every configuration its spec accepts)."""
    supports = getattr(factory, "lazyops_supports", None)
    if supports is None:
        return None
    reason = supports(config)
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"its supports hook returned {type(reason).__name__}, not None or a reason (a string)")
    return reason


def check(factory: Any, configuration: Configuration, backend: str) -> float:
    """``lazyops.testing.check_case`` on the configuration at :data:`CHECK_TOKENS`: the worst relative error, or
    ``AssertionError`` saying what is wrong."""
    import torch

    from lazyops.testing import Case, check_case, default_device

    case = Case(
        configuration.kernel,
        (),
        configuration.arguments,
        tokens=CHECK_TOKENS,
        seed=0,
        geometry=configuration.geometry,
    )
    with torch.inference_mode():
        return check_case(factory, case, device=default_device(backend))


def time_at(
    configuration: Configuration, kernels: Mapping[str, Callable[..., Any]], tokens: int, method: str, rounds: int
) -> dict[str, Any]:
    """Each kernel's :class:`lazyops.bench.engine.Timing` at ``tokens`` (or the error it failed with), interleaved."""
    import torch

    from lazyops.bench import engine as _bench
    from lazyops.specs import spec
    from lazyops.testing import Inputs, default_device
    from lazyops.testing.cases import examples

    kernel_spec = spec(configuration.kernel)
    samplers: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for backend, kernel in kernels.items():
        device = default_device(backend)
        try:
            # inputs of its own (the same values): a kernel that updates its inputs in place changes no one else's
            args = examples(kernel_spec).example_inputs(
                configuration.config, tokens, Inputs(0, device), configuration.geometry
            )
            samplers[backend] = sampler(kernel, tuple(args), device, method)
        except Exception as error:  # noqa: BLE001 - one kernel failing is its rejection; the others are timed
            failed[backend] = _one_line(error)
    with torch.inference_mode():
        timed: dict[str, Any] = dict(_bench.interleave(samplers, rounds))
    if any(default_device(backend).startswith("cuda") for backend in kernels):
        torch.cuda.empty_cache()
    return {**timed, **failed}


def sampler(kernel: Callable[..., Any], args: tuple[Any, ...], device: str, method: str) -> Callable[[], list[float]]:
    """What ``engine.interleave`` calls for one sample of ``kernel(*args)``, µs per call: per call in a
    CUDA graph, do_bench's stream time, or back-to-back calls timed on the host (``blocked_autorange`` for a kernel
    on the CPU; for one on a GPU, what the host pays per launch, one synchronize at the end)."""
    import torch

    from lazyops.bench import engine as _bench

    with torch.inference_mode():
        kernel(*args)  # the first call compiles and specialises (Triton): outside every figure
        if method == "cuda-graph":
            captures, replays = counts(kernel, args, device, GRAPH_SAMPLE_S, MAX_CAPTURES)
            return _bench.graph_sampler(kernel, [args], captures, max(1, min(MAX_REPLAYS, replays // captures)))
        if method == "host" and device.startswith("cuda"):
            calls, _ = counts(kernel, args, device, HOST_SAMPLE_S, MAX_HOST_CALLS)
            return _bench.host_sampler(kernel, args, device, calls)
        budget = STREAM_SAMPLE_S if method == "stream" else HOST_SAMPLE_S
        return _bench.stream_sampler(kernel, [args], device, budget)


def counts(
    kernel: Callable[..., Any], args: tuple[Any, ...], device: str, budget_s: float, most: int
) -> tuple[int, int]:
    """How many calls take about ``budget_s``, at most ``most`` and at least one, from three calls' time (eager:
    an upper bound of a replayed call's), and how many calls the whole budget holds: for a CUDA graph, 50 captured
    and several replays for a launch-sized call, one call replayed a few times for a GEMM of 8192 tokens."""
    import torch

    started = time.perf_counter()
    for _ in range(3):
        kernel(*args)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    each = max((time.perf_counter() - started) / 3, 1e-7)
    calls = math.ceil(budget_s / each)
    return max(1, min(most, calls)), max(1, calls)


def _one_line(error: BaseException, *, with_type: bool = True) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if with_type else text


# -- output ------------------------------------------------------------------------------------------------------


def gains(configuration: Configuration, tokens: Sequence[int]) -> dict[int, float | None]:
    """The plan's speed over the default resolution's backend at each token count (its µs over the plan's kernel's
    µs); None where the default was not timed (it cannot run here, declined, or was rejected)."""
    entry = configuration.entry
    if entry is None:
        return {m: None for m in tokens}
    default = entry.candidates.get(configuration.default or "")
    found: dict[int, float | None] = {}
    for m in tokens:
        chosen = entry.candidates[entry.backend_for(m)].us.get(m)
        found[m] = default.us[m] / chosen if default is not None and chosen and m in default.us else None
    return found


def chosen_text(entry: Entry) -> str:
    """``triton``, or ``tilelang < 128 <= triton`` for a switch."""
    if entry.switch is None:
        return entry.choice
    return f"{entry.switch.backend} < {entry.switch.below} <= {entry.choice}"


def as_json(
    configurations: list[Configuration], skipped: list[Skipped], plan: Any, path: str, elapsed: float
) -> dict[str, Any]:
    tokens = plan.timing["tokens"]
    return {
        "plan": path,
        "device": plan.environment["device"],
        "timing": plan.timing,
        "elapsed_s": round(elapsed, 3),
        "configurations": [
            {
                "kernel": c.kernel,
                "label": c.label,
                "default": c.default,
                "choice": c.entry.choice if c.entry else None,
                "switch": {"below": c.entry.switch.below, "backend": c.entry.switch.backend}
                if c.entry and c.entry.switch
                else None,
                "gain": {str(m): None if g is None else round(g, 4) for m, g in gains(c, tokens).items()},
                "us": {
                    backend: {str(m): us for m, us in figures.us.items()}
                    for backend, figures in (c.entry.candidates.items() if c.entry else ())
                },
                "rejected": c.rejected,
                "declined": c.declined,
                "problem": c.problem,
            }
            for c in configurations
        ],
        "skipped": [{"kernel": s.kernel, "args": s.text, "reason": s.reason} for s in skipped],
    }


def render(
    out: Any, configurations: list[Configuration], skipped: list[Skipped], plan: Any, path: str, elapsed: float
) -> None:
    from lazyops.cli._output import count, seconds, shortened

    tokens = plan.timing["tokens"]
    method = {"cuda-graph": "per call in CUDA graphs", "stream": "stream time", "host": "host time"}
    out.line(
        ("lazyops tune", "head"),
        f" on {plan.environment['device']}: {count(len(configurations), 'configuration')}, "
        f"{method[plan.timing['method']]} at M = {', '.join(map(str, tokens))}",
    )
    rows = []
    for c in configurations:
        configuration = shortened(_arguments_of(c.label), 240)  # wrapped in its column, not cut (issue 33)
        if c.entry is None:
            rows.append([c.kernel, configuration, c.default or "-", ("not tuned", "fail"), *([""] * len(tokens))])
            continue
        cells = []
        for gain in gains(c, tokens).values():
            if gain is None:
                cells.append(("-", "dim"))
            else:
                cells.append((f"{gain:.2f}", "ok" if gain >= 1 + SWITCH_GAIN else ""))
        rows.append([c.kernel, configuration, c.default or "-", chosen_text(c.entry), *cells])
    out.table(
        ["kernel", "configuration", "default", "plan", *(f"x M={m}" for m in tokens)],
        rows,
        justify=["left", "left", "left", "left", *(["right"] * len(tokens))],
        no_wrap=("kernel", "default", *(f"x M={m}" for m in tokens)),
    )
    out.line(("x M=T: the default backend's time over the plan's at T tokens (> 1: the plan is faster)", "dim"))
    for c in configurations:
        for backend, reason in c.rejected.items():
            out.line(("rejected: ", "fail"), f"{c.label} in {backend}: {reason}")
        for backend, reason in c.declined.items():
            out.line(("declined: ", "dim"), f"{c.label} in {backend}: {reason}")
        if c.problem:
            out.line(("not tuned: ", "fail"), f"{c.label}: {c.problem}")
    for s in skipped:
        out.line(("skipped: ", "warn"), f"{s.kernel}({shortened(s.text)}): {s.reason}")
    problems = [
        count(sum(len(c.rejected) for c in configurations), "candidate") + " rejected",
        count(sum(c.problem is not None for c in configurations) + len(skipped), "configuration") + " not tuned",
    ]
    problems = [text for text in problems if not text.startswith("0 ")]
    verdict = (", ".join(problems), "fail") if problems else ("done", "ok")
    entries = count(len(plan.entries), "entry", "entries")
    out.line(verdict, f" in {seconds(elapsed)}; wrote {path} ({entries}); use it with LAZYOPS_PLAN={path}")


def _arguments_of(label: str) -> str:
    """``rmsnorm_tl(n=4096, dtype=torch.bfloat16)`` -> ``n=4096, dtype=torch.bfloat16``: the kernel has a column."""
    opened = label.find("(")
    return label[opened + 1 : -1] if opened > 0 and label.endswith(")") else label
