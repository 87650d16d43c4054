"""The timing engine behind ``benchmarks/gpu_bench.py`` and ``lazyops bench``: every kernel, from its spec.

Everything a measurement needs about a kernel comes from its spec (``lazyops.specs``): the engine-sized
configuration (``spec.benchmark(dtype)``), the inputs (``spec.example_inputs``), the bytes and FLOPs one call moves
(``spec.traffic``), and the definition that the generic peers run. So a new kernel is benchmarked, against
torch eager and ``torch.compile``, the day its spec exists, with no benchmark code of its own.

The API, small on purpose (the command line and the GPU scripts stand on it):

- :func:`implementations` ``(kernel, backends, compile=False)``: what to time, as :class:`Impl` objects: each
  lazyops backend by name (through the registry, so third-party backends too), ``torch eager`` (the spec's
  reference run in float32), ``torch.compile`` (the same, compiled), and the peers a kernel's optional module
  ``benchmarks/kernels/<kernel>.py`` declares (``F.rms_norm``, liger-kernel, cuBLAS).
- :func:`measure` ``(kernel, impls, tokens, dtype)``: stream time, the figure of merit of a kernel: medians of
  ``triton.testing.do_bench`` on CUDA (the L2 flushed before every call, and calls rotating through enough
  input sets to overflow it), a ``perf_counter`` median on the host; converted to GB/s or TFLOP/s.
- :func:`host_time` and :func:`graph_time`: what an engine feels at decode. Host time per call at one token
  (3000 back-to-back calls after a warm-up, one synchronize at the end), and the per-call time inside a CUDA
  graph (50 back-to-back calls captured, the graph replayed 20 times).
- :func:`fullgraph_check`: does ``torch.compile(fullgraph=True)`` take the kernel, with eager's output?
- :func:`copy_ceiling`: a device-to-device copy, the bandwidth ceiling the memory-bound kernels are held to.
- :func:`rank`: each row's standing against the best peer of its group.
- :func:`backend_status`, :func:`example`, :func:`kernel_name`: which backends run here, the configuration timed
  (``small=True``: sizes clamped for the host), a kernel's spec name from its short one.

Every function returns :class:`Row` objects (plain dataclasses, ``dataclasses.asdict`` gives JSON); nothing
raises for one implementation that fails: its row carries the error, and the others still run.

This module imports torch at once; ``import lazyops`` never imports it.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lazyops.specs import kernel_names
from lazyops.specs import spec as spec_of

__all__ = [
    "Impl",
    "Peer",
    "Row",
    "backend_status",
    "copy_ceiling",
    "default_device",
    "describe",
    "example",
    "fullgraph_check",
    "graph_time",
    "host_time",
    "implementations",
    "kernel_name",
    "measure",
    "peer_dir",
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


# --- what is timed -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A peer built by a kernel's peer module, when it takes its inputs in another layout than the kernel.

    ``prepare(*args) -> args`` runs once per input set, outside the timing (liger's SiLU-and-mul takes the gate
    and the up projection as two tensors); ``call`` is what is timed.
    """

    call: Callable[..., Any]
    prepare: Callable[..., tuple[Any, ...]] | None = None


@dataclass(frozen=True)
class Impl:
    """One implementation of one kernel: ``build(example) -> call`` (or a :class:`Peer`), ``example`` being the
    factory arguments (a ``lazyops.specs.Example``: what ``spec.benchmark`` gives).

    ``kind`` is ``"lazyops"`` for a backend's kernel, ``"peer"`` for anything it is compared against,
    ``"ceiling"`` for what bounds them all (never ranked as a peer).
    ``problem``, when set, says why it cannot run here (its rows carry it as their error).
    """

    name: str
    kind: str
    build: Callable[[Any], Any] = field(repr=False)
    problem: str | None = None
    backend: str | None = None


