"""The timing engine behind ``lazyops bench`` and the benchmark scripts: every kernel, from its spec.

Everything a measurement needs about a kernel comes from its spec (``lazyops.specs``) and its examples
(``lazyops.testing.cases``): the engine-sized configuration (``examples(spec).benchmark(dtype)``), the inputs
(``example_inputs``), the bytes and FLOPs one call moves (``traffic``), and the definition that the generic peers run.
So a new kernel is benchmarked, against torch eager and ``torch.compile``, the day its spec exists, with no
benchmark code of its own.

What is timed (:func:`implementations`): each lazyops backend by name (third-party ones too), ``torch eager`` (the
spec's definition run in float32), ``torch.compile`` (the same, compiled), any peers the caller passes in (the
benchmark scripts pass torch's own ops and liger-kernel; nothing here reads files of a source checkout), and for a
memory-bound kernel a copy of the same bytes.

How it is timed, three ways, every figure a median with its spread:

- :func:`measure`, stream time, a kernel's figure of merit: on CUDA ``triton.testing.do_bench`` (the L2 flushed
  before every call, calls rotating through enough input sets to overflow it); on the host
  ``torch.utils.benchmark.Timer.blocked_autorange``, which sizes its blocks of calls to the clock. Converted to
  GB/s or TFLOP/s.
- :func:`host_time`, what the host pays per call at one token: ``calls`` back-to-back calls after a warm-up,
  ``perf_counter`` around them, one synchronize at the end.
- :func:`graph_time`, what a call costs inside a CUDA graph: 50 back-to-back calls captured, the graph replayed 20
  times between CUDA events, divided.

The implementations are *interleaved*: ``rounds`` rounds, each timing every implementation once, in an order that
rotates from round to round, so a busy spell of the machine falls on all of them alike instead of on one. A row
keeps the median of all its samples and their quartiles (``low_us``, ``high_us``); a row whose interquartile range
is more than :data:`NOISY_SPREAD` of its median is ``noisy``: the machine moved under it more than the differences
it would be ranked by.

Every function returns :class:`Row` objects (plain dataclasses, ``dataclasses.asdict`` gives JSON); nothing raises
for one implementation that fails: its row carries the error, and the others still run. This module imports torch
at once; ``import lazyops`` never imports it.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lazyops.specs import kernel_names
from lazyops.specs import spec as spec_of
from lazyops.testing.cases import examples

__all__ = [
    "COMPILED",
    "EAGER",
    "NOISY_SPREAD",
    "SAME_BYTES_COPY",
    "Impl",
    "Peer",
    "Row",
    "Timing",
    "backend_status",
    "configured",
    "copy_ceiling",
    "default_device",
    "describe",
    "eager_call",
    "example",
    "graph_time",
    "host_time",
    "implementations",
    "interleave",
    "kernel_name",
    "measure",
    "own_code",
    "rank",
]

EAGER, COMPILED = "torch eager", "torch.compile"
#: The ``"ceiling"`` implementation :func:`implementations` adds with ``same_bytes_copy``.
SAME_BYTES_COPY = "copy of the same bytes"
#: Input sets rotate until one round of them holds this much: four times an H200's 60 MB L2, so no call finds
#: its inputs cached by an earlier one (on CUDA; on the host one set serves).
ROTATE_BYTES = 256 * 2**20
MAX_SETS = 64
#: What ``small=True`` clamps the benchmark configuration's sizes to: enough for every code path, small enough
#: for the host and Triton's interpreter.
SMALL_SIZE = 256
#: A row whose interquartile range exceeds this share of its median is marked ``noisy``: a 20 % spread can turn a
#: 1.2x lead into a tie, so such a row is not ranked against its peers.
NOISY_SPREAD = 0.2
#: Rounds of interleaved samples per figure, and the time each implementation gets in one round of stream timing.
ROUNDS = 5
ROUND_S = 0.03


# --- what is timed -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A peer that takes its inputs in another layout than the kernel.

    ``prepare(*args) -> args`` runs once per input set, outside the timing (liger's SiLU-and-mul takes the gate
    and the up projection as two tensors); ``call`` is what is timed.
    """

    call: Callable[..., Any]
    prepare: Callable[..., tuple[Any, ...]] | None = None


