"""The torch backend against torch's own best composition of each kernel, side by side in one run.

The torch backend is what every CPU user runs and the last fallback on a GPU, so it must cost no more than the
torch a user would otherwise write. For every kernel × dtype (float32, float16, bfloat16) × token count this
times the lazyops kernel (through its public factory: the spec's checks included) and torch's peer:

    rmsnorm        F.rms_norm(x, (n,), w, eps)
    add_rmsnorm    r += x; F.rms_norm(r, (n,), w, eps)
    silu_and_mul   F.silu(x[:, :n]) * x[:, n:]
    gelu_and_mul   F.gelu(x[:, :n], approximate=a) * x[:, n:]
    softmax        torch.softmax(x, -1)
    layernorm      F.layer_norm(x, (n,), w, b, eps) (weight and bias of x's dtype: the benchmark example's)
    rope           the straightforward eager rotation (vLLM's forward_native), written back into query and key
    matmul         a @ b
    rmsnorm_fp8    (F.rms_norm(x, (n,), w, eps).float() / scale).clamp(-448, 448).to(float8_e4m3fn)
    add_rmsnorm_fp8  r += x, then the same

on the shapes of each spec's benchmark example (hidden 4096; rope: 32 query and 8 key heads of 128, neox) at
M = 1, 128 (host overhead) and 1024. A 16-bit ``a @ b`` on an AVX2 CPU is a scalar loop (minutes for 4096³), so on
the CPU matmul is [M, 1024] × [1024, 1024] unless ``--matmul-size`` says otherwise.

Timing: both implementations are warmed up, then sampled alternately (the order flips every repeat), each sample
a batch of calls lasting at least ``--min-time`` (CUDA: timed with events); in-place inputs are restored before
each sample, outside the timer. A row reports each side's median over the repeats and ``speed`` = torch's median /
lazyops' median (above 1: lazyops is faster), with the range of the per-repeat ratios as the noise. Each side's
relative error against the spec's float64 reference is measured on the same inputs.

    python benchmarks/torch_backend.py                        # CPU, writes results/torch_backend_cpu.{md,json}
    python benchmarks/torch_backend.py --device cuda          # writes results/torch_backend_cuda.{md,json}
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _environment import describe_environment  # noqa: E402

KERNELS = (
    "rmsnorm",
    "add_rmsnorm",
    "silu_and_mul",
    "gelu_and_mul",
    "softmax",
    "layernorm",
    "rope",
    "matmul",
    "rmsnorm_fp8",
    "add_rmsnorm_fp8",
)
DTYPES = ("float32", "float16", "bfloat16")
TOKENS = (1, 128, 1024)
#: a sample this slow is taken fewer times: the slow 16-bit CPU matmul peer would otherwise take many minutes
SLOW_CALL_S = 0.5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from lazyops._backends.torch.rope import GPU_ROTATIONS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS))
    parser.add_argument("--repeats", type=int, default=9, help="samples per implementation (median taken)")
    parser.add_argument("--min-time", type=float, default=None, help="seconds per sample (cpu 0.05, cuda 0.01)")
    parser.add_argument("--matmul-size", type=int, default=None, help="n = k of matmul (cpu 1024, cuda 4096)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder of the result files")
    parser.add_argument("--name", default=None, help="result file stem (torch_backend_<device>)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument(
        "--rope-gpu-rotation",
        default=None,
        choices=GPU_ROTATIONS,
        help="time the torch backend's rope with this GPU_ROTATION (how 16-bit pairs are rotated; see its module)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device here", file=sys.stderr)
        return 2
    min_time = args.min_time or (0.05 if args.device == "cpu" else 0.01)
    matmul_size = args.matmul_size or (1024 if args.device == "cpu" else 4096)
    torch.set_grad_enabled(False)
    from lazyops._backends.torch import rope as torch_rope

    if args.rope_gpu_rotation:
        torch_rope.GPU_ROTATION = args.rope_gpu_rotation
    rows = []
    started = time.perf_counter()
    for kernel in args.kernels:
        for dtype_name in args.dtypes:
            for tokens in args.tokens:
                case = Case(torch, kernel, getattr(torch, dtype_name), tokens, args.device, matmul_size)
                row = case.run(args.repeats, min_time)
                rows.append(row)
                print(format_row(row), flush=True)
    elapsed = time.perf_counter() - started
    environment = describe_environment(torch, args.device, cpu_note=cpu_description(torch))
    environment["settings"] = {
        "repeats": args.repeats,
        "min_time_s": min_time,
        "matmul_size": matmul_size,
        "rope_gpu_rotation": torch_rope.GPU_ROTATION,
    }
    if not args.no_write:
        stem = args.name or f"torch_backend_{args.device}"
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}.json").write_text(json.dumps({"environment": environment, "rows": rows}, indent=1) + "\n")
        (args.out / f"{stem}.md").write_text(render_markdown(rows, environment, elapsed))
        print(f"wrote {args.out / stem}.{{md,json}}")
    return 0


def cpu_description(torch: Any) -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}"


# --- one kernel × dtype × token count ------------------------------------------------------------------------------


class Case:
    """The lazyops kernel and torch's peer on the same inputs, the in-place ones restorable between samples."""

    def __init__(self, torch: Any, kernel: str, dtype: Any, tokens: int, device: str, matmul_size: int) -> None:
        from lazyops.specs import spec as spec_of
        from lazyops.testing._compare import Inputs

        self.torch, self.kernel, self.dtype, self.tokens, self.device = torch, kernel, dtype, tokens, device
        self.spec = spec_of(f"{kernel}_tl")
        example = self.spec.benchmark(dtype)
        factory_args = (matmul_size, matmul_size, dtype) if kernel == "matmul" else example.args
        self.config = self.spec.configure(*factory_args, **example.kwargs)
        self.geometry = dict(example.geometry)
        self.args = list(self.spec.example_inputs(self.config, tokens, Inputs(tokens, device), self.geometry))
        if kernel == "rope":  # a real cos/sin table: repeated rotations keep the values' size (random ones grow)
            self.args[3] = rope_cache(torch, self.geometry["cache_rows"], self.geometry["rotary_dim"], device)
        mutated = [self.spec.inputs.index(name) for name in self.spec.mutates]
        self.originals = {index: self.args[index].clone() for index in mutated}
        module = importlib.import_module(f"lazyops._backends.torch.{kernel}")
        self.lazyops = getattr(module, f"{kernel}_tl")(*factory_args, **example.kwargs)
        self.peer = torch_peer(torch, kernel, self.config)

    def restore(self) -> None:
        for index, original in self.originals.items():
            self.args[index].copy_(original)

    def run(self, repeats: int, min_time: float) -> dict[str, Any]:
        row: dict[str, Any] = {
            "kernel": self.kernel, "dtype": str(self.dtype).removeprefix("torch."), "M": self.tokens,
            "shape": shape_text(self.args),
        }
        row["error_lazyops"], row["error_torch"] = self.relative_error(self.lazyops), self.relative_error(self.peer)
        impls = {"lazyops": self.lazyops, "torch": self.peer}
        for fn in impls.values():  # warm-up, and the size of a sample
            self.call(fn, 2)
        per_call = max(self.call(fn, 1) for fn in impls.values())
        calls = max(1, math.ceil(min_time / max(per_call, 1e-7)))
        if per_call > SLOW_CALL_S:
            repeats = min(repeats, 3)
        samples: dict[str, list[float]] = {name: [] for name in impls}
        for repeat in range(repeats):
            order = list(impls) if repeat % 2 == 0 else list(reversed(impls))
            for name in order:
                samples[name].append(self.call(impls[name], calls) / calls)
        lazyops_us = statistics.median(samples["lazyops"]) * 1e6
        torch_us = statistics.median(samples["torch"]) * 1e6
        paired = [t / l for l, t in zip(samples["lazyops"], samples["torch"])]
        row.update(
            lazyops_us=round(lazyops_us, 2), torch_us=round(torch_us, 2), speed=round(torch_us / lazyops_us, 3),
            speed_range=[round(min(paired), 3), round(max(paired), 3)], calls_per_sample=calls, repeats=repeats,
        )
        return row

    def call(self, fn: Callable[..., Any], calls: int) -> float:
        """Seconds for ``calls`` calls of ``fn``, in-place inputs restored first (untimed)."""
        torch, args = self.torch, self.args
        self.restore()
        if self.device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn(*args)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        started = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        return time.perf_counter() - started

    def relative_error(self, fn: Callable[..., Any]) -> float:
        """The largest relative error of ``fn``'s results (returned and in place) against the float64 reference."""
        from lazyops.testing._compare import relative_error

        torch = self.torch
        self.restore()
        wide = [arg.double() if arg.is_floating_point() else arg for arg in self.args]
        references = self.spec.reference(self.config, *wide)
        returned = fn(*self.args)
        results = [returned if name == "out" else self.args[self.spec.inputs.index(name)] for name in self.spec.results]
        errors = [relative_error(out, ref) for out, ref in zip(results, references)]
        self.restore()
        return float(max(errors)) if errors and not any(math.isnan(e) for e in errors) else float("nan")


