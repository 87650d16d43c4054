"""The one harness every benchmark script stands on: cases, timing, peers, inputs and the result files.

A script is *cases* timed at *configs*: ``Case(name, kind, setup)``, ``setup(config) -> (fn, inputs)``;
:func:`measure` times every case of a config interleaved, by the engine of ``lazyops bench`` (``lazyops.bench.engine``);
:func:`write` makes the two result files (README.md, "How a figure is made"). Everything here reaches lazyops
through its public API but :mod:`lazyops.bench.engine` and the last section, "Inside lazyops".
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: The host mode's time a sample at most: 3000 launch-sized calls take a tenth of it.
HOST_S = 0.5
#: Packages whose versions a result depends on, beside torch (liger-kernel: a peer some benchmarks time).
PACKAGES = ("triton", "tilelang", "liger_kernel")
#: Set by :func:`start`: when the run began (every result file says how long it took), and whether it is ``--smoke``
#: (then :func:`measure` times one round on tiny budgets: the script's logic, not a result).
RUN: dict[str, Any] = {"started": None, "smoke": False}


@dataclass(frozen=True)
class Case:
    """One thing to time: ``setup(config) -> (fn, inputs)``, or ``(fn, inputs, note)`` where its row needs a word
    (the note goes into the row); ``kind`` is ``"lazyops"``, ``"peer"``, ``"candidate"`` or ``"skeleton"``. A setup
    that raises ``ImportError`` makes the row say "not installed here"."""

    name: str
    kind: str
    setup: Callable[[Any], tuple[Any, ...]]


def measure(
    cases: Sequence[Case],
    config: Any,
    mode: str,
    device: str,
    *,
    rounds: int = 3,
    calls: int = 3000,
    round_s: float = 0.04,
    graph_s: float | None = None,
    check: Callable[[Case, Any], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every case at ``config``, interleaved: ``{case name: {"kind", "us", "low_us", "high_us", "noisy", "samples"}
    or {"kind", "error"}}``. ``calls``: the host mode's calls a sample (fewer where they would take over
    :data:`HOST_S`); ``round_s``: the stream mode's time a round; ``graph_s``: the graph mode's GPU time a sample
    (50 calls captured, 20 replays, fewer where one call is long: a 256 x 32k decode call takes 7 ms);
    ``check(case, output)`` judges each first call (correct before fast: where it raises, the row is its error).
    ``--smoke``: one round of few calls."""
    import torch

    from lazyops.bench import engine as _bench

    if RUN["smoke"]:
        rounds, calls, round_s = 1, min(calls, 10), min(round_s, 0.002)

    results: dict[str, dict[str, Any]] = {}
    samplers = {}
    for case in cases:
        results[case.name] = {"kind": case.kind}
        try:
            fn, inputs, *note = case.setup(config)
            if note:
                results[case.name]["note"] = note[0]
            inputs = list(inputs)
            with torch.no_grad():  # as the samplers call: a compiled case compiles once, here
                got = fn(*inputs[0])  # the first call compiles, autotunes, allocates: outside the timing
            if check is not None:
                check(case, got)
            _bench._synchronize(device)
            if mode == "stream":
                samplers[case.name] = _bench.stream_sampler(fn, inputs, device, round_s)
            elif mode == "graph":
                if not device.startswith("cuda"):
                    raise RuntimeError(f"CUDA graphs need a CUDA device (this run: {device})")
                captures, replays = 50, 20
                if graph_s:
                    started = time.perf_counter()
                    fn(*inputs[0])
                    _bench._synchronize(device)
                    wanted = graph_s / max(time.perf_counter() - started, 1e-6)
                    captures = max(2, min(captures, int(wanted / replays)))
                    replays = max(3, min(replays, int(wanted / captures)))
                samplers[case.name] = _bench.graph_sampler(fn, inputs, captures, replays)
            elif mode == "host":
                warmup = max(3, calls // 30)
                started = time.perf_counter()
                for _ in range(warmup):
                    fn(*inputs[0])
                _bench._synchronize(device)
                # 3000 calls where a call is launch-sized; fewer where it computes for long (a GEMM on a CPU)
                each = (time.perf_counter() - started) / warmup
                samplers[case.name] = _bench.host_sampler(
                    fn, inputs[0], device, max(10, min(calls, int(HOST_S / max(each, 1e-9))))
                )
            else:
                raise ValueError(f"no timing mode {mode!r}: stream, graph or host")
        except ImportError as error:
            results[case.name]["error"] = f"not installed here: {_bench._one_line(error)}"
        except Exception as error:  # noqa: BLE001 - one case failing is its row, not the end of the run
            results[case.name]["error"] = _bench._one_line(error)
            # the whole traceback on stderr (the log): a device-side assert's row says little of where it came from
            print(f"{config} | {case.name} failed:", file=sys.stderr, flush=True)
            traceback.print_exc(file=sys.stderr)
    for name, timing in _bench.interleave(samplers, rounds).items():
        if isinstance(timing, str):
            results[name]["error"] = timing
        else:
            results[name].update(
                us=timing.median, low_us=timing.low, high_us=timing.high, noisy=timing.noisy, samples=timing.count
            )
    for name, result in results.items():  # the run's progress
        timing = f"{figure(result.get('us'), 1, result.get('noisy'))} µs {result.get('error', '')}"
        print(f"{config} | {name}: {timing}", flush=True)
    _bench._release(device)
    return results


def engine() -> Any:
    """The timing engine of ``lazyops bench``: what the kernel benchmarks time with."""
    from lazyops.bench import engine as _bench

    return _bench


# --- what is compared -------------------------------------------------------------------------------------------


def factory(backend: str | None, kernel: str) -> Any:
    """Backend ``backend``'s own factory of ``kernel`` (``lazyops.<backend>.<kernel>``, third-party ones too); None:
    lazyops' namespace (``lazyops.<kernel>``), each configuration resolved by the settings in force."""
    return getattr(importlib.import_module("lazyops" if backend is None else f"lazyops.{backend}"), kernel)


def backends(option: str | None) -> dict[str, str | None]:
    """``{backend: None if it runs here, else why not}``: those of ``--backend`` (a comma list), else every one."""
    names = [name.strip() for name in option.split(",") if name.strip()] if option else None
    return engine().backend_status(names)  # type: ignore[no-any-return]


def peers(kernel: str) -> dict[str, Callable[[Any], Any]]:
    """``torch op`` (what a user writes in plain torch, in the input dtype) and ``liger-kernel``'s where it has
    ``kernel``: the peers beyond the engine's ``torch eager`` and ``torch.compile``, each ``build(config) -> call``.
    The sampler's: vLLM's torch path and ``torch.multinomial``."""
    short = kernel.removesuffix("_tl")
    if short == "sample":
        return {"vLLM torch path": _vllm_sample, "torch.multinomial": _multinomial}
    if short == "fused_moe":
        return {"torch._grouped_mm": _grouped_mm_moe}
    found = {"torch op": TORCH_OPS[short]} if short in TORCH_OPS else {}
    if short in LIGER:
        found["liger-kernel"] = LIGER[short]
    return found


def _rmsnorm(config: Any) -> Any:
    from torch.nn import functional

    return lambda x, weight: functional.rms_norm(x, (config.n,), weight, config.eps)


def _add_rmsnorm(config: Any) -> Any:
    from torch.nn import functional

    def add_rmsnorm(x: Any, residual: Any, weight: Any) -> Any:
        residual += x
        return functional.rms_norm(residual, (config.n,), weight, config.eps)

    return add_rmsnorm


def _gated(activation: str) -> Callable[[Any], Any]:
    def build(config: Any) -> Any:
        from torch.nn import functional

        n, approximate = config.n, getattr(config, "approximate", "none")
        if activation == "silu":
            return lambda x: functional.silu(x[..., :n]) * x[..., n:]
        return lambda x: functional.gelu(x[..., :n], approximate=approximate) * x[..., n:]

    return build


def _fp8_norm(add: bool) -> Callable[[Any], Any]:
    def build(config: Any) -> Any:
        import torch
        from torch.nn import functional

        def quantized(x: Any, weight: Any, scale: Any) -> Any:
            normed = functional.rms_norm(x, (config.n,), weight, config.eps)
            return (normed.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)

        def add_quantized(x: Any, residual: Any, weight: Any, scale: Any) -> Any:
            residual += x
            return quantized(residual, weight, scale)

        return add_quantized if add else quantized

    return build


def _layernorm(config: Any) -> Any:
    from torch.nn import functional

    shape, eps, dtype = (config.n,), config.eps, config.dtype
    return lambda x, weight, bias: functional.layer_norm(x, shape, weight.to(dtype), bias.to(dtype), eps)


def _softmax(config: Any) -> Any:
    import torch

    return lambda x: torch.softmax(x, dim=-1)


def _rope(config: Any) -> Any:
    """vLLM's ``RotaryEmbedding.forward_native``: the cache rows cast to the activations' dtype, written back."""
    import torch

    head_dim, is_neox = config.head_dim, config.is_neox

    def rotate(x: Any, cos: Any, sin: Any) -> None:
        heads = x.view(x.shape[0], -1, head_dim)[..., : 2 * cos.shape[-1]]
        x1, x2 = heads.chunk(2, dim=-1) if is_neox else (heads[..., ::2], heads[..., 1::2])
        o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        heads.copy_(torch.cat((o1, o2), -1) if is_neox else torch.stack((o1, o2), -1).flatten(-2))

    def rope(positions: Any, query: Any, key: Any, cache: Any) -> Any:
        cos, sin = cache.index_select(0, positions).to(query.dtype).unsqueeze(-2).chunk(2, dim=-1)
        rotate(query, cos, sin)
        rotate(key, cos, sin)
        return query, key

    return rope


TORCH_OPS: dict[str, Callable[[Any], Any]] = {
    "rmsnorm": _rmsnorm,
    "add_rmsnorm": _add_rmsnorm,
    "silu_and_mul": _gated("silu"),
    "gelu_and_mul": _gated("gelu"),
    "rmsnorm_fp8": _fp8_norm(add=False),
    "add_rmsnorm_fp8": _fp8_norm(add=True),
    "layernorm": _layernorm,
    "softmax": _softmax,
    "rope": _rope,
    "matmul": lambda config: lambda a, b: a @ b,
}


def grouped_mm_experts(
    x: Any, w13: Any, w2: Any, weights: Any, ids: Any, experts: int, activation: str = "silu"
) -> Any:
    """The experts through ``torch._grouped_mm`` (bf16, Hopper), as an engine without a fused kernel writes them:
    the assignments sorted by expert (each expert's rows end at a searched offset, nothing read on the host), the
    gate/up and down grouped GEMMs over those rows, each weighted assignment put back in place and the ``k`` of a
    token summed in float32."""
    import torch

    from lazyops.specs.fused_moe import activate

    if not hasattr(torch, "_grouped_mm"):
        raise RuntimeError(f"torch {torch.__version__} has no torch._grouped_mm: the peer needs torch 2.8 or newer")
    top_k, flat = ids.shape[-1], ids.flatten().long()
    order = flat.argsort(stable=True)
    ends = torch.searchsorted(flat[order], torch.arange(experts, device=x.device), right=True).int()
    gate, up = torch._grouped_mm(x[order // top_k], w13.transpose(1, 2), offs=ends).chunk(2, -1)
    down = torch._grouped_mm(activate(activation, gate) * up, w2.transpose(1, 2), offs=ends)
    out = torch.empty_like(down, dtype=torch.float32).index_copy_(0, order, down * weights.flatten()[order, None])
    return out.view(*ids.shape, -1).sum(1).to(x.dtype)


def _grouped_mm_moe(config: Any) -> Any:
    """``fused_moe_tl``'s peer at prefill (issue 36: ≥ 1.0× it): :func:`grouped_mm_experts` with the same routing."""

    def fused_moe(x: Any, w13: Any, w2: Any, weights: Any, ids: Any, expert_map: Any = None) -> Any:
        if expert_map is not None and expert_map.numel():
            raise ValueError("the torch._grouped_mm peer takes no expert_map: time it without expert parallelism")
        return grouped_mm_experts(x, w13, w2, weights, ids, config.num_experts, config.activation)

    return fused_moe


def _vllm_sample(config: Any) -> Any:
    """vLLM's ``Sampler`` on its torch path, written out: temperature, min-p, then ``apply_top_k_top_p`` (an
    ascending sort, the k-th value's mask, a cumulative sum's mask) and the exponential race ``probs / q``."""
    import torch

    def sample(logits: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, *seeds_offsets: Any) -> Any:
        logits = logits.float()
        greedy = logits.argmax(dim=-1)
        logits = logits / torch.where(temperature > 0, temperature, 1.0)[:, None]
        probs = logits.softmax(dim=-1)
        logits = logits.masked_fill(probs < min_p[:, None] * probs.amax(dim=-1, keepdim=True), float("-inf"))
        ordered, order = logits.sort(dim=-1, descending=False)
        vocab = ordered.shape[-1]
        k = torch.where((top_k > 0) & (top_k < vocab), top_k, vocab)
        ordered.masked_fill_(ordered < ordered.gather(1, (vocab - k)[:, None]), float("-inf"))
        top_p_mask = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p[:, None]
        top_p_mask[:, -1] = False
        logits = ordered.masked_fill_(top_p_mask, float("-inf")).scatter(-1, order, ordered)
        probs = logits.softmax(dim=-1)
        race = probs.div_(torch.empty_like(probs).exponential_()).argmax(dim=-1)
        return torch.where(temperature == 0, greedy, race)

    return sample


def _multinomial(config: Any) -> Any:
    """Plain temperature sampling: ``torch.multinomial`` over the softmax."""
    import torch

    def sample(logits: Any, temperature: Any, *rest: Any) -> Any:
        probs = (logits.float() / torch.where(temperature > 0, temperature, 1.0)[:, None]).softmax(dim=-1)
        return torch.multinomial(probs, 1).view(-1)

    return sample


def _liger(module: str, function: str, peer: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    """liger-kernel's ``liger_kernel.ops.<module>.<function>.apply``, made a peer by ``peer(apply, config)``."""
    return lambda config: peer(getattr(importlib.import_module(f"liger_kernel.ops.{module}"), function).apply, config)


LIGER: dict[str, Callable[[Any], Any]] = {
    "rmsnorm": _liger("rms_norm", "LigerRMSNormFunction", lambda apply, c: lambda x, w: apply(x, w, c.eps)),
    # writes the sum to a new tensor instead of into ``residual``: the same bytes moved
    "add_rmsnorm": _liger(
        "fused_add_rms_norm", "LigerFusedAddRMSNormFunction", lambda apply, c: lambda x, r, w: apply(x, r, w, c.eps)[0]
    ),
    # two contiguous tensors, gate and up, split once per input set outside the timing
    "silu_and_mul": _liger(
        "swiglu",
        "LigerSiLUMulFunction",
        lambda apply, c: engine().Peer(apply, lambda x: tuple(t.contiguous() for t in x.split(c.n, -1))),
    ),
    "softmax": _liger("softmax", "LigerSoftmaxFunction", lambda apply, c: apply),
    "layernorm": _liger("layer_norm", "LigerLayerNormFunction", lambda apply, c: lambda x, w, b: apply(x, w, b, c.eps)),
}


# --- the command line and the environment ------------------------------------------------------------------------


def parser(doc: str) -> argparse.ArgumentParser:
    """The options every script takes; the script adds its own."""
    summary = doc.split("\n\n", maxsplit=1)[0]
    parser = argparse.ArgumentParser(description=summary, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--device", help="cuda or cpu (default: cuda when torch sees it)")
    parser.add_argument(
        "--backend", "--backends", metavar="NAME[,NAME]", help="lazyops backends (default: every registered one)"
    )
    parser.add_argument("--out", type=Path, help="where the result files go (default: results/<device>/)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny shapes, one round: the script's logic on a CPU (Triton under TRITON_INTERPRET=1); not a result",
    )
    return parser


def start(options: argparse.Namespace) -> str:
    """The device of the run (``options.device``, else CUDA when there): Triton's interpreter is turned on for a
    CPU run before any Triton kernel is defined, and a ``cuda`` run without a GPU stops with a way out. Fills in
    ``options.out`` (``results/<device>/``) and :data:`RUN`."""
    RUN.update(started=time.perf_counter(), smoke=options.smoke)
    cuda_visible = Path("/dev/nvidiactl").exists() or bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if options.device in (None, "cpu") and not cuda_visible:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device here: run with --device cpu --smoke to check the script")
    options.out = options.out or folder(device)
    return device


def folder(device: str) -> Path:
    """``results/h200`` for an NVIDIA H200 (the device name's last word), ``results/cpu`` for the host."""
    if not device.startswith("cuda"):
        return RESULTS / "cpu"
    import torch

    return RESULTS / torch.cuda.get_device_name(torch.device(device)).split()[-1].lower()


def environment(device: str, backends: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The header facts of a result file: the exact command, date, device, versions and commit, and which of
    ``backends`` (:func:`backends`' answer) ran and why not the others."""
    import torch

    versions = {"torch": torch.__version__}
    for package in PACKAGES:
        try:
            module = importlib.import_module(package)
            versions[package] = str(getattr(module, "__version__", "?"))
        except Exception as error:  # noqa: BLE001 - recorded: a missing package is a fact of the environment
            versions[package] = f"not importable ({type(error).__name__})"
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = f"{_cpu_model()}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}"
    return {
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": name,
        "versions": versions,
        "python": platform.python_version(),
        "commit": _commit(),
    } | ({"backends": {name: problem or "runs" for name, problem in backends.items()}} if backends else {})


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str:
    """The code that ran, read from git when the run starts: ``HEAD``'s commit, its date, and ``+dirty`` naming the
    files that differ from it, untracked ones included (``-uno`` once hid a run's new modules: the commit printed was
    older than the code), then a digest of the source as it is on disk (:func:`source_digest`: compare it with the
    checkout's, ``python benchmarks/bench_harness.py``). ``BENCH_COMMIT`` overrides the git part."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout

    digest = f"source {source_digest()}"
    if os.environ.get("BENCH_COMMIT"):
        return f"{os.environ['BENCH_COMMIT']} (BENCH_COMMIT), {digest}"
    try:
        head = git("log", "-1", "--format=%h %cI").strip()
        changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=all").splitlines()]
    except (OSError, subprocess.CalledProcessError):
        return f"? (no git here), {digest}"
    dirty = f"+dirty ({', '.join(changed[:6])}{', …' if len(changed) > 6 else ''})" if changed else ""
    return f"{head}{dirty}, {digest}"


#: What :func:`source_digest` reads: the code a result depends on.
SOURCES = ("src/lazyops/**/*.py", "benchmarks/*.py", "examples/*.py", "Makefile")


def source_digest() -> str:
    """SHA-256 (12 hex digits) over :data:`SOURCES` as they are on disk, path and bytes: the same code gives the
    same digest on any machine, with or without git."""
    import hashlib

    sha = hashlib.sha256()
    for path in sorted({p for pattern in SOURCES for p in ROOT.glob(pattern) if "__pycache__" not in p.parts}):
        sha.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()[:12]


# --- result files -----------------------------------------------------------------------------------------------


def write(out: Path, stem: str, title: str, env: Mapping[str, Any], rows: Sequence[Any], body: Sequence[str]) -> Path:
    """``<out>/<stem>.json`` (the environment, then one row a line) and ``<stem>.md`` (the header, then ``body``, then
    what did not run): rewritten as a run goes, so that one cut short keeps what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    if RUN["started"] is not None:
        env = {**env, "elapsed_s": round(time.perf_counter() - RUN["started"])}
    plain = [dataclasses.asdict(row) if dataclasses.is_dataclass(row) else row for row in rows]
    lines = ",\n".join(json.dumps(_rounded(row), separators=(",", ":"), default=str) for row in plain)
    (out / f"{stem}.json").write_text(f'{{"environment":{json.dumps(dict(env))},\n"rows":[\n{lines}\n]}}\n')
    versions = ", ".join(f"{name} {version}" for name, version in env["versions"].items())
    ran = ", ".join(f"{name} ({state})" for name, state in env.get("backends", {}).items())
    head = [
        f"# {title}",
        "",
        f"Made by `{env['command']}` on {env['date']}; do not edit, rerun the command.",
        f"Device: {env['device']}; {versions}; Python {env['python']}; lazyops at {env['commit']}."
        + (f" {env['elapsed_s']} s in all." if "elapsed_s" in env else ""),
        *([f"Backends: {ran}."] if ran else []),
        "",
        NOISY_NOTE,
        "",
    ]
    errors = sorted(
        {(row["impl"], str(row["error"]).splitlines()[0][:200]) for row in plain if row.get("error") and "impl" in row}
    )
    if errors:
        body = [*body, "## What did not run", "", *(f"- {impl}: {error}" for impl, error in errors), ""]
    (out / f"{stem}.md").write_text("\n".join([*head, *body]).rstrip() + "\n")
    return out / f"{stem}.md"


def _rounded(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` without its empty fields, its floats to four places: a result file small enough to keep."""
    kept = {key: value for key, value in row.items() if value is not None}
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in kept.items()}


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return [*lines, ""]


def figure(value: float | None, digits: int = 1, noisy: bool | None = False) -> str:
    """A cell: ``value`` to ``digits`` places, ``?`` after it when its spread was too large to rank it."""
    if value is None:
        return "—"
    return f"{value:,.{digits}f}" + ("?" if noisy else "")


NOISY_NOTE = "`?`: the samples' interquartile range is over 20 % of their median: too noisy to rank."


def release(device: str) -> None:
    """Give the GPU's cached memory back: between cells of different sizes, so that none starts fragmented."""
    engine()._release(device)


def judge(got: Sequence[Any], reference: Sequence[Any], tolerance: float) -> list[float]:
    """The relative error of each of ``got`` against ``reference`` (``lazyops.testing``'s); ``ValueError`` where
    one is over ``tolerance`` or NaN: a wrong implementation is an error row, never a figure."""
    from lazyops.testing import relative_error

    errors = [relative_error(mine, theirs) for mine, theirs in zip(got, reference, strict=True)]
    if not max(errors) <= tolerance:  # NaN too
        raise ValueError(f"wrong result: relative error {' / '.join(f'{e:.1e}' for e in errors)} > {tolerance:.0e}")
    return errors


def paged(key: Any, value: Any, block: int, new: int = 1, shuffle: bool = True) -> tuple[Any, ...]:
    """Contiguous ``[B, H, L, D]`` keys and values as what paged attention takes, holding the same numbers:
    ``(key_cache, value_cache, block_table, seq_lens, cu_seqlens_q)`` for ``new`` queries a sequence. The caches are
    ``[B * ceil(L / block), block, H, D]`` (zeros past ``L``), their blocks scattered by a fixed permutation as an
    engine's allocator leaves them (``shuffle=False``: in order)."""
    import torch
    from torch.nn import functional

    batch, heads, length, dim = key.shape
    count = -(-length // block)
    order = torch.randperm(batch * count, generator=torch.Generator().manual_seed(2)) if shuffle else None
    order = (torch.arange(batch * count) if order is None else order).to(key.device)

    def scatter(cache: Any) -> Any:
        # A sequence at a time: a 256 x 32k cache is 17 GB, and whole-batch padded and permuted copies beside the
        # contiguous keys and values ran an 80 GB H100 out of memory (2026-12-05); one sequence's copy is 67 MB.
        scattered = cache.new_empty((batch * count, block, heads, dim))
        for row in range(batch):
            blocks = functional.pad(cache[row], (0, 0, 0, count * block - length)).view(heads, count, block, dim)
            scattered[order[row * count : (row + 1) * count]] = blocks.permute(1, 2, 0, 3)
        return scattered

    lengths = torch.full((batch,), length, dtype=torch.int32, device=key.device)
    starts = torch.arange(0, batch * new + 1, new, dtype=torch.int32, device=key.device)
    return scatter(key), scatter(value), order.view(batch, count).to(torch.int32), lengths, starts


# --- Inside lazyops: the only code here that reads lazyops' private modules -------------------------------------


def tiled_fused_moe(tiles: Sequence[int]) -> Callable[[Any], Any]:
    """``build(config) -> call`` of Triton's ``fused_moe_tl`` on one tile set, whatever its rule would pick: what
    ``bench_kernels.py --moe --tiles`` times. ``tiles``: ``fused_moe.Tiles``' fields in order (block_m, gate_up_n,
    down_n, block_k, warps, stages)."""
    from lazyops._backends.triton import fused_moe

    chosen = fused_moe.Tiles(*tiles)
    return lambda config: fused_moe.build_fused_moe(config, choose=lambda *_: chosen)


def sampler_with(chosen: Any, **settings: Any) -> Any:
    """Triton's ``sample_tl`` for ``chosen`` (an example's factory arguments), built with its module's ``settings``
    (``SPLIT_BELOW``, ``SPLIT_GROUP``, ``SEARCH_BITS``: read when a factory builds, and only then) in place."""
    from unittest import mock

    from lazyops import _api
    from lazyops._backends.triton import sample

    with mock.patch.multiple(sample, **settings):
        return _api.kernel_factory("triton", "sample_tl")(*chosen.args, **chosen.kwargs)


def split_sampler(group: int | str | None) -> Callable[[Any], Any]:
    """``build(example) -> call`` of Triton's ``sample_tl`` with its split path at every batch size (``SPLIT_BELOW``
    set while the factory builds), all rows at once (``group`` None) or ``group`` rows at a time (``SPLIT_GROUP``; 0:
    the GPU's SM count; "l2": the rows that fill half the L2, so that a group's later passes read from it):
    ``bench_kernels.py --sampling``'s candidates beside the rule's row, which keeps a batch of at least the SM count
    on one program a row. They say where the rule's bound should lie."""

    def build(chosen: Any) -> Any:
        import torch

        gpu = torch.cuda.get_device_properties()
        row_bytes = chosen.args[0] * chosen.args[1].itemsize  # sample_tl(V, dtype, ...)
        rows = {0: gpu.multi_processor_count, "l2": max(1, gpu.L2_cache_size // 2 // row_bytes)}.get(group, group)
        return sampler_with(chosen, SPLIT_BELOW=1 << 30, SPLIT_GROUP=rows)

    return build


def searching_sampler(bits: int) -> Callable[[Any], Any]:
    """``build(example) -> call`` of Triton's ``sample_tl`` by its rule, its threshold searches settling ``bits`` bits
    of the key a pass (``SEARCH_BITS`` set while the factory builds; the module's 4: 15 pivots a pass, 8 passes a
    search; 2: 3 pivots, 16 passes; 1: the bisection): on a GPU a pass costs its pivots' arithmetic more than its
    read (decision 015), which these candidates weigh against the reads they add."""
    return lambda chosen: sampler_with(chosen, SEARCH_BITS=bits)


def tiled_matmul(backend: str, n: int, k: int, dtype: Any, tile: Mapping[str, Any]) -> Callable[..., Any]:
    """``call(a, b) -> c`` of ``backend``'s GEMM with the tiling ``tile`` (its own tile type's fields, and ``split``),
    whatever its rule would pick: what ``bench_gemm.py --sweep`` times. Triton: ``matmul.Tiling``; TileLang:
    ``matmul.Tile`` (``split`` > 1: its split-K product and reduce programs). With ``scales`` (Triton):
    ``call(a, b, scale_a, scale_b)`` of ``matmul_fp8_tl``'s kernel on one ``matmul_fp8.FP8Tile``."""
    import torch

    fields, dtype = dict(tile), getattr(torch, dtype) if isinstance(dtype, str) else dtype
    split = int(fields.pop("split", 1))
    if backend == "triton" and "scales" in fields:  # matmul_fp8_tl: one row of its table (configs/matmul_fp8.json)
        from lazyops._backends.triton import matmul_fp8

        config = matmul_fp8.spec.bind(n, k, dtype, fields.pop("scales"))
        fp8 = matmul_fp8.build_matmul_fp8(config, (matmul_fp8.FP8Tile(max_m=None, **fields),))
        return lambda a, b, sa, sb: fp8(a, b, sa, sb, None, a.new_empty((a.shape[0], n), dtype=dtype))
    if backend == "triton":
        from lazyops._backends.triton import matmul

        if split > 1:  # whole k-steps a slice, the last slice the shortest: as the backend's rule slices
            steps = -(-k // fields["block_k"])
            k_slice = -(-steps // split) * fields["block_k"]
            fields.update(k_slice=k_slice, split=-(-k // k_slice))
        tiling = matmul.Tiling(**fields)
        launch = matmul.build_matmul(n, k, dtype, choose=lambda *_: tiling)

        def triton_call(a: Any, b: Any) -> Any:
            out = a.new_empty((a.shape[0], n))
            launch(a, b, out)
            return out

        return triton_call
    if backend == "tilelang":
        from lazyops._backends.tilelang import matmul
        from lazyops._backends.tilelang._runtime import compiled, direct, tl_dtype

        shape = matmul.Tile(**fields)
        name = tl_dtype(dtype)
        if split == 1:
            programs = {("plain", shape): lambda: matmul.matmul_program(n, k, name, shape)}
        else:
            k_steps = -(-k // shape.block_k)
            steps = -(-k_steps // split)
            plan = matmul.SplitK(shape, steps, -(-k_steps // steps), 128)
            split = plan.split
            programs = {
                ("split", plan): lambda: matmul.split_k_program(n, k, name, plan),
                ("reduce", split): lambda: matmul.reduce_program(n, name, split),
            }
        kernels = [
            direct(kernel) for kernel in compiled(f"bench_gemm.py --sweep n={n} k={k} {name}", programs).values()
        ]

        def tilelang_call(a: Any, b: Any) -> Any:
            out = a.new_empty((a.shape[0], n))
            if len(kernels) == 1:
                kernels[0](a, b, out)
            else:
                partial = torch.empty((split, a.shape[0], n), dtype=torch.float32, device=a.device)
                kernels[0](a, b, partial)
                kernels[1](partial, out)
            return out

        return tilelang_call
    raise ValueError(f"--sweep knows the tilings of triton and tilelang, not {backend!r}")


def through_operator(kernel: Any) -> Callable[..., Any]:
    """``kernel`` (a lazyops kernel) called through its ``torch.library`` operator, as ``torch.compile`` calls it:
    what an eager call would cost if it were not routed around the dispatcher."""
    from lazyops.specs._engine import config_values

    operator, values = kernel.lazyops_operators()[0], config_values(kernel.lazyops_config)
    return lambda *args: operator(*args, *values)


def attention_variants(
    backend: str, config: tuple[Any, ...], device: str, splits: Sequence[int], kind: str | None = None
) -> dict[str, Callable[..., Any]]:
    """``backend``'s paged attention built with each split count of ``splits`` (its table's tiles), and for Triton
    with each tiling of its ``SWEEP[kind]`` (its rule's split), whatever its rule would pick: ``{label: call(query,
    key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, out)}`` (``bench_attention.py --sweep``).
    ``config``: ``(heads, kv_heads, head_dim, dtype, block_size)``."""
    import torch

    from lazyops.specs.paged_attention import spec

    module = importlib.import_module(f"lazyops._backends.{backend}.paged_attention")
    *geometry, block = config
    bound, empty = spec.bind(*geometry, block_size=block), torch.empty(0, device=device)  # no fp8 scales
    variants = [(None, split) for split in splits]
    variants += [(tile, None) for tile in module.SWEEP[kind]] if kind and backend == "triton" else []
    calls = {}
    for tile, split in variants:
        if backend == "triton":
            launch = module.build_attention(bound, tiles=tile, segments=split)
        else:
            launch = module.build(bound, splits=split)
        shape = f" {tile.block_m}x{tile.tile_n} w{tile.num_warps} s{tile.num_stages}" if tile else ""
        calls[f"{backend}{shape}" + (f" split {split}" if split else "")] = lambda *args, launch=launch: launch(
            *args[:-1], empty, empty, args[-1]
        )
    return calls


if __name__ == "__main__":  # the digest a result file's header names, of this checkout
    print(source_digest())