#: A peer as a caller passes it: ``build(config) -> call`` (or a :class:`Peer`), ``config`` being the spec's
#: configuration. An ``ImportError`` while building means "not installed here": that peer's rows say so.
PeerBuilder = Callable[[Any], Any]


@dataclass(frozen=True)
class Impl:
    """One implementation of one kernel: ``build(example) -> call`` (or a :class:`Peer`), ``example`` being the
    factory arguments (a ``lazyops.specs.Example``: what ``examples(spec).benchmark`` gives).

    ``kind`` is ``"lazyops"`` for a backend's kernel, ``"peer"`` for anything it is compared against,
    ``"ceiling"`` for what bounds them all (never ranked as a peer).
    ``problem``, when set, says why it cannot run here (its rows carry it as their error).
    ``sticky``: its first failure stands for every later size and mode, which are not tried (``torch.compile``: a
    compiler error at one size recurs at the next, and each attempt costs tens of seconds); ``failures`` keeps it.
    """

    name: str
    kind: str
    build: Callable[[Any], Any] = field(repr=False)
    problem: str | None = None
    backend: str | None = None
    sticky: bool = False
    failures: list[str] = field(default_factory=list, repr=False, compare=False)

    def failed(self, row: Row, error: BaseException) -> None:
        """``row`` failed with ``error``: say so in the row and, where ``sticky``, for every later attempt."""
        row.error = _one_line(error)
        if os.environ.get("LAZYOPS_BENCH_TRACEBACK") == "1":  # a bisect: which call failed, not only its message
            traceback.print_exception(error, file=sys.stderr)
        if self.sticky and not self.failures:
            self.failures.append(f"not retried: failed at an earlier size ({row.error})")

    def skipped(self) -> str | None:
        """Why this implementation is not tried again (a sticky one's first failure), or None."""
        return self.failures[0] if self.failures else None


@dataclass
class Row:
    """One measurement (or one failed attempt: ``error`` set, no figures).

    ``method``: ``"stream"`` (:func:`measure`), ``"host"``, ``"graph"`` or ``"copy"``. ``us`` is the median µs per
    call, ``low_us`` and ``high_us`` the quartiles of the samples; ``noisy``: their spread is more than
    :data:`NOISY_SPREAD` of the median. ``rate`` is in ``unit`` (GB/s for memory-bound kernels, TFLOP/s for
    compute-bound ones) for stream and copy rows, and GB/s for a memory-bound kernel's graph rows.
    ``vs_best_peer`` (set by :func:`rank`): this row against the best peer of the same kernel, method, token count
    and dtype, >1 meaning faster.
    """

    kernel: str
    impl: str
    kind: str
    method: str
    tokens: int
    dtype: str
    us: float | None = None
    low_us: float | None = None
    high_us: float | None = None
    noisy: bool | None = None
    samples: int | None = None
    rate: float | None = None
    unit: str | None = None
    bytes: int | None = None
    flops: int | None = None
    input_sets: int | None = None
    first_call_s: float | None = None
    vs_best_peer: float | None = None
    error: str | None = None
    note: str | None = None
    #: the configuration timed: the factory call, and the input geometry where the spec has one
    config: str | None = None

    def take(self, timing: Timing) -> None:
        """Set the figures from ``timing``."""
        self.us, self.low_us, self.high_us = timing.median, timing.low, timing.high
        self.noisy, self.samples = timing.noisy, timing.count