def rope_cache(torch: Any, rows: int, rotary_dim: int, device: str) -> Any:
    inverse_frequency = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    angles = torch.outer(torch.arange(rows, dtype=torch.float64), inverse_frequency)
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float().to(device)


def torch_peer(torch: Any, kernel: str, config: Any) -> Callable[..., Any]:
    """What a user writes in plain torch for ``kernel``, in the input dtype."""
    functional = torch.nn.functional
    if kernel == "rmsnorm":
        return lambda x, w: functional.rms_norm(x, (config.n,), w, config.eps)
    if kernel == "add_rmsnorm":

        def add_rmsnorm(x: Any, residual: Any, w: Any) -> Any:
            residual += x
            return functional.rms_norm(residual, (config.n,), w, config.eps)

        return add_rmsnorm
    if kernel == "silu_and_mul":
        n = config.n
        return lambda x: functional.silu(x[:, :n]) * x[:, n:]
    if kernel == "gelu_and_mul":
        n, approximate = config.n, config.approximate
        return lambda x: functional.gelu(x[:, :n], approximate=approximate) * x[:, n:]
    if kernel == "layernorm":
        return lambda x, w, b: functional.layer_norm(x, (config.n,), w, b, config.eps)
    if kernel in ("rmsnorm_fp8", "add_rmsnorm_fp8"):
        from lazyops.specs.rmsnorm_fp8 import FP8_DTYPE, FP8_MAX

        def quantized_norm(x: Any, w: Any, scale: Any) -> Any:
            normed = functional.rms_norm(x, (config.n,), w, config.eps)
            return (normed.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)

        if kernel == "rmsnorm_fp8":
            return quantized_norm

        def add_quantized_norm(x: Any, residual: Any, w: Any, scale: Any) -> Any:
            residual += x
            return quantized_norm(residual, w, scale)

        return add_quantized_norm
    if kernel == "softmax":
        return lambda x: torch.softmax(x, -1)
    if kernel == "matmul":
        return lambda a, b: a @ b
    head_dim, is_neox = config.head_dim, config.is_neox

    def rotate(x: Any, cos: Any, sin: Any) -> None:
        rotary_dim = 2 * cos.shape[-1]
        heads = x.view(x.shape[0], -1, head_dim)[..., :rotary_dim]
        if is_neox:
            x1, x2 = torch.chunk(heads, 2, dim=-1)
        else:
            x1, x2 = heads[..., ::2], heads[..., 1::2]
        o1 = x1 * cos - x2 * sin
        o2 = x2 * cos + x1 * sin
        rotated = torch.cat((o1, o2), dim=-1) if is_neox else torch.stack((o1, o2), dim=-1).flatten(-2)
        heads.copy_(rotated)

    def rope(positions: Any, query: Any, key: Any, cos_sin_cache: Any) -> Any:
        cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(-2).to(query.dtype), sin.unsqueeze(-2).to(query.dtype)
        rotate(query, cos, sin)
        rotate(key, cos, sin)
        return query, key

    return rope


