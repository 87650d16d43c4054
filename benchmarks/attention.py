"""paged_attention_tl and kv_cache_write_tl on a GPU: checked against the float64 reference, then timed against
torch's SDPA (flash and cuDNN backends) on contiguous keys of the same size, in one run.

    python3 benchmarks/attention.py                  # H200: checks, decode grid, prefill; about 3 minutes
    python3 benchmarks/attention.py --quick          # fewer checks and cells (about a minute)
    python3 benchmarks/attention.py --sweep          # also the Triton tile table (SWEEP) and split counts
    python3 benchmarks/attention.py --flex           # also FlexAttention (compiled; contiguous keys, GQA)
    python3 benchmarks/attention.py --registers      # Triton's tiles compiled for sm_90 on the host: registers
    python3 benchmarks/attention.py --smoke --out /tmp/x   # the script's logic on a CPU (torch, Triton's interpreter)

Llama-3-8B's attention: 32 query heads, 8 kv heads of 128, bf16, 16-token blocks (shuffled in the cache).

1. **Checks**: ``lazyops.testing.run_conformance`` for both kernels in every backend that runs here (drawn cases),
   then each kernel on the timed shapes (decode 16 x 8k, prefill 1 x 8192, chunked 512 over 8192) against the
   float64 reference (``check_case``).
2. **Decode**, batch 1 / 16 / 64 / 256 x context 1k / 8k / 32k: per call inside a CUDA graph (50 calls captured, 20
   replays, divided), bandwidth over the KV bytes read (``B * context * Hk * D * 2 * 2``), and the share of the
   H200's 4.8 TB/s.
3. **Prefill**, causal, 1 x 8192 and 16 x 512 (``triton.testing.do_bench`` medians, TFLOP/s over ``4 * pairs * D *
   Hq``), and a chunked prefill of 512 new tokens over a 7680-token cached prefix: paged (shuffled blocks), the same
   kernel over an unpaged layout (blocks in order), and SDPA with a lower-right causal mask.

Peers run on contiguous ``[B, H, L, D]`` tensors with ``enable_gqa`` (or, where a backend refuses it, keys and values
repeated to 32 heads: the row says so). Writes ``attention.md`` and ``attention.json`` into ``--out``
(``benchmarks/results/h200`` by default). Self-contained: lazyops' public API, torch and Triton (the sweep and the
register report reach into the Triton backend's module for its tile table).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HBM_PEAK = 4.8e12  # the H200's HBM3e bandwidth, bytes/s
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16
DECODE_BATCHES, DECODE_CONTEXTS = (1, 16, 64, 256), (1024, 8192, 32768)
QUICK_BATCHES, QUICK_CONTEXTS = (1, 64), (8192, 32768)
SMOKE = {"heads": 4, "kv_heads": 2, "head_dim": 16, "block": 4, "batches": (1, 3), "contexts": (16, 40)}
GRAPH_CALLS, GRAPH_REPLAYS = 50, 20


@dataclasses.dataclass
class Row:
    """One timed cell: what ran, how long per call, and its rate."""

    part: str
    shape: str
    impl: str
    us: float | None = None
    rate: float | None = None  # GB/s (decode) or TFLOP/s (prefill)
    unit: str = ""
    note: str = ""


# -- the setting -----------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "h200")
    parser.add_argument("--quick", action="store_true", help="fewer checks and decode cells")
    parser.add_argument("--sweep", action="store_true", help="time the Triton tile table and split counts too")
    parser.add_argument("--flex", action="store_true", help="time FlexAttention (compiled per shape) too")
    parser.add_argument("--registers", action="store_true", help="only: Triton's tiles compiled for sm_90, host-side")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (torch, Triton's interpreter)")
    parser.add_argument("--backends", help="comma list (default: every GPU backend that runs here)")
    parser.add_argument("--examples", type=int, help="drawn conformance cases per kernel and backend")
    return parser.parse_args(argv)


def environment(torch: Any, device: str) -> dict[str, Any]:
    versions = {"torch": torch.__version__}
    for package in ("triton", "tilelang"):
        try:
            versions[package] = importlib.import_module(package).__version__
        except Exception as error:  # noqa: BLE001 - a missing package is a fact of the run
            versions[package] = f"not importable ({type(error).__name__})"
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (a check of the script, no result)",
        "versions": versions,
        "commit": commit,
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
    }


def factories(backend: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(paged_attention_tl, kv_cache_write_tl)`` of ``backend`` (its module, ``lazyops.<backend>``)."""
    module = importlib.import_module(f"lazyops.{backend}")
    return module.paged_attention_tl, module.kv_cache_write_tl