@dataclass
class Row:
    """One measurement (or one failed attempt: ``error`` set, no figures).

    ``method``: ``"stream"`` (:func:`measure`), ``"host"``, ``"graph"``, ``"fullgraph"`` or ``"copy"``.
    ``rate`` is in ``unit`` (GB/s for memory-bound kernels, TFLOP/s for compute-bound ones) for stream and
    copy rows; host and graph rows give µs per call only. ``vs_best_peer`` (set by :func:`rank`): this row
    against the best peer of the same kernel, method, token count and dtype, >1 meaning faster.
    """

    kernel: str
    impl: str
    kind: str
    method: str
    tokens: int
    dtype: str
    us: float | None = None
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


def kernel_name(kernel: str) -> str:
    """``"rmsnorm"`` or ``"rmsnorm_tl"`` -> ``"rmsnorm_tl"`` (the spec's name); ``KeyError`` if unknown."""
    name = kernel if kernel.endswith("_tl") else f"{kernel}_tl"
    if name not in kernel_names():
        raise KeyError(f"lazyops specifies no kernel {kernel!r}; it specifies {', '.join(kernel_names())}")
    return name


def example(kernel: str, dtype: Any = "bfloat16", *, small: bool = False) -> Any:
    """The configuration benchmarks time: ``spec.benchmark(dtype)``; ``small`` clamps its sizes to 256.

    The clamp is for checking logic on the host (Triton's interpreter takes 10 s for one 4096 x 4096 GEMM); a
    clamped configuration that the spec refuses falls back to the full one.
    """
    from lazyops.specs._spec import Example

    spec = spec_of(kernel_name(kernel))
    full = spec.benchmark(_dtype(dtype))
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
        spec.configure(*shrunk.args, **shrunk.kwargs)
    except Exception:  # noqa: BLE001 - the spec has constraints the clamp broke: time the full size instead
        return full
    return shrunk


def peer_dir() -> Path | None:
    """Where the kernel-specific peer modules live: ``benchmarks/kernels`` of a source checkout, if present."""
    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels"
    return folder if folder.is_dir() else None


def implementations(
    kernel: str,
    backends: Iterable[str] | None = None,
    *,
    compile: bool = False,
    peers: bool = True,
    peers_from: Path | None = None,
    same_bytes_copy: bool = False,
) -> list[Impl]:
    """What to time for ``kernel``: each backend of ``backends`` (default: every registered one), then the peers.

    A backend that does not export the kernel is left out; one that cannot run here is kept, with its
    ``problem``. The peers: ``torch eager`` always, ``torch.compile`` when ``compile``, then (``peers``) those
    of ``<peers_from or peer_dir()>/<kernel>.py``, whose ``PEERS`` maps a name to ``build(config) -> call``
    (an ``ImportError`` while building means "not installed here": that peer's row says so).

    ``same_bytes_copy`` adds, for a memory-bound kernel, :data:`SAME_BYTES_COPY` (kind ``"ceiling"``): a
    device-to-device copy of as many bytes as the kernel moves at each token count, timed as the kernel is. It is
    that size's own ceiling: a short copy loses to its launch and tail what a 256 MiB one (:func:`copy_ceiling`)
    does not.
    """
    name = kernel_name(kernel)
    spec = spec_of(name)
    registry = _registry()
    impls = []
    for backend in registry.names if backends is None else backends:
        impls.extend(_backend_impl(registry, backend, name))
    impls.append(Impl(EAGER, "peer", lambda chosen: eager_call(spec, _configure(spec, chosen))))
    if compile:
        impls.append(
            Impl(
                COMPILED,
                "peer",
                lambda chosen: torch.compile(eager_call(spec, _configure(spec, chosen)), dynamic=False),
            )
        )
    if peers:
        impls.extend(_module_peers(spec, peers_from or peer_dir()))
    if same_bytes_copy:
        chosen = example(name)
        if spec.traffic(_configure(spec, chosen), 1, chosen.geometry).bound != "compute":
            impls.append(Impl(SAME_BYTES_COPY, "ceiling", lambda chosen: _same_bytes_copy(spec, chosen)))
    return impls


