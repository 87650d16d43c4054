"""Paged attention (issue 29): ``paged_attention_tl`` and ``kv_cache_write_tl`` checked against the float64
reference, then timed against torch's SDPA (flash and cuDNN backends) on contiguous keys holding the same numbers.

    python benchmarks/attention.py                   # on the H200: results/h200/attention.{md,json}
    python benchmarks/attention.py --quick           # fewer checks and decode cells, one round
    python benchmarks/attention.py --sweep           # also the Triton backend's tile table and split counts
    python benchmarks/attention.py --flex            # also FlexAttention (compiled per shape)
    python benchmarks/attention.py --smoke --device cpu --out /tmp/a   # the script's logic: tiny shapes, the host

Llama-3-8B's attention: 32 query heads, 8 KV heads of 128, bf16, 16-token blocks scattered in the cache.

1. **Checks**: ``lazyops.testing.run_conformance`` for both kernels in each backend (``--examples`` drawn cases),
   then each kernel on the timed shapes (decode 16 x 8k, prefill 1 x 8192, chunked 512 over 8192) against the
   float64 reference (``check_case``). A failed check makes the exit status 1.
2. **Decode**, batch 1 / 16 / 64 / 256 x context 1k / 8k / 32k: µs per call inside a CUDA graph, GB/s over the KV
   bytes read (``B * context * Hk * D * 2 * 2``) and the share of the H200's 4.8 TB/s.
3. **Prefill**, causal, 1 x 8192 and 16 x 512 (stream time, TFLOP/s over ``4 * pairs * D * Hq``), and a chunked
   prefill of 512 new tokens over a 7680-token cached prefix: paged (blocks scattered), the same kernel over blocks
   in order (unpaged), and SDPA with a lower-right causal mask.

Every implementation of a cell is timed interleaved with the others (``harness.measure``). Peers run on contiguous
``[B, H, L, D]`` tensors with ``enable_gqa`` (where a backend refuses it, on keys and values repeated to 32 heads:
the row says so). Backends: those of ``--backend``, else every one that runs here and exports the kernels (on a
GPU but the torch backend's, which reads lengths on the host and cannot be captured in a CUDA graph).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

TITLE = "paged_attention_tl and kv_cache_write_tl against SDPA"
HBM_PEAK = 4.8e12  # the H200's HBM3e bandwidth, bytes/s
KERNELS = ("paged_attention_tl", "kv_cache_write_tl")


@dataclass(frozen=True)
class Shape:
    heads: int
    kv_heads: int
    head_dim: int
    block: int
    decode: tuple[tuple[int, ...], tuple[int, ...]]  # batches, contexts
    prefill: tuple[tuple[str, int, int, int], ...]  # (cell, batch, length, new tokens a sequence)


LLAMA = Shape(
    32, 8, 128, 16, ((1, 16, 64, 256), (1024, 8192, 32768)),
    (("1 x 8192", 1, 8192, 8192), ("16 x 512", 16, 512, 512), ("chunked 512 over 8192", 1, 8192, 512)),
)  # fmt: skip
QUICK = (1, 64), (8192, 32768)
SMOKE = Shape(
    4, 2, 16, 4, ((1, 3), (16, 40)), (("1 x 64", 1, 64, 64), ("4 x 16", 4, 16, 16), ("chunked 8 over 64", 1, 64, 8))
)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer checks and decode cells, one round")
    parser.add_argument("--sweep", action="store_true", help="also the Triton tile table and split counts")
    parser.add_argument("--flex", action="store_true", help="also FlexAttention (compiled per shape)")
    parser.add_argument("--examples", type=int, help="drawn conformance cases per kernel and backend (default 8)")
    options = parser.parse_args(argv)
    device = harness.start(options)
    import torch

    torch.manual_seed(0)
    shape, dtype = (SMOKE, torch.float32) if options.smoke else (LLAMA, torch.bfloat16)
    if options.quick and not options.smoke:
        shape = dataclasses.replace(LLAMA, decode=QUICK)
    status = harness.backends(options.backend)
    if not options.backend:
        status = {name: None for name, problem in status.items() if problem is None and exports(name)}
        if device.startswith("cuda"):
            status.pop("torch", None)
    env = harness.environment(device, status) | {"shape": shape.__dict__, "dtype": str(dtype)}
    timing = Timing(device, options.smoke, 1 if options.quick else 3, options.flex, shape, dtype)
    print(f"backends: {', '.join(status)}; checks", flush=True)
    rows = checks(list(status), options, device, dtype, shape)
    parts = [timing.decode, timing.prefill] + ([timing.sweep] if options.sweep and "triton" in status else [])
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

    examples = options.examples or (2 if options.smoke else 4 if options.quick else 8)
    context, chunk, batch, written = (40, 8, 2, 5) if options.smoke else (8192, 512, 16, 256)
    attend, block = (shape.heads, shape.kv_heads, shape.head_dim, dtype), {"block_size": shape.block}
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
            return str(testing.run_conformance(backend, kernels=KERNELS, max_examples=examples, device=device))

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
    """The timed parts; each yields a cell's rows at a time, so that the result files grow as the run goes."""

    device: str
    smoke: bool
    rounds: int
    flex: bool
    shape: Shape
    dtype: Any

    def decode(self, backends: list[str]) -> Any:
        batches, contexts = self.shape.decode
        for context in contexts:
            for batch in batches:
                q, k, v = self.tensors(batch, context, 1)
                args = self.paged(q, k, v, shuffle=True)
                cases = [lazyops_case(backend, "", args, self.shape, self.dtype) for backend in backends]
                cases += sdpa_cases(q, k, v, self.device, causal=False)
                cases += [flex_case(q, k, v, causal=False)] if self.flex else []
                yield self.measure("decode", f"{batch} x {context}", cases, 2 * k.nbytes, "GB/s")
                del q, k, v, args, cases

    def prefill(self, backends: list[str]) -> Any:
        for cell, batch, length, new in self.shape.prefill:
            q, k, v = self.tensors(batch, length, new)
            layouts = [("", True)] + ([(" unpaged (blocks in order)", False)] if new < length else [])
            cases = []
            for suffix, shuffle in layouts:
                args = self.paged(q, k, v, shuffle)
                cases += [lazyops_case(backend, suffix, args, self.shape, self.dtype) for backend in backends]
            cases += sdpa_cases(q, k, v, self.device, causal=True)
            cases += [flex_case(q, k, v, causal=True)] if self.flex else []
            yield self.measure("prefill", cell, cases, self.flops(batch, length, new), "TFLOP/s")
            del q, k, v, args, cases

    def sweep(self, backends: list[str]) -> Any:
        """The Triton backend's alternatives (its ``SWEEP`` table, and split counts at decode), built unchecked,
        beside its own rule's choice (checked above) at a few cells."""
        s = self.shape
        config = (s.heads, s.kv_heads, s.head_dim, self.dtype, s.block)
        cells = [(1, 40), (3, 16)] if self.smoke else [(1, 8192), (16, 8192), (64, 8192), (256, 8192)]
        splits = (1, 4) if self.smoke else (1, 16, 32, 64)
        length = 32 if self.smoke else 8192
        for kind, batch, context, new in [*(("decode", b, c, 1) for b, c in cells), ("prefill", 1, length, length)]:
            q, k, v = self.tensors(batch, context, new)
            args = self.paged(q, k, v, shuffle=True)
            cases = [lazyops_case("triton", " (its rule)", args, s, self.dtype)]
            splits_here, tiles = splits if new == 1 else (1,), 1 if self.smoke else None
            variants = harness.attention_variants(kind, config, self.device, splits_here, tiles)
            timed = (*args, args[0].new_empty(args[0].shape))
            cases += [
                harness.Case(label, "candidate", lambda _, c=call, t=timed: (c, [t]))
                for label, call in variants.items()
            ]
            cell, amount = f"{kind} {batch} x {context}", 2 * k.nbytes if new == 1 else self.flops(batch, context, new)
            yield self.measure("sweep", cell, cases, amount, "GB/s" if new == 1 else "TFLOP/s")
            del q, k, v, args, cases

    def flops(self, batch: int, length: int, new: int) -> int:
        """``4 * pairs * D * Hq``: each sequence's ``new`` queries causally over its ``length`` keys."""
        pairs = batch * (new * (length - new) + new * (new + 1) // 2)
        return 4 * pairs * self.shape.head_dim * self.shape.heads

    def tensors(self, batch: int, length: int, new: int) -> tuple[Any, Any, Any]:
        """Contiguous ``q [B, Hq, new, D]`` and ``k``, ``v [B, Hk, length, D]``: the peers' inputs."""
        import torch

        s, options = self.shape, {"dtype": self.dtype, "device": self.device}
        k = torch.randn(batch, s.kv_heads, length, s.head_dim, **options)
        return torch.randn(batch, s.heads, new, s.head_dim, **options), k, torch.randn_like(k)

    def paged(self, q: Any, k: Any, v: Any, shuffle: bool) -> tuple[Any, ...]:
        """The same numbers as lazyops takes them: ``(query [T, Hq * D], key_cache, value_cache, block_table,
        seq_lens, cu_seqlens_q)``."""
        import torch

        batch, heads, new, dim = q.shape
        (key_cache, value_cache), table = harness.paged([k, v], self.shape.block, shuffle)
        query = q.transpose(1, 2).reshape(batch * new, heads * dim)
        seq_lens = torch.full((batch,), k.shape[2], dtype=torch.int32, device=q.device)
        starts = torch.arange(0, batch * new + 1, new, dtype=torch.int32, device=q.device)
        return query, key_cache, value_cache, table, seq_lens, starts

    def measure(self, part: str, cell: str, cases: list[Any], amount: float, unit: str) -> list[dict[str, Any]]:
        """The cell's cases interleaved: decode per call inside a CUDA graph, prefill by stream time."""
        mode = "graph" if unit == "GB/s" and self.device.startswith("cuda") else "stream"
        timed = harness.measure(cases, cell, mode, self.device, rounds=self.rounds, round_s=0.1)
        rows = []
        for case in cases:
            row = {"part": part, "shape": cell, "impl": case.name, "mode": mode, **timed[case.name]}
            if row.get("us"):
                row.update(rate=amount / (row["us"] * 1e-6) / (1e9 if unit == "GB/s" else 1e12), unit=unit)
            rows.append(row)
            shown = f"{row['us']:10.1f} µs {row['rate']:9.1f} {unit}" if row.get("us") else row["error"][:100]
            print(f"  {part:8} {cell:24} {case.name:40} {shown}", flush=True)
        return rows


def lazyops_case(backend: str, suffix: str, args: tuple[Any, ...], shape: Shape, dtype: Any) -> Any:
    def setup(_: str) -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
        attend = harness.factory(backend, KERNELS[0])(
            shape.heads, shape.kv_heads, shape.head_dim, dtype, block_size=shape.block
        )
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
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION}
    cuda = device.startswith("cuda")

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

    return [case(name, backend) for name, backend in chosen.items()] if cuda else [case("math", SDPBackend.MATH)]


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
    s = env["shape"]
    lines = [
        f"{s['heads']} query heads, {s['kv_heads']} KV heads of {s['head_dim']}, {env['dtype']}, {s['block']}-token "
        "blocks scattered in the cache. Decode: µs per call inside a CUDA graph (50 calls captured, 20 replays), "
        f"GB/s over the KV bytes read, % of {HBM_PEAK / 1e12} TB/s. Prefill and the prefill sweep: stream time "
        "(`do_bench`, the L2 flushed), TFLOP/s over 4 × pairs × D × Hq. Peers on contiguous keys of the same "
        "numbers; the implementations of a cell interleaved.",
        "",
        "## Checks (float64 reference, lazyops.testing)",
        "",
        *harness.table(
            ["backend", "what", "status", "detail"],
            [
                [r["backend"], r["shape"], r["status"], r["detail"].replace("\n", " ")[:200]]
                for r in rows
                if "status" in r
            ],
        ),
    ]
    for part in ("decode", "prefill", "sweep"):
        chosen = [row for row in rows if row["part"] == part]
        body = []
        for row in chosen:
            best = min(
                (r["us"] for r in chosen if r["shape"] == row["shape"] and r["kind"] == "peer" and r.get("us")),
                default=None,
            )
            ratio = f"{best / row['us']:.2f}×" if best and row.get("us") and row["kind"] != "peer" else ""
            hbm = f"{row['rate'] * 1e9 / HBM_PEAK * 100:.0f} %" if row.get("unit") == "GB/s" else ""
            rate = f"{harness.figure(row.get('rate'), 1, row.get('noisy'))} {row.get('unit', '')}"
            note = (row.get("error") or row.get("note") or "")[:160]
            cells = [harness.figure(row.get("us"), 1, row.get("noisy")), rate, hbm, ratio, note]
            body.append([row["shape"], row["impl"], *cells])
        if body:
            header = ["shape", "implementation", "µs", "rate", "% of HBM", "× best peer", "note"]
            lines += [f"## {part.capitalize()}", "", *harness.table(header, body)]
    return [*lines, "## The issue's goals, from the rows above", "", *(f"- {goal}" for goal in goals(rows)), ""]


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """Each of issue 29's goals that these rows speak to, met or not, with the figure."""

    def best(part: str, shape: str, name: str = "") -> dict[str, Any] | None:
        found = [r for r in rows if (r["part"], r["shape"]) == (part, shape) and r.get("us") and r["kind"] == "peer"]
        return min((r for r in found if name in r["impl"]), key=lambda r: r["us"], default=None)

    said = []
    for row in rows:
        if row["part"] not in ("decode", "prefill") or row["kind"] != "lazyops" or not row.get("us"):
            continue
        what, verdicts = f"{row['part']} {row['shape']}, {row['impl']}", []
        if row["part"] == "prefill" and row["shape"].startswith("chunked"):
            unpaged = [
                r
                for r in rows
                if r["shape"] == row["shape"] and r["impl"] == row["impl"] + " unpaged (blocks in order)"
            ]
            if unpaged and unpaged[0].get("us"):
                said.append(f"{what}: {unpaged[0]['us'] / row['us']:.2f}× its unpaged layout [goal ≥ 0.9×]")
            continue
        if "unpaged" in row["impl"]:
            continue
        peer = best(row["part"], row["shape"], "SDPA" if row["part"] == "prefill" else "")
        if peer:
            verdicts.append(f"{peer['us'] / row['us']:.2f}× the best peer ({peer['impl']}) [goal ≥ 1.0×]")
        if row["part"] == "decode":
            batch, context = (int(x) for x in row["shape"].split(" x "))
            if batch * context >= 65536:
                verdicts.append(f"{row['rate'] * 1e9 / HBM_PEAK * 100:.0f} % of HBM [goal ≥ 85 %]")
            cudnn = best("decode", row["shape"], "cuDNN")
            if row["shape"] == "1 x 8192" and cudnn:
                verdicts.append(f"{cudnn['us'] / row['us']:.2f}× cuDNN [goal ≥ 2×]")
        said.append(f"{what}: " + ("; ".join(verdicts) or "no peer measured"))
    return said or ["(nothing measured here)"]


if __name__ == "__main__":
    sys.exit(main())