def gpu_backends(torch: Any, args: argparse.Namespace) -> list[str]:
    if args.backends:
        return args.backends.split(",")
    if args.smoke:
        return ["torch", "triton"]
    found = []
    for backend in ("triton", "tilelang"):
        try:
            factories(backend)
        except Exception as error:  # noqa: BLE001 - a backend that does not load is left out, and said so
            print(f"  {backend}: not timed ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
            continue
        found.append(backend)
    return found


# -- timing ----------------------------------------------------------------------------------------------------------
def graph_us(torch: Any, call: Callable[[], Any], device: str) -> float:
    """Per call inside a CUDA graph: ``GRAPH_CALLS`` calls captured, ``GRAPH_REPLAYS`` replays (on a CPU: plain calls,
    timed on the host)."""
    call()
    if device != "cuda":
        started = time.perf_counter()
        for _ in range(3):
            call()
        return (time.perf_counter() - started) / 3 * 1e6
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(GRAPH_REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    elapsed_ms = start.elapsed_time(end)
    del graph
    return elapsed_ms * 1e3 / (GRAPH_CALLS * GRAPH_REPLAYS)


def bench_us(call: Callable[[], Any], device: str) -> float:
    """Stream time: the median of ``triton.testing.do_bench`` (L2 flushed between calls)."""
    call()
    if device != "cuda":
        started = time.perf_counter()
        call()
        return (time.perf_counter() - started) * 1e6
    from triton.testing import do_bench

    return float(do_bench(call, warmup=25, rep=200, return_mode="median")) * 1e3


def unmeasured() -> float:
    raise RuntimeError("not measured")


def timed(rows: list[Row], row: Row, measure: Callable[[], float], amount: float, unit: str) -> None:
    """Measure one cell into ``rows``; an implementation that cannot run gets its error instead of a time."""
    try:
        row.us = measure()
        row.rate, row.unit = amount / (row.us * 1e-6) / (1e9 if unit == "GB/s" else 1e12), unit
    except Exception as error:  # noqa: BLE001 - one failing implementation is a row, not a crashed run
        row.note = (row.note + "; " if row.note else "") + f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    rows.append(row)
    shown = f"{row.us:9.1f} us {row.rate:9.1f} {row.unit}" if row.us is not None else row.note
    print(f"  {row.part:8} {row.shape:24} {row.impl:34} {shown}", flush=True)


# -- inputs ----------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Shape:
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    head_dim: int = HEAD_DIM
    block: int = BLOCK


def paged_inputs(
    torch: Any, shape: Shape, lengths: list[int], queries: list[int], device: str, dtype: Any, shuffle: bool = True
) -> dict[str, Any]:
    """A paged cache holding every sequence (blocks shuffled, or in order), its table, lengths and query offsets."""
    blocks = [-(-length // shape.block) for length in lengths]
    total = max(1, sum(blocks))
    order = torch.randperm(total, device=device) if shuffle else torch.arange(total, device=device)
    width = max(blocks, default=1)
    table = torch.zeros(len(lengths), width, dtype=torch.int32, device=device)
    used = 0
    for b, count in enumerate(blocks):
        table[b, :count] = order[used : used + count].to(torch.int32)
        used += count
    cache_shape = (total, shape.block, shape.kv_heads, shape.head_dim)
    starts = [0]
    for count in queries:
        starts.append(starts[-1] + count)
    return {
        "query": torch.randn(starts[-1], shape.heads * shape.head_dim, dtype=dtype, device=device),
        "key_cache": torch.randn(cache_shape, dtype=dtype, device=device),
        "value_cache": torch.randn(cache_shape, dtype=dtype, device=device),
        "block_table": table,
        "seq_lens": torch.tensor(lengths, dtype=torch.int32, device=device),
        "cu_seqlens_q": torch.tensor(starts, dtype=torch.int32, device=device),
    }


def lazyops_call(attention: Any, inputs: dict[str, Any]) -> Callable[[], Any]:
    out = torch_module().empty_like(inputs["query"])
    names = ("query", "key_cache", "value_cache", "block_table", "seq_lens", "cu_seqlens_q")
    args = tuple(inputs[name] for name in names)
    return lambda: attention(*args, out=out)


def torch_module() -> Any:
    import torch

    return torch


def sdpa_peers(torch: Any, q: Any, k: Any, v: Any, mask: Any = None, causal: bool = False) -> Iterator[Any]:
    """``(name, call, note)`` for SDPA's flash and cuDNN backends on ``q[B, Hq, Lq, D]``, ``k``, ``v`` ``[B, Hk, L,
    D]`` with ``enable_gqa``, else on keys and values repeated to ``Hq`` heads (what the backend then reads is the
    group's multiple), made one at a time (a 256 x 32k repeat is 68 GB a tensor) and skipped where it cannot fit."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    for name, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):

        def call(q: Any = q, k: Any = k, v: Any = v, backend: Any = backend, gqa: bool = True) -> Any:
            with sdpa_kernel([backend]):
                return sdpa(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)

        try:
            call()
        except RuntimeError as refusal:
            group = q.shape[1] // k.shape[1]
            needed = 2 * group * k.numel() * k.element_size()
            if needed > 0.8 * torch.cuda.mem_get_info()[0]:
                yield (
                    name,
                    None,
                    f"no GQA here ({str(refusal).splitlines()[0][:80]}); repeated keys need {needed / 2**30:.0f} GiB",
                )
                continue
            wide_k, wide_v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

            def call(q: Any = q, k: Any = wide_k, v: Any = wide_v, backend: Any = backend, gqa: bool = False) -> Any:
                with sdpa_kernel([backend]):
                    return sdpa(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)

            yield name, call, "keys and values repeated to the query heads (no GQA in this backend)"
            del call, wide_k, wide_v
            continue
        yield name, call, ""


def time_peers(
    torch: Any,
    rows: list[Row],
    template: Row,
    tensors: tuple[Any, Any, Any],
    timing: Callable[..., float],
    amount: float,
    unit: str,
    mask: Any = None,
) -> None:
    """Time each SDPA peer into ``rows`` (its tensors, repeated keys included, freed on return)."""
    for name, call, note in sdpa_peers(torch, *tensors, mask=mask, causal=mask is None and template.part == "prefill"):
        label = name + (" (lower-right causal)" if mask is not None else "")
        row = dataclasses.replace(template, impl=label, note=note)
        timed(rows, row, (lambda c=call: timing(torch, c, "cuda")) if call else unmeasured, amount, unit)


# -- the parts -------------------------------------------------------------------------------------------------------
def checks(torch: Any, backends: list[str], args: argparse.Namespace, device: str, dtype: Any) -> list[dict[str, Any]]:
    from lazyops import testing
    from lazyops.testing import Case

    examples = args.examples or (2 if args.smoke else 4 if args.quick else 8)
    results = []
    for backend in backends:
        try:
            report = testing.run_conformance(
                backend, kernels=["paged_attention_tl", "kv_cache_write_tl"], max_examples=examples, device=device
            )
            results.append({"backend": backend, "part": "drawn", "status": "pass", "detail": str(report)})
        except Exception as error:  # noqa: BLE001 - recorded, and the run goes on to time what runs
            results.append({"backend": backend, "part": "drawn", "status": "FAIL", "detail": str(error)})
        print(f"  {backend}: drawn cases {results[-1]['status']}", flush=True)
        attention, write = factories(backend)
        shape = Shape(**{k: SMOKE[k] for k in ("heads", "kv_heads", "head_dim", "block")}) if args.smoke else Shape()
        context = 40 if args.smoke else 8192
        chunk = 8 if args.smoke else 512
        batch = 2 if args.smoke else 16
        perf = [
            (f"decode {batch} x {context}", {"batches": (((context, 1),) * batch,)}),
            (f"prefill 1 x {context}", {"batches": (((context, context),),)}),
            (f"chunked {chunk} over {context}", {"batches": (((context, chunk),),)}),
        ]
        factory_args = (shape.heads, shape.kv_heads, shape.head_dim, dtype)
        for name, geometry in perf:
            tokens = sum(q for _, q in geometry["batches"][0])
            case = Case(
                "paged_attention_tl",
                factory_args,
                {"block_size": shape.block},
                (tokens,),
                7,
                {**geometry, "shuffle": True},
            )
            try:
                error = testing.check_case(attention, case, device=device, max_elements=2**62)
                results.append({"backend": backend, "part": name, "status": "pass", "detail": f"error {error:.2e}"})
            except Exception as failure:  # noqa: BLE001 - recorded
                results.append({"backend": backend, "part": name, "status": "FAIL", "detail": str(failure)[:400]})
            print(f"  {backend}: {name} {results[-1]['status']} {results[-1]['detail'][:80]}", flush=True)
        case = Case(
            "kv_cache_write_tl",
            (shape.kv_heads, shape.head_dim, dtype),
            {"block_size": shape.block},
            (1, 256 if not args.smoke else 5),
            7,
            {"spare_blocks": 3, "padding": 1},
        )
        try:
            testing.check_case(write, case, device=device, max_elements=2**62)
            results.append({"backend": backend, "part": "write 1, 256", "status": "pass", "detail": ""})
        except Exception as failure:  # noqa: BLE001 - recorded
            results.append({"backend": backend, "part": "write 1, 256", "status": "FAIL", "detail": str(failure)[:400]})
    return results


def decode(torch: Any, backends: list[str], args: argparse.Namespace, device: str, dtype: Any) -> list[Row]:
    rows: list[Row] = []
    shape = Shape(**{k: SMOKE[k] for k in ("heads", "kv_heads", "head_dim", "block")}) if args.smoke else Shape()
    batches, contexts = (
        (SMOKE["batches"], SMOKE["contexts"])
        if args.smoke
        else (QUICK_BATCHES, QUICK_CONTEXTS)
        if args.quick
        else (DECODE_BATCHES, DECODE_CONTEXTS)
    )
    for context in contexts:
        for batch in batches:
            cell = f"{batch} x {context}"
            kv_bytes = batch * context * shape.kv_heads * shape.head_dim * 2 * dtype.itemsize
            inputs = paged_inputs(torch, shape, [context] * batch, [1] * batch, device, dtype)
            for backend in backends:
                attention = factories(backend)[0](
                    shape.heads, shape.kv_heads, shape.head_dim, dtype, block_size=shape.block
                )
                call = lazyops_call(attention, inputs)
                timed(
                    rows,
                    Row("decode", cell, f"lazyops {backend}"),
                    lambda call=call: graph_us(torch, call, device),
                    kv_bytes,
                    "GB/s",
                )
            del inputs
            q = torch.randn(batch, shape.heads, 1, shape.head_dim, dtype=dtype, device=device)
            k = torch.randn(batch, shape.kv_heads, context, shape.head_dim, dtype=dtype, device=device)
            v = torch.randn_like(k)
            if device == "cuda":
                time_peers(torch, rows, Row("decode", cell, ""), (q, k, v), graph_us, kv_bytes, "GB/s")
            if args.flex:
                timed(
                    rows,
                    Row("decode", cell, "FlexAttention (contiguous, GQA)"),
                    lambda q=q, k=k, v=v: graph_us(torch, flex_call(torch, q, k, v, causal=False), device),
                    kv_bytes,
                    "GB/s",
                )
            del q, k, v
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows


def flex_call(torch: Any, q: Any, k: Any, v: Any, causal: bool) -> Callable[[], Any]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)
    mask = None
    if causal:
        offset = k.shape[2] - q.shape[2]
        mask = create_block_mask(
            lambda b, h, qi, ki: ki <= qi + offset, None, None, q.shape[2], k.shape[2], device=q.device
        )
    return lambda: compiled(q, k, v, block_mask=mask, enable_gqa=True)


def prefill(torch: Any, backends: list[str], args: argparse.Namespace, device: str, dtype: Any) -> list[Row]:
    from torch.nn.attention.bias import causal_lower_right

    rows: list[Row] = []
    shape = Shape(**{k: SMOKE[k] for k in ("heads", "kv_heads", "head_dim", "block")}) if args.smoke else Shape()
    if args.smoke:
        cells = [("1 x 64", [64], [64]), ("4 x 16", [16] * 4, [16] * 4), ("chunked 8 over 64", [64], [8])]
    else:
        cells = [
            ("1 x 8192", [8192], [8192]),
            ("16 x 512", [512] * 16, [512] * 16),
            ("chunked 512 over 8192", [8192], [512]),
        ]
    for cell, lengths, queries in cells:
        pairs = sum(q * (length - q) + q * (q + 1) // 2 for length, q in zip(lengths, queries, strict=True))
        flops = 4 * pairs * shape.head_dim * shape.heads
        layouts = [("", True)] + ([(" unpaged (blocks in order)", False)] if cell.startswith("chunked") else [])
        for suffix, shuffle in layouts:
            inputs = paged_inputs(torch, shape, lengths, queries, device, dtype, shuffle=shuffle)
            for backend in backends:
                attention = factories(backend)[0](
                    shape.heads, shape.kv_heads, shape.head_dim, dtype, block_size=shape.block
                )
                call = lazyops_call(attention, inputs)
                timed(
                    rows,
                    Row("prefill", cell, f"lazyops {backend}{suffix}"),
                    lambda call=call: bench_us(call, device),
                    flops,
                    "TFLOP/s",
                )
            del inputs
        batch, length, new = len(lengths), lengths[0], queries[0]
        q = torch.randn(batch, shape.heads, new, shape.head_dim, dtype=dtype, device=device)
        k = torch.randn(batch, shape.kv_heads, length, shape.head_dim, dtype=dtype, device=device)
        v = torch.randn_like(k)
        mask = causal_lower_right(new, length) if new != length else None
        if device == "cuda":
            timing = lambda torch, call, device: bench_us(call, device)  # noqa: E731
            time_peers(torch, rows, Row("prefill", cell, ""), (q, k, v), timing, flops, "TFLOP/s", mask)
        if args.flex:
            timed(
                rows,
                Row("prefill", cell, "FlexAttention (contiguous, GQA)"),
                lambda q=q, k=k, v=v: bench_us(flex_call(torch, q, k, v, causal=True), device),
                flops,
                "TFLOP/s",
            )
    return rows


def sweep(torch: Any, args: argparse.Namespace, device: str, dtype: Any) -> list[Row]:
    """The Triton backend's alternatives (``SWEEP``, and split counts for the 3D kernel) at a few cells, each built
    directly (``build_attention``: no checks, which this script has run above)."""
    from lazyops._backends.triton import paged_attention as triton_attention
    from lazyops.specs.paged_attention import spec

    rows: list[Row] = []
    shape = Shape(**{k: SMOKE[k] for k in ("heads", "kv_heads", "head_dim", "block")}) if args.smoke else Shape()
    config = spec.bind(shape.heads, shape.kv_heads, shape.head_dim, dtype, block_size=shape.block)
    decode_cells = [(1, 40), (3, 16)] if args.smoke else [(1, 8192), (16, 8192), (64, 8192), (256, 8192)]
    for batch, context in decode_cells:
        inputs = paged_inputs(torch, shape, [context] * batch, [1] * batch, device, dtype)
        out = torch.empty_like(inputs["query"])
        empty = torch.empty(0, device=device)
        kv_bytes = batch * context * shape.kv_heads * shape.head_dim * 2 * dtype.itemsize
        for tiles in triton_attention.SWEEP["decode"][: 1 if args.smoke else None]:
            for segments in (1, 4) if args.smoke else (1, 16, 32, 64):
                launch = triton_attention.build_attention(config, tiles=tiles, segments=segments)
                args_ = (*inputs.values(), empty, empty, out)
                timed(
                    rows,
                    Row("sweep", f"decode {batch} x {context}", f"{tiles} segments {segments}"),
                    lambda launch=launch, a=args_: graph_us(torch, lambda: launch(*a), device),
                    kv_bytes,
                    "GB/s",
                )
        del inputs
    length = 32 if args.smoke else 8192
    inputs = paged_inputs(torch, shape, [length], [length], device, dtype)
    out = torch.empty_like(inputs["query"])
    empty = torch.empty(0, device=device)
    flops = 4 * (length * (length + 1) // 2) * shape.head_dim * shape.heads
    for tiles in triton_attention.SWEEP["prefill"][: 1 if args.smoke else None]:
        launch = triton_attention.build_attention(config, tiles=tiles, segments=1)
        args_ = (*inputs.values(), empty, empty, out)
        timed(
            rows,
            Row("sweep", f"prefill 1 x {length}", str(tiles)),
            lambda launch=launch, a=args_: bench_us(lambda: launch(*a), device),
            flops,
            "TFLOP/s",
        )
    return rows


def registers() -> None:
    """Compile every Triton tile configuration for sm_90 on the host and print registers, spills, shared memory."""
    import tempfile

    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from lazyops._backends.triton import paged_attention as triton_attention

    kernel = triton_attention._attention_kernel
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    pointers = {
        "query_ptr": "bf16",
        "key_cache_ptr": "bf16",
        "value_cache_ptr": "bf16",
        "block_table_ptr": "i32",
        "seq_lens_ptr": "i32",
        "cu_seqlens_ptr": "i32",
        "k_scale_ptr": "fp32",
        "v_scale_ptr": "fp32",
        "out_ptr": "bf16",
        "partial_out_ptr": "fp32",
        "partial_max_ptr": "fp32",
        "partial_sum_ptr": "fp32",
    }
    scalars = {
        "tokens": "i32",
        "batch": "i32",
        "num_blocks": "i32",
        "table_width": "i32",
        "query_row_stride": "i32",
        "out_row_stride": "i32",
        "table_row_stride": "i32",
        "scale": "fp32",
        "softcap": "fp32",
    }
    aligned = [*pointers, "query_row_stride", "out_row_stride", "table_row_stride"]
    for kind, table in (("prefill", triton_attention.PREFILL_TILES), ("decode", triton_attention.DECODE_TILES)):
        for head_dim, tiles in table.items():
            if head_dim < 64:
                continue
            for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
                chosen = tiles if dtype is torch.bfloat16 else triton_attention.FLOAT32_TILES
                types = {k: f"*{name if v == 'bf16' else v}" for k, v in pointers.items()}
                constants = {
                    "HEADS": 32,
                    "KV_HEADS": 8,
                    "GROUP": 4,
                    "HEAD_DIM": head_dim,
                    "BLOCK_D": head_dim,
                    "BLOCK_SIZE": 16,
                    "BLOCK_M": chosen.block_m,
                    "BLOCK_Q": chosen.block_m // 4,
                    "TILE_N": chosen.tile_n,
                    "WINDOW": 0,
                    "SOFTCAP": False,
                    "FP8": False,
                    "SEGMENTS": 1 if kind == "prefill" else 32,
                    "UPCAST": False,
                    "IEEE": dtype is torch.float32,
                }
                signature = {**types, **scalars, **dict.fromkeys(constants, "constexpr")}
                attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
                compiled = triton.compile(
                    ASTSource(kernel, signature, constants, attrs),
                    target=GPUTarget("cuda", 90, 32),
                    options={"num_warps": chosen.num_warps, "num_stages": chosen.num_stages},
                )
                with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
                    cubin.write(compiled.asm["cubin"])
                    cubin.flush()
                    usage = subprocess.run(
                        [str(tool), "-res-usage", cubin.name], capture_output=True, text=True, check=True
                    ).stdout
                found = [part for part in usage.split() if part.startswith(("REG:", "STACK:"))]
                print(f"{kind:8} D={head_dim:3} {name} {chosen}: {' '.join(found)} shared {compiled.metadata.shared}")


# -- the report ------------------------------------------------------------------------------------------------------
def write_report(out: Path, env: dict[str, Any], checked: list[dict[str, Any]], rows: list[Row]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {**env, "checks": checked, "rows": [dataclasses.asdict(row) for row in rows]}
    (out / "attention.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = [
        "# paged_attention_tl and kv_cache_write_tl on the GPU",
        "",
        f"Made by `{env['command']}` on {env['date']}: {env['device']}, commit {env['commit']}, "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
        + ".",
        "",
        "Llama-3-8B attention: 32 query heads, 8 kv heads of 128, bf16, 16-token blocks. Decode: per call inside a "
        f"CUDA graph ({GRAPH_CALLS} calls captured, {GRAPH_REPLAYS} replays), GB/s over the KV bytes read, % of "
        "4.8 TB/s. Prefill: do_bench medians, TFLOP/s over 4 x pairs x D x Hq. Peers on contiguous keys.",
        "",
        "## Checks (float64 reference, lazyops.testing)",
        "",
        "| backend | part | status | detail |",
        "| --- | --- | --- | --- |",
    ]
    for check in checked:
        detail = check["detail"].replace("\n", " ").replace("|", "/")[:200]
        lines.append(f"| {check['backend']} | {check['part']} | {check['status']} | {detail} |")
    for part in ("decode", "prefill", "sweep"):
        chosen = [row for row in rows if row.part == part]
        if not chosen:
            continue
        lines += [
            "",
            f"## {part.capitalize()}",
            "",
            "| shape | implementation | us | rate | % of HBM | vs best peer | note |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for row in chosen:
            peers = [r for r in chosen if r.shape == row.shape and not r.impl.startswith("lazyops") and r.us]
            best = min((r.us for r in peers), default=None)
            ratio = f"{best / row.us:.2f}x" if best and row.us and row.impl.startswith("lazyops") else ""
            hbm = f"{row.rate * 1e9 / HBM_PEAK * 100:.0f} %" if row.unit == "GB/s" and row.rate else ""
            us = f"{row.us:.1f}" if row.us is not None else "—"
            rate = f"{row.rate:.1f} {row.unit}" if row.rate is not None else "—"
            lines.append(f"| {row.shape} | {row.impl} | {us} | {rate} | {hbm} | {ratio} | {row.note} |")
    lines += ["", "## The issue's goals, from the rows above", ""] + [f"- {goal}" for goal in goals(rows)]
    (out / "attention.md").write_text("\n".join(lines) + "\n")


def goals(rows: list[Row]) -> list[str]:
    """Each of issue 29's goals that these rows speak to, met or not, with the figure."""

    def best(part: str, shape: str, lazyops: bool, name: str = "") -> Row | None:
        found = [
            r
            for r in rows
            if r.part == part
            and r.shape == shape
            and r.us
            and r.impl.startswith("lazyops") == lazyops
            and name in r.impl
            and "unpaged" not in r.impl
        ]
        return min(found, key=lambda r: r.us or 0.0, default=None)

    said = []
    for row in rows:
        if row.part != "decode" or not row.impl.startswith("lazyops") or not row.us:
            continue
        peer = best("decode", row.shape, False)
        batch, context = (int(x) for x in row.shape.split(" x "))
        verdicts = []
        if peer:
            verdicts.append(f"{peer.us / row.us:.2f}x the best peer ({peer.impl}) [goal >= 1.0x]")
        if batch * context >= 65536 and row.rate:
            verdicts.append(f"{row.rate * 1e9 / HBM_PEAK * 100:.0f} % of HBM [goal >= 85 %]")
        cudnn = best("decode", row.shape, False, "cuDNN")
        if row.shape == "1 x 8192" and cudnn:
            verdicts.append(f"{cudnn.us / row.us:.2f}x cuDNN [goal >= 2x]")
        said.append(f"decode {row.shape}, {row.impl}: " + ("; ".join(verdicts) or "no peer measured"))
    for row in rows:
        if row.part != "prefill" or not row.impl.startswith("lazyops") or not row.us or "unpaged" in row.impl:
            continue
        if row.shape.startswith("chunked"):
            unpaged = [r for r in rows if r.shape == row.shape and r.impl == row.impl + " unpaged (blocks in order)"]
            if unpaged and unpaged[0].us:
                said.append(
                    f"prefill {row.shape}, {row.impl}: {unpaged[0].us / row.us:.2f}x its unpaged layout [goal >= 0.9x]"
                )
            continue
        peer = best("prefill", row.shape, False, "SDPA")
        if peer:
            said.append(
                f"prefill {row.shape}, {row.impl}: {peer.us / row.us:.2f}x the best SDPA ({peer.impl}) [goal >= 1.0x]"
            )
    return said or ["(no peer measured here)"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.registers:
        registers()
        return 0
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before any Triton kernel module is imported
    import torch

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke (and --out) to check the script on a CPU", file=sys.stderr)
        return 2
    dtype = torch.float32 if args.smoke else torch.bfloat16
    torch.manual_seed(0)
    started = time.perf_counter()
    env = environment(torch, device)
    backends = gpu_backends(torch, args)
    print(f"backends: {', '.join(backends)}; checks", flush=True)
    checked = checks(torch, backends, args, device, dtype)
    rows: list[Row] = []
    print("decode", flush=True)
    rows += decode(torch, backends, args, device, dtype)
    write_report(args.out, env, checked, rows)
    print("prefill", flush=True)
    rows += prefill(torch, backends, args, device, dtype)
    write_report(args.out, env, checked, rows)
    if args.sweep and "triton" in backends:
        print("sweep", flush=True)
        rows += sweep(torch, args, device, dtype)
        write_report(args.out, env, checked, rows)
    print(f"wrote {args.out / 'attention.md'} in {time.perf_counter() - started:.0f} s")
    return 1 if any(check["status"] != "pass" for check in checked) else 0


if __name__ == "__main__":
    sys.exit(main())