def _same_bytes_copy(spec: Any, chosen: Any) -> Peer:
    """A copy of the bytes ``spec``'s kernel moves on the inputs it is given: half of them read, half written."""
    config = _configure(spec, chosen)
    token_input = spec.inputs.index(spec.row_inputs[0])

    def buffers(*args: Any) -> tuple[Any, Any]:
        moved = spec.traffic(config, args[token_input].shape[0], chosen.geometry).bytes
        source = torch.zeros(max(1, moved // 4), dtype=torch.bfloat16, device=args[token_input].device)
        return source, torch.empty_like(source)

    def copy(source: Any, target: Any) -> Any:
        return target.copy_(source)

    return Peer(copy, buffers)


def backend_status(backends: Iterable[str] | None = None) -> dict[str, str | None]:
    """``{backend: None if it runs here, else why not}`` for ``backends`` (default: every registered one)."""
    registry = _registry()
    status: dict[str, str | None] = {}
    for backend in registry.names if backends is None else backends:
        if backend not in registry:
            status[backend] = f"no backend {backend!r} is registered (known: {', '.join(registry.names)})"
            continue
        try:
            status[backend] = registry[backend].unavailable_reason()
        except Exception as error:  # noqa: BLE001 - a backend that cannot load is reported, not fatal
            status[backend] = _one_line(error)
    return status


def _backend_impl(registry: Any, backend: str, kernel: str) -> list[Impl]:
    label = f"lazyops {backend}"
    if backend not in registry:
        known = ", ".join(registry.names)
        return [Impl(label, "lazyops", _unbuildable, f"no backend {backend!r} is registered (known: {known})", backend)]
    entry = registry[backend]
    try:
        if kernel not in entry.exports():
            return []
        problem = entry.unavailable_reason()
    except Exception as error:  # noqa: BLE001 - a backend that cannot load is reported, not fatal
        problem = _one_line(error)
    if problem:
        return [Impl(label, "lazyops", _unbuildable, problem, backend)]

    def build(chosen: Any) -> Any:
        return entry.kernel(kernel)(*chosen.args, **chosen.kwargs)

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


def _module_peers(spec: Any, folder: Path | None) -> list[Impl]:
    if folder is None:
        return []
    path = folder / f"{_short(spec.name)}.py"
    if not path.is_file():
        return []
    module_name = f"_lazyops_bench_peers.{path.stem}"
    try:
        module = sys.modules.get(module_name)
        if module is None or getattr(module, "__file__", None) != str(path):
            loader = importlib.util.spec_from_file_location(module_name, path)
            if loader is None or loader.loader is None:
                raise ImportError(f"{path} cannot be loaded as a Python module")
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
            sys.modules[module_name] = module
        declared = dict(module.PEERS)
    except Exception as error:  # noqa: BLE001 - a broken peer module is one error row, not a crashed run
        return [Impl(f"peers of {path.name}", "peer", _unbuildable, f"{path}: {_one_line(error)}")]

    def peer(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda chosen: build(_configure(spec, chosen))

    return [Impl(name, "peer", peer(build)) for name, build in declared.items()]


# --- measuring ---------------------------------------------------------------------------------------------------


Progress = Callable[[Row], None]


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
    repeats: int = 5,
) -> list[Row]:
    """Stream time of each implementation at each token count: one :class:`Row` each.

    Every implementation gets the same inputs (``spec.example_inputs``, seeded). On CUDA: the median of
    ``triton.testing.do_bench`` (L2 flushed before each call), calls cycling through enough input sets to hold
    ``rotate_bytes`` (default :data:`ROTATE_BYTES`). On the host: the median of ``repeats`` timed calls after
    one warm-up call, one input set. ``first_call_s`` is the first call's wall time (compiles included).
    """
    name, dtype, device = kernel_name(kernel), _dtype(dtype), _device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _configure(spec, chosen)
    described = describe(name, dtype, small=small)
    built = {impl.name: _build(impl, chosen) for impl in impls}
    rotate = (ROTATE_BYTES if device.startswith("cuda") else 0) if rotate_bytes is None else rotate_bytes
    rows: list[Row] = []
    for m in tokens:
        traffic = spec.traffic(config, m, chosen.geometry)
        compute = traffic.bound == "compute"
        sets = _input_sets(spec, config, chosen, m, device, rotate)
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
            call = built[impl.name]
            if isinstance(call, str):
                row.error = call
            else:
                try:
                    prepared = _prepare(call, sets)
                    row.first_call_s = _first_call(_callable(call), prepared[0], device)
                    row.us = _median_us(_callable(call), prepared, device, repeats)
                    seconds = row.us * 1e-6
                    row.rate = traffic.flops / seconds / 1e12 if compute else traffic.bytes / seconds / 1e9
                except Exception as error:  # noqa: BLE001 - one implementation failing must not stop the run
                    row.error = _one_line(error)
            _record(rows, row, progress)
        del sets
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
    progress: Progress | None = None,
) -> list[Row]:
    """Host time per call at one token: ``calls`` back-to-back calls after ``warmup``, ``perf_counter`` around
    them, one synchronize at the end. On CUDA the GPU idles between these tiny launches, so this is what the
    host pays per call (what decode pays outside CUDA graphs); on the host it includes the computation."""
    name, dtype, device = kernel_name(kernel), _dtype(dtype), _device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _configure(spec, chosen)
    described = describe(name, dtype, small=small)
    args = _input_sets(spec, config, chosen, 1, device, 0)[0]
    rows: list[Row] = []
    for impl in impls:
        row = Row(
            _short(name), impl.name, impl.kind, "host", 1, _dtype_name(dtype), note=f"{calls} calls", config=described
        )
        call = _build(impl, chosen)
        if isinstance(call, str):
            row.error = call
        else:
            try:
                prepared = _prepare(call, [args])[0]
                fn = _callable(call)
                row.first_call_s = _first_call(fn, prepared, device)
                for _ in range(warmup):
                    fn(*prepared)
                _synchronize(device)
                started = time.perf_counter()
                for _ in range(calls):
                    fn(*prepared)
                _synchronize(device)
                row.us = (time.perf_counter() - started) / calls * 1e6
            except Exception as error:  # noqa: BLE001
                row.error = _one_line(error)
        _record(rows, row, progress)
    return rows


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
    progress: Progress | None = None,
) -> list[Row]:
    """Per-call time inside a CUDA graph: ``captures`` back-to-back calls captured once (after a warm-up on a
    side stream), the graph replayed ``replays`` times between CUDA events, divided. CUDA only: elsewhere each
    row says so."""
    name, dtype, device = kernel_name(kernel), _dtype(dtype), _device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _configure(spec, chosen)
    described = describe(name, dtype, small=small)
    built = {impl.name: _build(impl, chosen) for impl in impls}
    rows: list[Row] = []
    for m in tokens:
        args = _input_sets(spec, config, chosen, m, device, 0)[0]
        for impl in impls:
            row = Row(
                _short(name),
                impl.name,
                impl.kind,
                "graph",
                m,
                _dtype_name(dtype),
                note=f"{captures} calls captured, {replays} replays",
                config=described,
            )
            call = built[impl.name]
            if not device.startswith("cuda"):
                row.error = f"CUDA graphs need a CUDA device (this run: {device})"
            elif isinstance(call, str):
                row.error = call
            else:
                try:
                    row.us = graph_us(_callable(call), _prepare(call, [args]), captures, replays)
                except Exception as error:  # noqa: BLE001
                    row.error = _one_line(error)
            _record(rows, row, progress)
        _release(device)
    return rows


