"""Paged attention (issue 29): ``paged_attention_tl`` and ``kv_cache_write_tl`` checked against the float64
reference, then timed against torch's SDPA (flash and cuDNN backends) on contiguous keys holding the same numbers.

    python benchmarks/bench_attention.py                   # on the H200: results/h200/attention.{md,json}
    python benchmarks/bench_attention.py --sweep           # also each backend's split counts, Triton's tiles
    python benchmarks/bench_attention.py --flex            # also FlexAttention (compiled per shape)
    python benchmarks/bench_attention.py --smoke --device cpu --out /tmp/a   # the script's logic: tiny shapes, the host

Llama-3-8B's attention (32 query heads, 8 KV heads of 128, bf16, 16-token blocks scattered in the cache). Checks:
``lazyops.testing.run_conformance`` (a case per configuration class, or ``--examples`` drawn ones), then each kernel on
the timed shapes against float64; a failed check makes the exit status 1. Decode, batch 1 / 16 / 64 / 256 x context 1k /
8k / 32k: µs per call in a CUDA graph, GB/s over the KV bytes read, the share of the device's HBM peak. Prefill, causal,
1 x 8192 and 16 x 512 (stream time, TFLOP/s), and 512 new tokens over a 7680-token prefix, paged and over blocks in
order (unpaged). Every cell's implementations interleaved; peers on ``[B, H, L, D]`` tensors with ``enable_gqa`` (where
a backend refuses it, keys and values repeated to 32 heads: the row says so). Backends: ``--backend``'s, else each that
runs here and exports the kernels (on a GPU but the torch backend's: it reads lengths on the host, no CUDA graph).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench_harness as harness

TITLE = "paged_attention_tl and kv_cache_write_tl against SDPA"
HBM_PEAKS = {"H200": 4.8e12, "H100": 3.35e12}  # HBM bandwidth (bytes/s) by the name a device reports
HBM_PEAK = HBM_PEAKS["H200"]


def hbm_peak(device: str) -> float:
    """The HBM bandwidth of the device named ``device`` (the H200's where the name is not known)."""
    return next((peak for name, peak in HBM_PEAKS.items() if name in device), HBM_PEAK)


KERNELS = ("paged_attention_tl", "kv_cache_write_tl")
UNPAGED = " unpaged (blocks in order)"
#: GPU time a CUDA-graph sample aims at: up to 1000 calls of a short decode step, a few of a 7 ms 256 x 32k one.
GRAPH_S = 0.05


@dataclass(frozen=True)
class Shape:
    heads: int
    kv_heads: int
    head_dim: int
    block: int
    decode: tuple[tuple[int, ...], tuple[int, ...]]  # batches, contexts
    prefill: tuple[tuple[str, int, int, int], ...]  # (cell, batch, length, new tokens a sequence)

    def geometry(self, dtype: Any) -> tuple[Any, ...]:
        return self.heads, self.kv_heads, self.head_dim, dtype


LLAMA = Shape(
    32, 8, 128, 16, ((1, 16, 64, 256), (1024, 8192, 32768)),
    (("1 x 8192", 1, 8192, 8192), ("16 x 512", 16, 512, 512), ("chunked 512 over 8192", 1, 8192, 512)),
)  # fmt: skip
SMOKE = Shape(
    4, 2, 16, 4, ((1, 3), (16, 40)), (("1 x 64", 1, 64, 64), ("4 x 16", 4, 16, 16), ("chunked 8 over 64", 1, 64, 8))
)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--sweep", action="store_true", help="also split counts and Triton's tiles")
    parser.add_argument("--flex", action="store_true", help="also FlexAttention (compiled per shape)")
    parser.add_argument("--examples", type=int, help="drawn conformance cases a kernel (default: one per class)")
    options = parser.parse_args(argv)
    device = harness.start(options)
    import torch

    torch.manual_seed(0)
    shape, dtype = (SMOKE, torch.float32) if options.smoke else (LLAMA, torch.bfloat16)
    status = harness.backends(options.backend)
    if not options.backend:
        status = {name: None for name, problem in status.items() if problem is None and exports(name)}
        if device.startswith("cuda"):
            status.pop("torch", None)
    env = harness.environment(device, status) | {"shape": shape.__dict__, "dtype": str(dtype)}
    timing = Timing(device, options.smoke, 2, options.flex, shape, dtype)  # two rounds: a graph sample is 50 ms
    print(f"backends: {', '.join(status)}; checks", flush=True)
    rows = checks(list(status), options, device, dtype, shape)
    parts = [timing.attention] + ([timing.sweep] if options.sweep and "triton" in status else [])
    for part in parts:
        for cell in part(list(status)):
            rows += cell
            written = harness.write(options.out, "attention", TITLE, env, rows, render(rows, env))
    print(f"wrote {written} and its .json")
    return 1 if any(row.get("status") == "FAIL" for row in rows) else 0


def exports(backend: str) -> bool:
    try:
        return all(harness.factory(backend, kernel) for kernel in KERNELS)
    except Exception:  # noqa: BLE001 - a backend without the kernels (or that does not load) is not timed
        return False


def checks(backends: list[str], options: Any, device: str, dtype: Any, shape: Shape) -> list[dict[str, Any]]:
    """Both kernels of each backend: drawn conformance cases, then the timed shapes, against float64."""
    from lazyops import testing

    examples = options.examples or (2 if options.smoke else None)
    context, chunk, batch, written = (40, 8, 2, 5) if options.smoke else (8192, 512, 16, 256)
    attend, block = shape.geometry(dtype), {"block_size": shape.block}
    cases = {
        f"decode {batch} x {context}": ((context, 1),) * batch,
        f"prefill 1 x {context}": ((context, context),),
        f"chunked {chunk} over {context}": ((context, chunk),),
    }
    judged = {
        name: testing.Case(
            KERNELS[0], attend, block, (sum(q for _, q in seqs),), 7, {"batches": (seqs,), "shuffle": True}
        )
        for name, seqs in cases.items()
    }
    judged[f"write 1, {written}"] = testing.Case(
        KERNELS[1], attend[1:], block, (1, written), 7, {"spare_blocks": 3, "padding": 1}
    )
    rows = []
    for backend in backends:

        def drawn(backend: str = backend) -> str:
            drawn = {"max_examples": examples} if examples else {"per_class": True}
            return str(testing.run_conformance(backend, kernels=KERNELS, device=device, **drawn))

        def timed_shape(case: Any, backend: str = backend) -> str:
            error = testing.check_case(harness.factory(backend, case.kernel), case, device=device, max_elements=2**62)
            return f"error {error:.2e}"

        trials = {"drawn cases": drawn, **{name: functools.partial(timed_shape, case) for name, case in judged.items()}}
        for name, trial in trials.items():
            row = {"part": "check", "backend": backend, "shape": name}
            try:
                row.update(status="pass", detail=trial())
            except Exception as error:  # noqa: BLE001 - recorded; the run goes on to time what runs
                row.update(status="FAIL", detail=str(error)[:2000])
            rows.append(row)
            print(f"  {backend}: {name} {row['status']} {row['detail'].splitlines()[0][:80]}", flush=True)
    return rows


@dataclass
class Timing:
    """The timed parts; each yields a cell's rows at a time, so that the result files grow as the run goes. A cell of
    one query a sequence is decode (GB/s over the KV bytes, in a CUDA graph), any other prefill (TFLOP/s, stream)."""

    device: str
    smoke: bool
    rounds: int
    flex: bool
    shape: Shape
    dtype: Any

    def attention(self, backends: list[str]) -> Any:
        """Decode, then prefill: lazyops (chunked prefill also over blocks in order) beside SDPA and FlexAttention."""
        batches, contexts = self.shape.decode
        cells = [(f"{batch} x {context}", batch, context, 1) for context in contexts for batch in batches]
        for cell, batch, length, new in cells + list(self.shape.prefill):
            part = "decode" if new == 1 else "prefill"
            try:
                q, k, v = self.tensors(batch, length, new)
                layouts = [("", True)] + ([(UNPAGED, False)] if 1 < new < length else [])
                cases = []
                for suffix, shuffle in layouts:
                    args = self.paged(q, k, v, shuffle)
                    cases += [lazyops_case(backend, suffix, args, self.shape, self.dtype) for backend in backends]
            except (RuntimeError, MemoryError) as error:  # the inputs do not fit this device: a row says so, on we go
                q = k = v = args = cases = None
                release_memory(self.device)
                yield [
                    {
                        "part": part,
                        "shape": cell,
                        "impl": "inputs",
                        "kind": "note",
                        "error": f"{type(error).__name__}: {error}",
                    }
                ]
                continue
            cases += sdpa_cases(q, k, v, self.device, causal=new > 1)
            cases += [flex_case(q, k, v, causal=new > 1)] if self.flex else []
            yield self.measure(part, cell, cases, k, new)
            q = k = v = args = cases = None
            release_memory(self.device)

    def sweep(self, backends: list[str]) -> Any:
        """Each backend's split counts at decode (every power of two up to 64 that leaves a segment a 64-key tile),
        Triton's tile alternatives (its ``SWEEP``) at three decode cells and at prefill, beside each backend's own
        rule and SDPA: what docs/decisions/010 reads. Built unchecked; the rules' choices are checked above."""
        s = self.shape
        batches, contexts = ((1, 3), (16, 40)) if self.smoke else ((1, 4, 16, 64), (1024, 8192, 32768))
        tiled = {(1, 40), (1, 8192), (16, 1024), (64, 8192)}
        cells = [(batch, length, 1) for length in contexts for batch in batches]
        for batch, length, new in cells + [(batch, length, new) for _, batch, length, new in s.prefill[:2]]:
            q, k, v = self.tensors(batch, length, new)
            args = self.paged(q, k, v, shuffle=True)
            timed, kind = (*args, args[0].new_empty(args[0].shape)), "decode" if new == 1 else "prefill"
            cases = [lazyops_case(backend, " (its rule)", args, s, self.dtype) for backend in backends]
            for backend in (b for b in backends if b in ("triton", "tilelang")):
                splits = [1 << i for i in range(7) if length >> i >= 4 * s.block] if new == 1 else []
                tiles = kind if new > 1 or (batch, length) in tiled else None
                found = harness.attention_variants(
                    backend, (*s.geometry(self.dtype), s.block), self.device, splits, tiles
                )
                cases += [
                    harness.Case(name, "candidate", lambda _, c=c, t=timed: (c, [t])) for name, c in found.items()
                ]
            cases += sdpa_cases(q, k, v, self.device, causal=new > 1)
            yield self.measure("sweep", f"{kind} {batch} x {length}", cases, k, new)
            del q, k, v, args, cases, timed

    def tensors(self, batch: int, length: int, new: int) -> tuple[Any, Any, Any]:
        """Contiguous ``q [B, Hq, new, D]`` and ``k``, ``v [B, Hk, length, D]``: the peers' inputs."""
        import torch

        s, options = self.shape, {"dtype": self.dtype, "device": self.device}
        k = torch.randn(batch, s.kv_heads, length, s.head_dim, **options)
        return torch.randn(batch, s.heads, new, s.head_dim, **options), k, torch.randn_like(k)

    def paged(self, q: Any, k: Any, v: Any, shuffle: bool) -> tuple[Any, ...]:
        """The same numbers as lazyops takes them: ``(query [T, Hq * D], key_cache, value_cache, block_table,
        seq_lens, cu_seqlens_q)``."""
        batch, heads, new, dim = q.shape
        query = q.transpose(1, 2).reshape(batch * new, heads * dim)
        return query, *harness.paged(k, v, self.shape.block, new, shuffle)

    def measure(self, part: str, cell: str, cases: list[Any], k: Any, new: int) -> list[dict[str, Any]]:
        """The cell's cases interleaved, and their rates: GB/s over the KV bytes read at decode (``B * context * Hk
        * D * 2 * 2``), TFLOP/s over ``4 * pairs * D * Hq`` at prefill (causal pairs: each sequence's ``new``
        queries over its keys)."""
        batch, length = k.shape[0], k.shape[2]
        pairs = batch * (new * (length - new) + new * (new + 1) // 2)
        amount, unit = (2 * k.nbytes, "GB/s") if new == 1 else (4 * pairs * k.shape[3] * self.shape.heads, "TFLOP/s")
        mode = "graph" if new == 1 and self.device.startswith("cuda") else "stream"
        timed = harness.measure(cases, cell, mode, self.device, rounds=self.rounds, round_s=0.1, graph_s=GRAPH_S)
        rows = [{"part": part, "shape": cell, "impl": name, "mode": mode, **timing} for name, timing in timed.items()]
        for row in (row for row in rows if row.get("us")):
            row.update(rate=amount / (row["us"] * 1e-6) / (1e9 if new == 1 else 1e12), unit=unit)
        return rows


def release_memory(device: str) -> None:
    """Give a finished cell's tensors back to the device (the next cell's 34 GB of keys and values need them)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def lazyops_case(backend: str, suffix: str, args: tuple[Any, ...], shape: Shape, dtype: Any) -> Any:
    def setup(_: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
        attend = harness.factory(backend, KERNELS[0])(*shape.geometry(dtype), block_size=shape.block)
        out = args[0].new_empty(args[0].shape)
        return lambda *a: attend(*a, out=out), [args]

    return harness.Case(f"lazyops {backend}{suffix}", "lazyops", setup)


def sdpa_cases(q: Any, k: Any, v: Any, device: str, causal: bool) -> list[Any]:
    """SDPA's flash and cuDNN backends (on a CPU its math backend), GQA by ``enable_gqa``; a backend that refuses
    it gets keys and values repeated to the query heads where they fit (a 256 x 32k repeat is 68 GB a tensor)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    lower_right = causal and q.shape[2] != k.shape[2]
    mask = causal_lower_right(q.shape[2], k.shape[2]) if lower_right else None
    suffix = " (lower-right causal)" if lower_right else ""
    cuda = device.startswith("cuda")
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION} if cuda else {}

    def case(name: str, backend: Any) -> Any:
        def call(q: Any, k: Any, v: Any, gqa: bool) -> Any:
            with sdpa_kernel([backend]):
                return sdpa(q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=gqa)

        def setup(_: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
            try:
                call(q, k, v, True)
                return call, [(q, k, v, True)]
            except RuntimeError as refusal:
                group, why = q.shape[1] // k.shape[1], str(refusal).splitlines()[0][:80]
                needed = 2 * group * k.numel() * k.element_size()
                if cuda and needed > 0.8 * torch.cuda.mem_get_info()[0]:
                    raise RuntimeError(f"no GQA here ({why}); repeated keys need {needed / 2**30:.0f} GiB") from None
                wide = (k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
                return call, [(q, *wide, False)], "keys and values repeated to the query heads (no GQA here)"

        return harness.Case(f"SDPA {name}{suffix}", "peer", setup)

    return [case(name, backend) for name, backend in (chosen or {"math": SDPBackend.MATH}).items()]


def flex_case(q: Any, k: Any, v: Any, causal: bool) -> Any:
    def setup(_: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        offset, mask = k.shape[2] - q.shape[2], None
        if causal:
            mask = create_block_mask(
                lambda b, h, i, j: j <= i + offset, None, None, q.shape[2], k.shape[2], device=q.device
            )
        compiled = torch.compile(flex_attention, dynamic=False)
        return lambda q, k, v: compiled(q, k, v, block_mask=mask, enable_gqa=True), [(q, k, v)]

    return harness.Case("FlexAttention (contiguous, GQA)", "peer", setup)


def render(rows: list[dict[str, Any]], env: dict[str, Any]) -> list[str]:
    s, peak = env["shape"], hbm_peak(str(env.get("device", "")))
    lines = [
        f"{s['heads']} query heads, {s['kv_heads']} KV heads of {s['head_dim']}, {env['dtype']}, {s['block']}-token "
        "blocks scattered in the cache. Decode: µs per call inside a CUDA graph (up to 50 calls captured, 20 replays: "
        f"{GRAPH_S * 1e3:.0f} ms of GPU time a sample), "
        f"GB/s over the KV bytes read, % of {peak / 1e12} TB/s. Prefill and the prefill sweep: stream time "
        "(`do_bench`, the L2 flushed), TFLOP/s over 4 × pairs × D × Hq. Peers on contiguous keys of the same "
        "numbers; the implementations of a cell interleaved.",
        "",
        "## Checks (float64 reference, lazyops.testing)",
        "",
        *harness.table(["backend", "what", "status", "detail"], [_check_cells(r) for r in rows if "status" in r]),
    ]
    for part in ("decode", "prefill", "sweep"):
        body = []
        for row in (row for row in rows if row["part"] == part):
            best = _best_peer(rows, part, row["shape"])
            ratio = f"{best['us'] / row['us']:.2f}×" if best and row.get("us") and row["kind"] != "peer" else ""
            hbm = f"{row['rate'] * 1e9 / peak * 100:.0f} %" if row.get("unit") == "GB/s" else ""
            rate = f"{harness.figure(row.get('rate'), 1, row.get('noisy'))} {row.get('unit', '')}"
            note = (row.get("error") or row.get("note") or "")[:160]
            time = harness.figure(row.get("us"), 1, row.get("noisy"))
            body.append([row["shape"], row["impl"], time, rate, hbm, ratio, note])
        if body:
            header = ["shape", "implementation", "µs", "rate", "% of HBM", "× best peer", "note"]
            lines += [f"## {part.capitalize()}", "", *harness.table(header, body)]
    return [*lines, "## The issue's goals, from the rows above", "", *(f"- {goal}" for goal in goals(rows, peak)), ""]


def _check_cells(row: dict[str, Any]) -> list[str]:
    return [row["backend"], row["shape"], row["status"], row["detail"].replace("\n", " ")[:200]]


def _best_peer(rows: list[dict[str, Any]], part: str, shape: str, name: str = "") -> dict[str, Any] | None:
    found = [r for r in rows if (r["part"], r["shape"]) == (part, shape) and r.get("us") and r["kind"] == "peer"]
    return min((r for r in found if name in r["impl"]), key=lambda r: r["us"], default=None)


def goals(rows: list[dict[str, Any]], peak: float = HBM_PEAK) -> list[str]:
    """Each of issue 29's goals that these rows speak to, met or not, with the figure."""
    timed = {(r["part"], r["shape"], r["impl"]): r for r in rows if r.get("us")}
    said = []
    for (part, shape, impl), row in timed.items():
        if part not in ("decode", "prefill") or row["kind"] != "lazyops" or UNPAGED in impl:
            continue
        what, verdicts = f"{part} {shape}, {impl}", []
        if shape.startswith("chunked"):
            unpaged = timed.get((part, shape, impl + UNPAGED))
            said += [f"{what}: {unpaged['us'] / row['us']:.2f}× its unpaged layout [goal ≥ 0.9×]"] if unpaged else []
            continue
        peer = _best_peer(rows, part, shape, "SDPA" if part == "prefill" else "")
        if peer:
            verdicts.append(f"{peer['us'] / row['us']:.2f}× the best peer ({peer['impl']}) [goal ≥ 1.0×]")
        batch, _, context = shape.partition(" x ")
        if part == "decode" and int(batch) * int(context) >= 65536:
            verdicts.append(f"{row['rate'] * 1e9 / peak * 100:.0f} % of HBM [goal ≥ 85 %]")
        cudnn = _best_peer(rows, part, shape, "cuDNN")
        if part == "decode" and shape == "1 x 8192" and cudnn:
            verdicts.append(f"{cudnn['us'] / row['us']:.2f}× cuDNN [goal ≥ 2×]")
        said.append(f"{what}: " + ("; ".join(verdicts) or "no peer measured"))
    return said or ["(nothing measured here)"]


if __name__ == "__main__":
    sys.exit(main())