def shape_text(args: list[Any]) -> str:
    return " ".join("x".join(map(str, arg.shape)) for arg in args)


# --- reporting ----------------------------------------------------------------------------------------------------


def format_row(row: dict[str, Any]) -> str:
    low, high = row["speed_range"]
    return (
        f"{row['kernel']:>13} {row['dtype']:>8} M={row['M']:<5} lazyops {row['lazyops_us']:>10.1f} us  "
        f"torch {row['torch_us']:>10.1f} us  speed {row['speed']:.2f} ({low:.2f}-{high:.2f})  "
        f"err {row['error_lazyops']:.2e} / {row['error_torch']:.2e}"
    )


def render_markdown(rows: list[dict[str, Any]], environment: dict[str, Any], elapsed: float) -> str:
    settings = environment["settings"]
    lines = [
        "# The torch backend against torch's own ops",
        "",
        "Generated by `benchmarks/torch_backend.py`; do not edit by hand.",
        "",
        f"- date: {environment['date']}",
        f"- machine: {environment['device']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in environment['versions'].items())}, python {environment['python']}",
        f"- command: `{environment['command']}`",
        f"- {settings['repeats']} interleaved samples per side (order flipped every repeat), each at least "
        f"{settings['min_time_s']} s of calls; matmul n = k = {settings['matmul_size']}; run took {elapsed:.0f} s"
        + f"; rope's `GPU_ROTATION = {settings.get('rope_gpu_rotation', 'float32')!r}` (`--rope-gpu-rotation`)",
        "",
        "`speed` = torch's median time / lazyops' median time (above 1.00: the lazyops kernel is faster), with the "
        "range of the per-repeat ratios. The lazyops time includes the spec's argument checks. `error`: relative "
        "error ‖out − ref‖/‖ref‖ against the float64 reference on the same inputs (in-place results included).",
        "",
        "| kernel | dtype | M | lazyops µs | torch µs | speed | range | error lazyops | error torch |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in rows:
        low, high = row["speed_range"]
        lines.append(
            f"| {row['kernel']} | {row['dtype']} | {row['M']} | {row['lazyops_us']:.1f} | {row['torch_us']:.1f} | "
            f"{row['speed']:.2f} | {low:.2f}–{high:.2f} | {row['error_lazyops']:.2e} | {row['error_torch']:.2e} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