def fullgraph_check(
    kernel: str,
    impls: Sequence[Impl],
    dtype: Any = "bfloat16",
    *,
    tokens: int = 16,
    device: str | None = None,
    small: bool = False,
    backend: str = "inductor",
    progress: Progress | None = None,
) -> list[Row]:
    """``torch.compile(call, fullgraph=True)`` of each implementation: ``note="ok ..."`` with the relative error
    of its results against the eager call on the same inputs, or ``error`` with the exact exception.
    ``backend`` is dynamo's (``"eager"`` checks the graph capture alone, without code generation)."""
    from lazyops.testing import relative_error

    name, dtype, device = kernel_name(kernel), _dtype(dtype), _device(device)
    spec = spec_of(name)
    chosen = example(name, dtype, small=small)
    config = _configure(spec, chosen)
    described = describe(name, dtype, small=small)
    args = _input_sets(spec, config, chosen, tokens, device, 0)[0]
    rows: list[Row] = []
    for impl in impls:
        row = Row(_short(name), impl.name, impl.kind, "fullgraph", tokens, _dtype_name(dtype), config=described)
        call = _build(impl, chosen)
        if isinstance(call, str):
            row.error = call
        else:
            try:
                fn = _callable(call)
                torch._dynamo.reset()
                compiled = torch.compile(fn, fullgraph=True, dynamic=False, backend=backend)
                prepared = _prepare(call, [args])[0]
                eager_args, compiled_args = _clone(prepared), _clone(prepared)
                started = time.perf_counter()
                got = _results(compiled(*compiled_args), compiled_args)
                _synchronize(device)
                row.first_call_s = time.perf_counter() - started
                want = _results(fn(*eager_args), eager_args)
                worst = max((relative_error(g, w) for g, w in zip(got, want, strict=True)), default=0.0)
                row.note = f"ok (backend={backend}); relative error against eager {worst:.1e}"
            except Exception as error:  # noqa: BLE001 - the exact error is the result
                row.error = f"{type(error).__name__}: {error}"[:4000]
        _record(rows, row, progress)
    return rows