@dataclass(frozen=True)
class Timing:
    """µs per call: the median of the samples and their quartiles."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Timing:
        """The median and quartiles of ``samples`` (one sample: all three are it)."""
        if not samples:
            raise ValueError("no samples to summarise: the implementation was never timed")
        if len(samples) == 1:
            return cls(samples[0], samples[0], samples[0], 1)
        low, _, high = statistics.quantiles(samples, n=4, method="inclusive")
        return cls(statistics.median(samples), low, high, len(samples))

    @property
    def spread(self) -> float:
        """The interquartile range over the median."""
        return (self.high - self.low) / self.median if self.median > 0 else math.inf

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD


def kernel_name(kernel: str) -> str:
    """``"rmsnorm"`` or ``"rmsnorm_tl"`` -> ``"rmsnorm_tl"`` (the spec's name); ``KeyError`` if unknown."""
    name = kernel if kernel.endswith("_tl") else f"{kernel}_tl"
    if name not in kernel_names():
        raise KeyError(f"lazyops specifies no kernel {kernel!r}; it specifies {', '.join(kernel_names())}")
    return name


#: Configurations timed instead of the spec's benchmark one, by kernel name (:func:`configured`).
_chosen: dict[str, Callable[[Any], Any]] = {}


@contextlib.contextmanager
def configured(kernel: str, chosen: Callable[[Any], Any]) -> Iterator[None]:
    """Inside the block, benchmarks of ``kernel`` time ``chosen(dtype)`` (an ``Example``) instead of
    ``examples(spec).benchmark(dtype)``: ``bench_kernels.py --sampling``'s vocabularies and options."""
    name = kernel_name(kernel)
    _chosen[name] = chosen
    try:
        yield
    finally:
        del _chosen[name]


def example(kernel: str, dtype: Any = "bfloat16", *, small: bool = False) -> Any:
    """The configuration benchmarks time: ``examples(spec).benchmark(dtype)``; ``small`` clamps its sizes to 256.

    The clamp is for checking logic on the host (Triton's interpreter takes 10 s for one 4096 x 4096 GEMM); a
    clamped configuration that the spec refuses falls back to the full one.
    """
    from lazyops.specs._spec import Example

    name = kernel_name(kernel)
    spec = spec_of(name)
    full = _chosen[name](_dtype(dtype)) if name in _chosen else examples(spec).benchmark(_dtype(dtype))
    if not small:
        return full

    def clamp(value: Any) -> Any:
        return min(value, SMALL_SIZE) if isinstance(value, int) and not isinstance(value, bool) else value

    shrunk = Example(
        tuple(clamp(a) for a in full.args),
        {key: clamp(value) for key, value in full.kwargs.items()},
        {key: clamp(value) for key, value in full.geometry.items()},
    )
    try:
        spec.bind(*shrunk.args, **shrunk.kwargs)
    except Exception:  # noqa: BLE001 - the spec has constraints the clamp broke: time the full size instead
        return full
    return shrunk


def implementations(
    kernel: str,
    backends: Iterable[str] | None = None,
    *,
    compile: bool = False,
    peers: Mapping[str, PeerBuilder] | None = None,
    same_bytes_copy: bool = False,
) -> list[Impl]:
    """What to time for ``kernel``: each backend of ``backends`` (default: every registered one), then the peers.

    A backend that does not export the kernel is left out; one that cannot run here is kept, with its
    ``problem``. The peers: ``torch eager`` always, ``torch.compile`` when ``compile``, then ``peers`` (a row name
    to ``build(config) -> call``; an ``ImportError`` while building means "not installed here").

    ``same_bytes_copy`` adds, for a memory-bound kernel, :data:`SAME_BYTES_COPY` (kind ``"ceiling"``): a
    device-to-device copy of as many bytes as the kernel moves at each token count, timed as the kernel is. It is
    that size's own ceiling: a short copy loses to its launch and tail what a 256 MiB one (:func:`copy_ceiling`)
    does not.
    """
    name = kernel_name(kernel)
    spec = spec_of(name)
    impls = []
    for backend, problem in backend_status(backends).items():
        impls.extend(_backend_impl(backend, name, problem))
    impls.append(Impl(EAGER, "peer", lambda chosen: eager_call(spec, _bind(spec, chosen))))
    if compile:
        # one compiled call per configuration, shared by every timing of it: each size compiles once, not once a mode
        made: dict[Any, Any] = {}

        def compiled(chosen: Any) -> Any:
            key = (chosen.args, tuple(sorted(chosen.kwargs.items())))
            if key not in made:
                made[key] = torch.compile(own_code(eager_call(spec, _bind(spec, chosen))), dynamic=False)
            return made[key]

        impls.append(Impl(COMPILED, "peer", compiled, sticky=True))
    for peer_name, build in (peers or {}).items():
        impls.append(Impl(peer_name, "peer", _peer(spec, build)))
    if same_bytes_copy:
        chosen = example(name)
        if examples(spec).traffic(_bind(spec, chosen), 1, chosen.geometry).bound != "compute":
            impls.append(Impl(SAME_BYTES_COPY, "ceiling", lambda chosen: _same_bytes_copy(spec, chosen)))
    return impls


def _peer(spec: Any, build: PeerBuilder) -> Callable[[Any], Any]:
    return lambda chosen: build(_bind(spec, chosen))


def own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own. Dynamo keeps the compiled variants of one code object (at most
    ``cache_size_limit``, 8, then it runs the code eagerly without a word), and every kernel's eager call shares
    one: a run over every kernel and size would time eager code as ``torch.compile`` after the eighth."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_compiled")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def _same_bytes_copy(spec: Any, chosen: Any) -> Peer:
    """A copy of the bytes ``spec``'s kernel moves on the inputs it is given: half of them read, half written."""
    config = _bind(spec, chosen)
    token_input = spec.inputs.index(spec.row_inputs[0])

    def buffers(*args: Any) -> tuple[Any, Any]:
        moved = examples(spec).traffic(config, args[token_input].shape[0], chosen.geometry).bytes
        source = torch.zeros(max(1, moved // 4), dtype=torch.bfloat16, device=args[token_input].device)
        return source, torch.empty_like(source)

    def copy(source: Any, target: Any) -> Any:
        return target.copy_(source)

    return Peer(copy, buffers)


def backend_status(backends: Iterable[str] | None = None) -> dict[str, str | None]:
    """``{backend: None if it runs here, else why not}`` for ``backends`` (default: every registered one)."""
    from lazyops import _api

    known = _api.backend_statuses()
    if backends is None:
        return dict(known)
    unknown = f"is registered (known: {', '.join(known)})"
    return {name: known.get(name, f"no backend {name!r} {unknown}") for name in backends}


def _backend_impl(backend: str, kernel: str, problem: str | None) -> list[Impl]:
    """``lazyops <backend>`` for ``kernel``: none if the backend does not export it, one that says why if it cannot
    run here (or is not registered), else one that builds the kernel from the backend's own factory."""
    from lazyops import _api

    label = f"lazyops {backend}"
    try:
        if kernel not in _api.exports(backend):
            return []
    except Exception as error:  # noqa: BLE001 - a backend whose kernel list cannot be read is reported, not fatal
        problem = problem or _one_line(error)
    if problem:
        return [Impl(label, "lazyops", _unbuildable, problem, backend)]

    def build(chosen: Any) -> Any:
        return _api.kernel_factory(backend, kernel)(*chosen.args, **chosen.kwargs)

    return [Impl(label, "lazyops", build, None, backend)]


def _unbuildable(chosen: Any) -> Any:
    raise RuntimeError("this implementation cannot run here")


def eager_call(spec: Any, config: Any) -> Callable[..., Any]:
    """The spec's definition as a kernel call: computed in float32 (as the kernels compute), results cast to the
    kernel's dtype (its output's: float8 for the fp8 norms), in-place results written back into their inputs, the
    kernel's return value returned."""
    reference, results, inputs, returns = spec.reference, spec.results, spec.inputs, spec.returns
    dtype = spec.out_dtype(config)
    written = [(inputs.index(name), position) for position, name in enumerate(results) if name != "out"]
    out_position = results.index("out") if "out" in results else None
    returned = None if returns == "out" else [inputs.index(name) for name in returns]

    def call(*args: Any) -> Any:
        widened = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        computed = reference(config, *widened)
        for index, position in written:
            args[index].copy_(computed[position])
        if returned is None:
            return computed[out_position].to(dtype)
        return tuple(args[index] for index in returned)

    call.__name__ = spec.name.removesuffix("_tl")
    return call


# --- measuring ---------------------------------------------------------------------------------------------------


Progress = Callable[[Row], None]
Sampler = Callable[[], list[float]]


def interleave(samplers: Mapping[str, Sampler], rounds: int = ROUNDS) -> dict[str, Timing | str]:
    """Run every sampler once a round for ``rounds`` rounds, starting each round one place further down the list,
    and summarise each one's samples (µs per call); a sampler that raises gets its error instead, and is not run
    again."""
    names = list(samplers)
    samples: dict[str, list[float]] = {name: [] for name in names}
    failed: dict[str, str] = {}
    for index in range(max(1, rounds)):
        shift = index % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if name in failed:
                continue
            try:
                samples[name].extend(samplers[name]())
            except Exception as error:  # noqa: BLE001 - one implementation failing must not stop the others
                failed[name] = _one_line(error)
    return {name: failed[name] if name in failed else Timing.of(samples[name]) for name in names}


def stream_sampler(fn: Callable[..., Any], sets: Sequence[tuple[Any, ...]], device: str, budget_s: float) -> Sampler:
    """Samples of ``fn``'s stream time, µs per call, rotating through the input ``sets``: on CUDA every call of
    one ``do_bench`` (the L2 flushed before each, ``budget_s`` of calls); on the host the blocks of calls of one
    ``blocked_autorange`` (at least ``budget_s`` of them)."""
    calls = 0

    def step() -> None:
        nonlocal calls
        fn(*sets[calls % len(sets)])
        calls += 1

    if device.startswith("cuda"):
        import triton.testing

        warmup = [25]  # ms, the first round only: compiles and autotuning happened at the first call

        def on_gpu() -> list[float]:
            with torch.no_grad():
                try:
                    times = triton.testing.do_bench(step, warmup=warmup[0], rep=budget_s * 1e3, return_mode="all")
                except AssertionError:  # a Triton without return_mode="all": its quartiles stand for the samples
                    times = triton.testing.do_bench(
                        step, warmup=warmup[0], rep=budget_s * 1e3, quantiles=[0.25, 0.5, 0.75]
                    )
            warmup[0] = 1
            return [t * 1e3 for t in times]

        return on_gpu
    with warnings.catch_warnings():  # its import touches torch.jit's deprecated scripting: not the user's concern
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.utils.benchmark import Timer

    timer = Timer(stmt="step()", globals={"step": step})

    def on_host() -> list[float]:
        with torch.no_grad():
            return [t * 1e6 for t in timer.blocked_autorange(min_run_time=budget_s).times]

    return on_host


def host_sampler(fn: Callable[..., Any], args: tuple[Any, ...], device: str, calls: int) -> Sampler:
    """One sample a round: ``calls`` back-to-back calls of ``fn(*args)``, ``perf_counter`` around them and one
    synchronize at the end, µs per call. On CUDA the GPU idles between such tiny launches, so this is what the host
    pays per call; on the host it includes the computation."""

    def sample() -> list[float]:
        with torch.no_grad():
            started = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            _synchronize(device)
        return [(time.perf_counter() - started) / calls * 1e6]

    return sample


def graph_sampler(fn: Callable[..., Any], sets: Sequence[tuple[Any, ...]], captures: int, replays: int) -> Sampler:
    """One sample a round, µs a call inside a CUDA graph: ``captures`` calls captured once (rotating through the
    input ``sets``, so a weight larger than the L2 is read from memory as in an engine), the graph replayed
    ``replays`` times between CUDA events, divided. The sampler holds ``fn`` and ``sets`` as long as the graph."""
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (compiles, autotunes, allocates) off the capture
            for index in range(3):
                fn(*sets[index % len(sets)])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for index in range(captures):
                fn(*sets[index % len(sets)])
        graph.replay()
        torch.cuda.synchronize()
    return GraphReplays(graph, fn, tuple(sets), captures, replays)


@dataclass(frozen=True)
class GraphReplays:
    """:func:`graph_sampler`'s sampler. A graph replays on the addresses it captured: the inputs' and what ``fn``
    holds (a cache, a buffer), none of them in the graph's own pool. So it keeps them: freed, their memory goes to
    the next allocation (another implementation's inputs), and every replay writes into it. (Issue 36: the MoE
    layer's decode asserted on an index out of range after the harness dropped one row's inputs, whose graph then
    overwrote the next row's positions.)"""

    graph: Any
    fn: Callable[..., Any]
    sets: tuple[tuple[Any, ...], ...]
    captures: int
    replays: int

    def __call__(self) -> list[float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.replays):
            self.graph.replay()
        end.record()
        torch.cuda.synchronize()
        return [float(start.elapsed_time(end)) * 1e3 / (self.replays * self.captures)]


def measure(
    kernel: str,
    impls: Sequence[Impl],
    tokens: Iterable[int],
    dtype: Any = "bfloat16",
    *,
    device: str | None = None,
    small: bool = False,
    progress: Progress | None = None,
    rotate_bytes: int | None = None,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
) -> list[Row]:
    """Stream time of each implementation at each token count: one :class:`Row` each.

    Every implementation gets the same inputs (``examples(spec).example_inputs``, seeded); on CUDA the calls cycle
    through enough input sets to hold ``rotate_bytes`` (default :data:`ROTATE_BYTES`), on the host one set serves. The
    implementations are interleaved (:func:`interleave`), ``round_s`` of calls each a round. ``first_call_s`` is
    the first call's wall time (compiles included).
    """
    name, dtype, device = kernel_name(kernel), _dtype(dtype), default_device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _bind(spec, chosen)
    described = describe(name, dtype, small=small)
    built = {impl.name: _build(impl, chosen) for impl in impls}
    rotate = (ROTATE_BYTES if device.startswith("cuda") else 0) if rotate_bytes is None else rotate_bytes
    rows: list[Row] = []
    for m in tokens:
        traffic = examples(spec).traffic(config, m, chosen.geometry)
        compute = traffic.bound == "compute"
        sets = _input_sets(spec, config, chosen, m, device, rotate)
        current = {}
        samplers: dict[str, Sampler] = {}
        for impl in impls:
            row = Row(
                _short(name),
                impl.name,
                impl.kind,
                "stream",
                m,
                _dtype_name(dtype),
                unit="TFLOP/s" if compute else "GB/s",
                bytes=traffic.bytes,
                flops=traffic.flops,
                input_sets=len(sets),
                config=described,
            )
            current[impl.name] = row
            call = impl.skipped() or built[impl.name]
            if compute and impl.kind == "ceiling":  # a kernel memory-bound at few tokens, compute-bound here
                call = COMPUTE_BOUND
            if isinstance(call, str):
                row.error = call
                continue
            try:
                prepared = _prepare(call, sets)
                row.first_call_s = _first_call(_callable(call), prepared[0], device)
                samplers[impl.name] = stream_sampler(_callable(call), prepared, device, round_s)
            except Exception as error:  # noqa: BLE001 - one implementation failing must not stop the run
                impl.failed(row, error)
        for impl_name, timing in interleave(samplers, rounds).items():
            row = current[impl_name]
            if isinstance(timing, str):
                row.error = timing
                continue
            row.take(timing)
            seconds = timing.median * 1e-6
            row.rate = traffic.flops / seconds / 1e12 if compute else traffic.bytes / seconds / 1e9
        for row in current.values():
            _record(rows, row, progress)
        del sets, samplers
        _release(device)
    return rows


def _record(rows: list[Row], row: Row, progress: Callable[[Row], None] | None) -> None:
    """Keep ``row`` and report it as soon as it is measured (a long run shows its progress row by row)."""
    rows.append(row)
    if progress:
        progress(row)


def host_time(
    kernel: str,
    impls: Sequence[Impl],
    dtype: Any = "bfloat16",
    *,
    device: str | None = None,
    small: bool = False,
    calls: int = 3000,
    warmup: int = 100,
    rounds: int = 3,
    progress: Progress | None = None,
) -> list[Row]:
    """Host time per call at one token: ``calls`` back-to-back calls after ``warmup``, ``perf_counter`` around
    them, one synchronize at the end (:func:`host_sampler`), one sample a round, the implementations interleaved."""
    name, dtype, device = kernel_name(kernel), _dtype(dtype), default_device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _bind(spec, chosen)
    described = describe(name, dtype, small=small)
    args = _input_sets(spec, config, chosen, 1, device, 0)[0]
    current: dict[str, Row] = {}
    samplers: dict[str, Sampler] = {}
    for impl in impls:
        row = Row(
            _short(name), impl.name, impl.kind, "host", 1, _dtype_name(dtype), note=f"{calls} calls", config=described
        )
        current[impl.name] = row
        call = impl.skipped() or _build(impl, chosen)
        if isinstance(call, str):
            row.error = call
            continue
        try:
            prepared = _prepare(call, [args])[0]
            fn = _callable(call)
            row.first_call_s = _first_call(fn, prepared, device)
            with torch.no_grad():
                for _ in range(warmup):
                    fn(*prepared)
            _synchronize(device)
            samplers[impl.name] = host_sampler(fn, prepared, device, calls)
        except Exception as error:  # noqa: BLE001
            impl.failed(row, error)
    return _finish(current, interleave(samplers, rounds), progress)


def graph_time(
    kernel: str,
    impls: Sequence[Impl],
    tokens: Iterable[int] = (1, 16, 128),
    dtype: Any = "bfloat16",
    *,
    device: str | None = None,
    small: bool = False,
    captures: int = 50,
    replays: int = 20,
    rounds: int = 3,
    progress: Progress | None = None,
) -> list[Row]:
    """Per-call time inside a CUDA graph (:func:`graph_sampler`), one sample a round, the implementations
    interleaved. CUDA only: elsewhere each row says so."""
    name, dtype, device = kernel_name(kernel), _dtype(dtype), default_device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _bind(spec, chosen)
    described = describe(name, dtype, small=small)
    built = {impl.name: _build(impl, chosen) for impl in impls}
    rows: list[Row] = []
    for m in tokens:
        args = _input_sets(spec, config, chosen, m, device, 0)[0]
        # a memory-bound call's bytes: its rate in the graph, against the copy's (issue 36's decode goal is a share of
        # HBM at a few tokens, where only a graph's time is the kernel's)
        traffic = examples(spec).traffic(config, m, chosen.geometry)
        moved = traffic.bytes if traffic.bound != "compute" else None
        current: dict[str, Row] = {}
        samplers: dict[str, Sampler] = {}
        for impl in impls:
            note = f"{captures} calls captured, {replays} replays"
            row = Row(
                _short(name),
                impl.name,
                impl.kind,
                "graph",
                m,
                _dtype_name(dtype),
                unit="GB/s" if moved else None,
                bytes=moved,
                note=note,
                config=described,
            )
            current[impl.name] = row
            call = impl.skipped() or built[impl.name]
            if not device.startswith("cuda"):
                row.error = f"CUDA graphs need a CUDA device (this run: {device})"
            elif isinstance(call, str):
                row.error = call
            elif reads_host(_callable(call), _prepare(call, [args])[0]):
                row.error = HOST_READ
            else:
                try:
                    samplers[impl.name] = graph_sampler(_callable(call), _prepare(call, [args]), captures, replays)
                except Exception as error:  # noqa: BLE001
                    impl.failed(row, error)
        rows += _finish(current, interleave(samplers, rounds), progress)
        _release(device)
    return rows


#: A copy's row where the kernel is compute-bound at that size (fused_moe_tl at prefill): its ceiling is the FLOPs.
COMPUTE_BOUND = "skipped: compute-bound at this size, where a copy of the same bytes is no ceiling"

#: A graph row's error where the implementation reads tensor values on the host (the torch backend's and the specs'
#: paged attention and cache write read lengths and slots with ``tolist``): skipped, not failed.
HOST_READ = "skipped: it reads tensor values on the host (a synchronising call), which a CUDA graph cannot capture"


def reads_host(fn: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Whether a call of ``fn(*args)`` synchronises with the host (``tensor.tolist()``, ``.item()``): a first call (it
    may compile, build tables), then a second on a CUDA device under ``torch.cuda.set_sync_debug_mode("error")``, as a
    replay would run. False off CUDA (nothing to capture there) and where a call fails for another reason (the
    capture then says why)."""
    if not any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        return False
    previous = torch.cuda.get_sync_debug_mode()
    try:
        with torch.no_grad():
            fn(*args)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            fn(*args)
    except RuntimeError as error:
        return "synchroniz" in str(error)
    except Exception:  # noqa: BLE001 - another failure: the graph's row says it
        return False
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return False


def _finish(current: dict[str, Row], timings: dict[str, Timing | str], progress: Progress | None) -> list[Row]:
    """``current``'s rows with their timings (or errors), each reported to ``progress``."""
    rows: list[Row] = []
    for impl_name, timing in timings.items():
        if isinstance(timing, str):
            current[impl_name].error = timing
        else:
            row = current[impl_name]
            row.take(timing)
            if row.bytes:
                row.rate = row.bytes / timing.median / 1e3  # bytes a µs / 1e3: GB/s
    for row in current.values():
        _record(rows, row, progress)
    return rows


def copy_ceiling(megabytes: int = 256, *, device: str | None = None, rounds: int = ROUNDS) -> Row:
    """A device-to-device copy of ``megabytes``: bytes read plus written per second, the memory-bound ceiling."""
    device = default_device(device)
    elements = megabytes * 2**20 // 2
    source = torch.randn(elements, device=device, dtype=torch.float32).to(torch.bfloat16)
    target = torch.empty_like(source)
    moved = 2 * source.numel() * source.element_size()
    row = Row(
        "copy",
        "torch copy_",
        "ceiling",
        "copy",
        0,
        "bfloat16",
        unit="GB/s",
        bytes=moved,
        input_sets=1,
        note=f"{megabytes} MiB read and written",
    )
    timing = interleave(
        {row.impl: stream_sampler(lambda s, t: t.copy_(s), [(source, target)], device, ROUND_S)}, rounds
    )
    result = timing[row.impl]
    if isinstance(result, str):
        row.error = result
    else:
        row.take(result)
        row.rate = moved / (result.median * 1e-6) / 1e9
    return row


def rank(rows: Sequence[Row]) -> None:
    """Set each row's ``vs_best_peer``: its rate over the best peer's (stream, copy), or the best peer's µs over
    its own (host, graph), within the same kernel, method, token count and dtype. >1: faster than every peer."""
    best: dict[tuple[Any, ...], float] = {}
    for row in rows:
        if row.kind != "peer" or row.us is None:
            continue
        key = (row.kernel, row.method, row.tokens, row.dtype)
        figure = row.rate if row.rate is not None else -row.us
        if key not in best or figure > best[key]:
            best[key] = figure
    for row in rows:
        key = (row.kernel, row.method, row.tokens, row.dtype)
        if row.us is None or key not in best:
            continue
        if row.rate is not None:
            row.vs_best_peer = row.rate / best[key] if best[key] else None
        else:
            row.vs_best_peer = -best[key] / row.us if row.us else None


# --- the parts ---------------------------------------------------------------------------------------------------


def _dtype(dtype: Any) -> torch.dtype:
    from lazyops.specs._params import canonical_dtype

    return canonical_dtype("lazyops bench", dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def default_device(device: str | None = None) -> str:
    """``device``, or where the engine times by default: CUDA when torch sees it, else the host."""
    return str(device) if device else ("cuda" if torch.cuda.is_available() else "cpu")


def _short(kernel: str) -> str:
    return kernel.removesuffix("_tl")


def _bind(spec: Any, chosen: Any) -> Any:
    return spec.bind(*chosen.args, **chosen.kwargs)


def describe(kernel: str, dtype: Any = "bfloat16", *, small: bool = False) -> str:
    """The configuration :func:`measure` times, in words: ``rope_tl(head_dim=128, ...) with query_heads=32, ...``."""
    name = kernel_name(kernel)
    chosen = example(name, dtype, small=small)
    label = _bind(spec_of(name), chosen).label
    geometry = ", ".join(
        f"{key}={_dtype_name(v) if isinstance(v, torch.dtype) else v}" for key, v in chosen.geometry.items()
    )
    return f"{label} with {geometry}" if geometry else label


def _build(impl: Impl, chosen: Any) -> Any:
    """The implementation's call (or :class:`Peer`), or a string saying why there is none."""
    if impl.problem:
        return f"unavailable: {impl.problem}"
    try:
        built = impl.build(chosen)
    except ImportError as error:
        return f"not installed here: {_one_line(error)}"
    except Exception as error:  # noqa: BLE001
        return f"building it failed: {_one_line(error)}"
    return built


def _callable(built: Any) -> Callable[..., Any]:
    return built.call if isinstance(built, Peer) else built


def _prepare(built: Any, sets: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    if isinstance(built, Peer) and built.prepare is not None:
        return [tuple(built.prepare(*args)) for args in sets]
    return sets


def _input_sets(spec: Any, config: Any, chosen: Any, tokens: int, device: str, rotate: int) -> list[tuple[Any, ...]]:
    from lazyops.testing import Inputs

    def draw(seed: int) -> tuple[Any, ...]:
        return tuple(examples(spec).example_inputs(config, tokens, Inputs(seed, device), chosen.geometry))

    first = draw(0)
    size = sum(t.numel() * t.element_size() for t in first if isinstance(t, torch.Tensor)) or 1
    count = max(1, min(MAX_SETS, math.ceil(rotate / size))) if rotate else 1
    return [first] + [draw(seed) for seed in range(1, count)]


def _first_call(fn: Callable[..., Any], args: tuple[Any, ...], device: str) -> float:
    started = time.perf_counter()
    with torch.no_grad():
        fn(*args)
    _synchronize(device)
    return round(time.perf_counter() - started, 3)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _release(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