def copy_ceiling(megabytes: int = 256, *, device: str | None = None) -> Row:
    """A device-to-device copy of ``megabytes``: bytes read plus written per second, the memory-bound ceiling."""
    device = _device(device)
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
    try:
        row.us = _median_us(lambda s, t: t.copy_(s), [(source, target)], device, 5)
        row.rate = moved / (row.us * 1e-6) / 1e9
    except Exception as error:  # noqa: BLE001
        row.error = _one_line(error)
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
        if figure is not None and (key not in best or figure > best[key]):
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


def _registry() -> Any:
    global _REGISTRY
    if _REGISTRY is None:
        from lazyops._registry import Registry

        _REGISTRY = Registry.discover()
    return _REGISTRY


_REGISTRY: Any = None


def _dtype(dtype: Any) -> torch.dtype:
    from lazyops.specs._checks import canonical_dtype

    return canonical_dtype("lazyops bench", dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def default_device(device: str | None = None) -> str:
    """``device``, or where the engine times by default: CUDA when torch sees it, else the host."""
    return str(device) if device else ("cuda" if torch.cuda.is_available() else "cpu")


_device = default_device


def _short(kernel: str) -> str:
    return kernel.removesuffix("_tl")


def _configure(spec: Any, chosen: Any) -> Any:
    return spec.configure(*chosen.args, **chosen.kwargs)


def describe(kernel: str, dtype: Any = "bfloat16", *, small: bool = False) -> str:
    """The configuration :func:`measure` times, in words: ``rope_tl(head_dim=128, ...) with query_heads=32, ...``."""
    name = kernel_name(kernel)
    chosen = example(name, dtype, small=small)
    label = _configure(spec_of(name), chosen).label
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
        return tuple(spec.example_inputs(config, tokens, Inputs(seed, device), chosen.geometry))

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


def _median_us(fn: Callable[..., Any], sets: list[tuple[Any, ...]], device: str, repeats: int) -> float:
    calls = 0

    def step() -> None:
        nonlocal calls
        fn(*sets[calls % len(sets)])
        calls += 1

    with torch.no_grad():
        if device.startswith("cuda"):
            import triton.testing

            return float(triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")) * 1e3
        times = []
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def graph_us(fn: Callable[..., Any], sets: Sequence[tuple[Any, ...]], captures: int, replays: int) -> float:
    """µs a call inside a CUDA graph: ``captures`` calls captured once (rotating through the input ``sets``, so a
    weight larger than the L2 is read from memory as in an engine), replayed ``replays`` times, divided."""
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
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / (replays * captures)


def _clone(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _results(returned: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
    """What a call produced: its returned tensors, then every floating input (in-place results among them)."""
    out = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    return [t for t in out if isinstance(t, torch.Tensor)] + [
        a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()
    ]


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _release(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
