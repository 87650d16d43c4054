"""paged_attention_tl and kv_cache_write_tl beyond the conformance examples: the index values checked on the host
(and nothing written when refused), padding slots, the fp8 cache's round trip, the GQA head mapping, the kernel's
keyword scales and heads-shaped outputs, ``torch.compile(fullgraph=True)``; and for the Triton kernels what a GPU
relies on without checks: launches sized from shapes only (CUDA graphs), out-of-range ids and slots treated as
absent rather than read, and the 3D kernel's split merged exactly however it is cut.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings

from lazyops import testing
from lazyops._errors import KernelInputError
from lazyops.specs import spec
from lazyops.specs._checks import check_call
from lazyops.testing.cases import examples

ATTENTION = spec("paged_attention_tl")
WRITE = spec("kv_cache_write_tl")


def attention_call(
    kernels: Any,
    batch: tuple[tuple[int, int], ...],
    *,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    **options: Any,
) -> tuple[Any, list[Any], Any]:
    """A kernel, the inputs of one call of ``batch`` (``(seq_len, q_len)`` per sequence; shuffled blocks, NaN in the
    unread slots), and its config."""
    args, kwargs = (heads, kv_heads, head_dim, dtype), {"block_size": 4, **options}
    config = ATTENTION.bind(*args, **kwargs)
    tokens = sum(q for _, q in batch)
    geometry = {"batches": (batch,), "shuffle": True, "spare_blocks": 2, "table_fill": "minus_one"}
    inputs = list(examples(ATTENTION).example_inputs(config, tokens, testing.Inputs(seed, kernels.device), geometry))
    return kernels.factory("paged_attention_tl")(*args, **kwargs), inputs, config


def expected_of(config: Any, inputs: list[Any]) -> torch.Tensor:
    return ATTENTION.reference(config, *(t.double() if t.is_floating_point() else t for t in inputs))[0]


# -- the index values, checked on the host -------------------------------------------------------------------------
def spoil(inputs: list[Any], name: str, index: tuple[int, ...], value: int) -> list[Any]:
    spoilt = list(inputs)
    position = ATTENTION.inputs.index(name)
    spoilt[position] = inputs[position].clone()
    spoilt[position][index] = value
    return spoilt


@pytest.mark.parametrize(
    ("name", "index", "value", "message"),
    [
        ("block_table", (1, 0), 1000, "points outside the cache"),
        ("block_table", (0, 1), -1, "points outside the cache"),
        ("seq_lens", (0,), 30, "longer than its block_table row"),
        ("seq_lens", (1,), 2, r"more queries than tokens \(q_len > seq_len\)"),
        ("cu_seqlens_q", (2,), 3, "decreases"),
        ("cu_seqlens_q", (3,), 9, "must run from 0 to the query's"),
    ],
)
def test_bad_index_values_are_refused_on_the_host_and_nothing_is_written(kernels, name, index, value, message):
    if kernels.device != "cpu":
        pytest.skip("on a GPU the index values are read only with validate=True (a synchronising read)")
    kernel, inputs, _ = attention_call(kernels, ((9, 9), (7, 3), (5, 1)))
    inputs = spoil(inputs, name, index, value)
    out = torch.full((13, 4 * 16), float("nan"))
    before = [t.clone() for t in inputs]
    with pytest.raises(KernelInputError, match=message):
        kernel(*inputs[:6], out=out)
    assert out.isnan().all(), "a refused call wrote its output"
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(inputs, before, strict=True))


def test_a_sequence_longer_than_max_seq_len_is_refused(kernels):
    if kernels.device != "cpu":
        pytest.skip("on a GPU the index values are read only with validate=True")
    kernel, inputs, _ = attention_call(kernels, ((9, 1), (6, 1)), max_seq_len=8)
    with pytest.raises(KernelInputError, match="longer than the factory's max_seq_len"):
        kernel(*inputs[:6])


@pytest.mark.parametrize("wrong", ["query heads", "kv heads", "head dim", "batch", "block size", "cache dtype"])
def test_mismatched_shapes_are_refused(kernels, wrong):
    kernel, inputs, _ = attention_call(kernels, ((9, 9), (5, 1)))
    query, key_cache, value_cache, table, lengths, starts = inputs[:6]
    if wrong == "query heads":
        query = query[:, :-16]
    elif wrong == "kv heads":
        key_cache = key_cache[:, :, :1]
    elif wrong == "head dim":
        query = query.view(10, 4, 16)[..., :8]
    elif wrong == "batch":
        lengths = lengths[:1]
    elif wrong == "block size":
        key_cache = key_cache.view(-1, 2, 2, 16)
        value_cache = value_cache.view(-1, 2, 2, 16)
    else:
        key_cache = key_cache.half()
    with pytest.raises(KernelInputError, match="paged_attention_tl"):
        kernel(query, key_cache, value_cache, table, lengths, starts)


def test_slots_past_the_cache_are_refused_on_the_host_and_nothing_is_written(kernels):
    if kernels.device != "cpu":
        pytest.skip("on a GPU the slots are not read on the host (the kernel skips them instead)")
    kernel = kernels.factory("kv_cache_write_tl")(2, 16, torch.float16, block_size=4)
    key, value = torch.randn(3, 32, dtype=torch.float16), torch.randn(3, 32, dtype=torch.float16)
    caches = torch.randn(2, 2, 4, 2, 16, dtype=torch.float16)
    before = caches.clone()
    with pytest.raises(KernelInputError, match=r"slot_mapping\[1\] = 8 lies past the cache's 8 slots"):
        kernel(key, value, caches[0], caches[1], torch.tensor([0, 8, -1]))
    assert torch.equal(caches, before)


# -- the cache write -----------------------------------------------------------------------------------------------
def test_padding_tokens_are_skipped(kernels):
    kernel = kernels.factory("kv_cache_write_tl")(2, 16, torch.bfloat16, block_size=4)
    device = kernels.device
    key = torch.randn(4, 32, dtype=torch.bfloat16, device=device)
    value = torch.randn(4, 2, 16, dtype=torch.bfloat16, device=device)  # heads as their own dimension
    caches = torch.randn(2, 3, 4, 2, 16, dtype=torch.bfloat16, device=device)
    before = caches.clone()
    kernel(key, value, caches[0], caches[1], torch.tensor([-1, 5, -1, 11], device=device))
    assert torch.equal(caches[0].view(12, 32)[[5, 11]], key[[1, 3]])
    assert torch.equal(caches[1].view(12, 2, 16)[[5, 11]], value[[1, 3]])
    untouched = [slot for slot in range(12) if slot not in (5, 11)]
    assert torch.equal(caches.view(2, 12, 32)[:, untouched], before.view(2, 12, 32)[:, untouched])
    kernel(key, value, caches[0], caches[1], torch.full((4,), -1, device=device))  # all padding: nothing written
    assert torch.equal(caches.view(2, 12, 32)[:, untouched], before.view(2, 12, 32)[:, untouched])


def test_the_fp8_cache_round_trips_through_attention(kernels):
    """Keys and values written into an fp8 cache with their scales, then attended: the output is the reference's
    over the dequantised cache, and a value past 448 * scale is stored saturated, not as NaN."""
    device = kernels.device
    fp8 = torch.float8_e4m3fn
    write = kernels.factory("kv_cache_write_tl")(2, 16, torch.float16, block_size=4, cache_dtype=fp8)
    attention = kernels.factory("paged_attention_tl")(4, 2, 16, torch.float16, block_size=4, cache_dtype=fp8)
    generator = torch.Generator().manual_seed(3)
    key = (torch.randn(10, 2, 16, generator=generator) * 3).half().to(device)
    value = (torch.randn(10, 2, 16, generator=generator) * 3).half().to(device)
    key[0, 0, 0] = 1000.0  # 1000 / 0.5 saturates at 448
    caches = torch.zeros(2, 4, 4, 2, 16, dtype=fp8, device=device)
    k_scale = torch.tensor([0.5], device=device)
    v_scale = torch.tensor([0.25], device=device)
    slots = torch.tensor([12, 13, 14, 15, 4, 5, 6, 7, 0, 1], device=device)  # blocks 3, 1, 0: shuffled
    write(key, value, caches[0], caches[1], slots, k_scale=k_scale, v_scale=v_scale)
    assert caches[0].view(-1, 2, 16)[12, 0, 0].float() == 448.0
    table = torch.tensor([[3, 1, 0]], dtype=torch.int32, device=device)
    lengths = torch.tensor([10], dtype=torch.int32, device=device)
    starts = torch.tensor([0, 3], dtype=torch.int32, device=device)
    query = torch.randn(3, 64, generator=generator).half().to(device)
    out = attention(query, caches[0], caches[1], table, lengths, starts, k_scale=k_scale, v_scale=v_scale)
    config = ATTENTION.bind(4, 2, 16, torch.float16, block_size=4, cache_dtype=fp8)
    assert config.scale == 0.25
    (expected,) = ATTENTION.reference(
        config,
        query.double(),
        caches[0].double(),
        caches[1].double(),
        table,
        lengths,
        starts,
        k_scale.double(),
        v_scale.double(),
    )
    testing.check_close(out, expected, torch.float16)
    with pytest.raises(KernelInputError, match="an fp8 cache needs k_scale"):
        attention(query, caches[0], caches[1], table, lengths, starts)


def test_scales_are_refused_without_an_fp8_cache(kernels):
    kernel, inputs, _ = attention_call(kernels, ((5, 1),))
    scale = torch.ones(1, device=kernels.device)
    with pytest.raises(KernelInputError, match="scales apply to an fp8 cache only"):
        kernel(*inputs[:6], k_scale=scale, v_scale=scale)


# -- the attention -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("group", [1, 4, 8])
def test_query_head_h_reads_kv_head_h_over_the_group(kernels, group):
    """Every key alike (uniform weights) and kv head j's values all j: query head h's output is h // group."""
    kv_heads = 2
    kernel = kernels.factory("paged_attention_tl")(group * kv_heads, kv_heads, 16, torch.float32, block_size=4)
    device = kernels.device
    key_cache = torch.zeros(3, 4, kv_heads, 16, device=device)
    value_cache = (
        torch.arange(kv_heads, dtype=torch.float32, device=device)
        .view(1, 1, kv_heads, 1)
        .expand(3, 4, kv_heads, 16)
        .contiguous()
    )
    query = torch.randn(2, group * kv_heads, 16, device=device)
    table = torch.tensor([[2, 0, 1]], dtype=torch.int32, device=device)
    out = kernel(
        query,
        key_cache,
        value_cache,
        table,
        torch.tensor([11], dtype=torch.int32, device=device),
        torch.tensor([0, 2], dtype=torch.int32, device=device),
    )
    assert out.shape == query.shape
    heads = torch.arange(group * kv_heads, device=device) // group
    torch.testing.assert_close(out, heads.float().view(1, -1, 1).expand_as(out))


def test_a_heads_shaped_out_with_strided_rows_is_written_in_place(kernels):
    kernel, inputs, config = attention_call(kernels, ((9, 4), (6, 1)), dtype=torch.float16)
    query = inputs[0].view(5, 4, 16)
    buffer = torch.full((5, 6, 16), 7.0, dtype=torch.float16, device=kernels.device)
    out = buffer[:, 1:5]
    assert kernel(query, *inputs[1:6], out=out) is out
    testing.check_close(out.reshape(5, -1), expected_of(config, inputs), torch.float16)
    assert (buffer[:, 0] == 7).all() and (buffer[:, 5] == 7).all(), "written outside out"


def test_an_empty_batch_returns_an_empty_output(kernels):
    kernel, inputs, _ = attention_call(kernels, ())
    assert inputs[3].shape[0] == 0 and inputs[0].shape[0] == 0
    assert kernel(*inputs[:6]).shape == (0, 64)


def test_a_call_compiles_fullgraph_and_matches_eager(kernels):
    """What an engine's step compiles: the new tokens' keys and values written into the cache (in place), then
    attention over it into a preallocated output, under ``torch.compile(fullgraph=True)``."""
    device = kernels.device
    write = kernels.factory("kv_cache_write_tl")(2, 16, torch.float32, block_size=4)
    attention = kernels.factory("paged_attention_tl")(4, 2, 16, torch.float32, block_size=4)

    def step(qkv, caches, slots, table, lengths, starts, out):
        write(qkv[:, 64:96], qkv[:, 96:], caches[0], caches[1], slots)
        attention(qkv[:, :64], caches[0], caches[1], table, lengths, starts, out=out)
        return out * 2

    generator = torch.Generator().manual_seed(0)

    def inputs() -> list[torch.Tensor]:
        return [
            torch.randn(3, 128, generator=generator).to(device),
            torch.randn(2, 4, 4, 2, 16, generator=generator).to(device),
            torch.tensor([9, 10, 3], device=device),
            torch.tensor([[1, 2, 3], [0, 3, 3]], dtype=torch.int32, device=device),
            torch.tensor([11, 4], dtype=torch.int32, device=device),
            torch.tensor([0, 2, 3], dtype=torch.int32, device=device),
            torch.empty(3, 64, device=device),
        ]

    args = inputs()
    eager_args = [t.clone() for t in args]
    with torch.inference_mode():
        expected = step(*eager_args)
        got = torch.compile(step, fullgraph=True)(*args)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(args[1], eager_args[1])  # the cache written in place by the compiled graph


def test_a_call_exports(kernels):
    """``torch.export``: both kernels are operators of the exported graph (an absent scale an empty tensor), and the
    exported program writes the cache and attends as the eager call does."""
    device = kernels.device
    write = kernels.factory("kv_cache_write_tl")(2, 16, torch.float32, block_size=4)
    attention = kernels.factory("paged_attention_tl")(4, 2, 16, torch.float32, block_size=4)

    class Step(torch.nn.Module):
        def forward(self, qkv, caches, slots, table, lengths, starts):
            write(qkv[:, 64:96], qkv[:, 96:], caches[0], caches[1], slots)
            return attention(qkv[:, :64], caches[0], caches[1], table, lengths, starts)

    generator = torch.Generator().manual_seed(1)
    args = [
        torch.randn(3, 128, generator=generator),
        torch.randn(2, 4, 4, 2, 16, generator=generator),
        torch.tensor([9, 10, 3]),
        torch.tensor([[1, 2, 3], [0, 3, 3]], dtype=torch.int32),
        torch.tensor([11, 4], dtype=torch.int32),
        torch.tensor([0, 2, 3], dtype=torch.int32),
    ]
    args = [arg.to(device) for arg in args]
    exported = torch.export.export(Step(), tuple(arg.clone() for arg in args))
    names = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    backend = f"lazyops_{kernels.backend}"
    assert {f"{backend}.kv_cache_write.default", f"{backend}.paged_attention.default"} <= names, names
    eager_args, exported_args = [a.clone() for a in args], [a.clone() for a in args]
    with torch.inference_mode():
        expected = Step()(*eager_args)
    torch.testing.assert_close(exported.module()(*exported_args), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(exported_args[1], eager_args[1])


def test_meta_tensors_are_checked_without_reading_values(kernels):
    if kernels.backend != "torch":
        pytest.skip("only the torch backend takes meta tensors")
    config = ATTENTION.bind(4, 2, 16, torch.float32, block_size=4)
    meta = [
        torch.empty(3, 64, device="meta"),
        torch.empty(5, 4, 2, 16, device="meta"),
        torch.empty(5, 4, 2, 16, device="meta"),
        torch.empty(2, 3, dtype=torch.int32, device="meta"),
        torch.empty(2, dtype=torch.int32, device="meta"),
        torch.empty(3, dtype=torch.int32, device="meta"),
        None,
        None,
    ]
    check_call(ATTENTION, config, *meta)  # shapes only: a meta tensor has no values to read


# -- what a GPU relies on: the Triton kernels without checks ---------------------------------------------------------
@pytest.fixture
def triton_kernels(kernels: Any) -> Any:
    if kernels.backend != "triton":
        pytest.skip("the Triton kernels' launches")
    return kernels


def test_the_launch_is_sized_from_shapes_only(triton_kernels, monkeypatch):
    """A CUDA graph replays what its capture launched: the grids, the scalar arguments and the workspace's size of
    calls with the same shapes and different lengths, tables and query offsets are the same."""
    from lazyops._backends.triton import paged_attention as triton_attention
    from lazyops._backends.triton._launch import Launcher

    _, inputs, config = attention_call(triton_kernels, ((40, 1), (9, 1), (3, 1)))
    device = triton_kernels.device
    variants = [
        (inputs[3], inputs[4], inputs[5]),
        (inputs[3].flip(0), torch.tensor([3, 40, 9], dtype=torch.int32), torch.tensor([0, 1, 2, 3], dtype=torch.int32)),
        (inputs[3], torch.tensor([12, 30, 1], dtype=torch.int32), torch.tensor([0, 0, 2, 3], dtype=torch.int32)),
    ]
    launch = triton_attention.build_attention(config, segments=4)  # the split kernel and its merge, as on a GPU
    out = torch.empty(3, 64, device=device)
    seen = []
    for table, lengths, starts in variants:
        launches: list[tuple[Any, ...]] = []
        allocated: list[tuple[int, ...]] = []
        real_call, real_empty = Launcher.__call__, torch.empty

        def recording(self: Any, grid: tuple[int, ...], *args: Any, real_call: Any = real_call, into: Any = launches):
            into.append((grid, tuple(a for a in args if not isinstance(a, torch.Tensor))))
            real_call(self, grid, *args)

        def empty(*args: Any, real_empty: Any = real_empty, into: Any = allocated, **kwargs: Any) -> torch.Tensor:
            made = real_empty(*args, **kwargs)
            into.append(tuple(made.shape))
            return made

        with monkeypatch.context() as patch:
            patch.setattr(Launcher, "__call__", recording)
            patch.setattr(torch, "empty", empty)
            launch(
                inputs[0],
                inputs[1],
                inputs[2],
                table.to(device),
                lengths.to(device),
                starts.to(device),
                *inputs[6:],
                out,
            )
        seen.append((launches, allocated))
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][0][0][0][2] > 1 and len(seen[0][0]) == 2, "a three-token batch takes the split kernel and merge"
    assert len(seen[0][1]) == 1, "one workspace"


def test_plans_depend_on_shapes_and_the_factory_only():
    """The tiles and the split from the call's shapes (tokens, batch, the block table's width), the factory's
    arguments and the SM count: a decode step splits its keys until the busy programs reach the table's programs
    an SM, never into segments shorter than its minimum at the longest sequence the call can hold."""
    from lazyops._backends.triton.paged_attention import DEFAULT_TABLE, Tiles, plan

    rule = DEFAULT_TABLE.split
    config = ATTENTION.bind(32, 8, 128, torch.bfloat16, block_size=16)
    decode = plan(config, 1, 1, 2048, 132)
    assert decode.tiles == DEFAULT_TABLE.decode[128] and decode.block_q == 4 and decode.query_blocks == 1 // 4 + 1
    fill = rule.programs_per_sm * 132 // 8  # busy programs of one sequence: its 8 kv heads
    assert decode.segments == min(1 << (fill.bit_length() - 1), rule.max_segments)
    # the table's width bounds the keys as max_seq_len does: a 1024-key row splits no finer than the minimum allows
    assert plan(config, 1, 1, 64, 132).segments == min(decode.segments, 1024 // rule.min_segment_keys)
    short = dataclasses.replace(config, max_seq_len=1024)
    assert plan(short, 1, 1, 2048, 132).segments == plan(config, 1, 1, 64, 132).segments
    # more sequences, fewer segments each; a batch that fills the GPU, and a prefill, not split at all
    assert plan(config, 16, 16, 2048, 132).segments < decode.segments
    assert plan(config, 256, 256, 2048, 132).segments == 1
    prefill = plan(config, 8192, 1, 512, 132)
    assert prefill.segments == 1 and prefill.tiles.block_m == 128 and prefill.block_q == 32
    assert plan(config, 8192, 1, 512, 132, tiles=Tiles(64, 32, 4, 2)).block_q == 16
    assert plan(config, 8192, 1, 512, 132, segments=8).segments == 1, "a forced split applies to decode-like calls"
    assert plan(config, 16, 16, 2048, 132, segments=8).segments == 8
    wide = ATTENTION.bind(16, 1, 64, torch.bfloat16, block_size=16)  # a group wider than 16 rows
    assert plan(wide, 1, 1, 8, 132).tiles.block_m == 16
    wider = ATTENTION.bind(32, 1, 64, torch.bfloat16, block_size=16)
    assert plan(wider, 1, 1, 8, 132).tiles.block_m == 32 and plan(wider, 1, 1, 8, 132).block_q == 1


def test_a_device_not_in_the_table_takes_the_default_fitted_to_its_shared_memory():
    """A GPU the table does not name plans with the default table's tiles, its split from its own SM count, and
    its stages cut to what its shared memory holds (99 KiB: an sm_89)."""
    from lazyops._backends.triton.paged_attention import DEFAULT_TABLE, attention_table, fitted, plan, shared_bytes

    assert attention_table("NVIDIA GeForce RTX 4090") == DEFAULT_TABLE == attention_table(None)
    config = ATTENTION.bind(32, 8, 128, torch.bfloat16, block_size=16)
    assert plan(config, 1, 1, 2048, 16).segments < plan(config, 1, 1, 2048, 132).segments
    for tiles in (*DEFAULT_TABLE.prefill.values(), *DEFAULT_TABLE.decode.values()):
        small = fitted(tiles, 128, 2, 99 * 1024)
        assert shared_bytes(small, 128, 2) <= 99 * 1024 and small.block_m == tiles.block_m
        assert small.num_stages >= 2 and small.tile_n >= 16
        assert fitted(tiles, 128, 2, 227 * 1024) == tiles
    prefill = DEFAULT_TABLE.prefill[128]
    assert shared_bytes(prefill, 128, 2) > 99 * 1024 and fitted(prefill, 128, 2, 99 * 1024) != prefill


#: Compiles the Triton attention kernel for sm_90a on the host (Triton's own compiler and ptxas, no GPU) and prints,
#: for a tiling given as argv, its shared memory, registers, stack (spills) and whether its products are wgmma.
SM90_COMPILE = r"""
import json, os, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import compiler
from triton.compiler import ASTSource
from lazyops._backends.triton import paged_attention as attention
block_m, tile_n, warps, stages = map(int, sys.argv[1:])
kernel = attention._attention_kernel
const = dict(HEADS=32, KV_HEADS=8, GROUP=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_SIZE=16, BLOCK_M=block_m,
             BLOCK_Q=block_m // 4, TILE_N=tile_n, WINDOW=0, SOFTCAP=False, FP8=False, SEGMENTS=1, UPCAST=False,
             IEEE=False)
pointers = {"block_table_ptr": "*i32", "seq_lens_ptr": "*i32", "cu_seqlens_ptr": "*i32"}
sig = {}
for name in kernel.arg_names:
    if name in const:
        sig[name] = "constexpr"
    elif name.endswith("_ptr"):
        sig[name] = pointers.get(name, "*fp32" if "partial" in name or "scale" in name else "*bf16")
    else:
        sig[name] = "fp32" if name in ("scale", "softcap") else "i32"
aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kernel.arg_names) if n.endswith(("_ptr", "stride"))}
source = ASTSource(kernel, sig, const, aligned)
built = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as file:
    file.write(built.asm["cubin"])
tool = os.path.join(os.path.dirname(compiler.__file__), "bin", "cuobjdump")
usage = subprocess.run([tool, "-res-usage", file.name], capture_output=True, text=True, check=True).stdout
fields = dict(item.split(":", 1) for line in usage.splitlines() if "REG:" in line for item in line.split())
print(json.dumps({"shared": built.metadata.shared, "registers": int(fields["REG"]), "stack": int(fields["STACK"]),
                  "wgmma": "wgmma.mma_async" in built.asm["ptx"]}))
"""


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_the_tables_tiles_keep_the_next_keys_in_flight_on_sm90(kind):
    """The table's tile for head dim 128, compiled for sm_90a on the host: no spill, the shared memory of two key
    and value buffers (:func:`shared_bytes` at 3 stages: the block ids read a tile ahead let Triton's pipeliner
    load the next tile while this one is computed; read in the same iteration, the kernel took one buffer), and
    the prefill tile's products on wgmma."""
    pytest.importorskip("triton.backends.nvidia")
    from lazyops._backends.triton.paged_attention import DEFAULT_TABLE, shared_bytes

    tiles = (DEFAULT_TABLE.decode if kind == "decode" else DEFAULT_TABLE.prefill)[128]
    root = Path(__file__).resolve().parents[2]
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    tiling = [str(value) for value in (tiles.block_m, tiles.tile_n, tiles.num_warps, tiles.num_stages)]
    result = subprocess.run(
        [sys.executable, "-c", SM90_COMPILE, *tiling], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    built = json.loads(result.stdout.splitlines()[-1])
    assert tiles.num_stages >= 3 and built["stack"] == 0, built
    assert abs(built["shared"] - shared_bytes(tiles, 128, 2)) <= 4096, built
    assert built["wgmma"] == (kind == "prefill"), built


def test_ids_outside_the_cache_are_absent_keys_not_reads(triton_kernels):
    """Unchecked (a GPU without validate=True), a block id outside the cache is a block of missing keys: the
    query attends the rest, nothing is read out of bounds."""
    from lazyops._backends.triton.paged_attention import build_attention

    _, inputs, config = attention_call(triton_kernels, ((12, 1),), head_dim=16)
    table = inputs[3].clone()
    table[0, 1] = 10**6  # keys 4..7
    out = torch.empty(1, 64, device=triton_kernels.device)
    build_attention(config)(inputs[0], inputs[1], inputs[2], table, *inputs[4:], out)
    keep = [0, 1, 2, 3, 8, 9, 10, 11]
    blocks = inputs[3][0].long()
    keys = inputs[1][blocks].view(-1, 2, 16)[keep].double()
    values = inputs[2][blocks].view(-1, 2, 16)[keep].double()
    query = inputs[0].view(4, 16).double()
    logits = torch.einsum("hd,khd->hk", query, keys.repeat_interleave(2, dim=1)) * config.scale
    expected = torch.einsum("hk,khd->hd", logits.softmax(-1), values.repeat_interleave(2, dim=1))
    testing.check_close(out.view(4, 16), expected, torch.float32)


def test_slots_outside_the_cache_are_skipped_not_written(triton_kernels):
    """Unchecked (a GPU), a slot past the cache is skipped as a padding token is, not written out of bounds."""
    from lazyops._backends.triton.kv_cache_write import build_write

    write = build_write(WRITE.bind(2, 16, torch.float32, block_size=4))
    device = triton_kernels.device
    key, value = torch.randn(3, 32, device=device), torch.randn(3, 32, device=device)
    caches = torch.randn(2, 2, 4, 2, 16, device=device)
    before = caches.clone()
    slots = torch.tensor([8, 3, 2**40], device=device)  # 8 slots: 8 and 2**40 are past them
    write(key, value, caches[0], caches[1], slots, None, None)
    assert torch.equal(caches.view(2, 8, 32)[:, 3], torch.stack([key[1], value[1]]))
    others = [0, 1, 2, 4, 5, 6, 7]
    assert torch.equal(caches.view(2, 8, 32)[:, others], before.view(2, 8, 32)[:, others])


def test_any_split_of_the_keys_merges_exactly(triton_kernels):
    """The 3D kernel's segments and tiles forced small (many segments over few keys, some empty): the merge gives
    the reference's output whatever the cut."""
    from lazyops._backends.triton.paged_attention import Tiles, build_attention

    @settings(max_examples=6, deadline=None)
    @given(case=examples(ATTENTION).cases())
    def check(case: testing.Case) -> None:
        config = ATTENTION.bind(*case.args, **case.kwargs)
        launch = build_attention(config, tiles=Tiles(16, 16, 4, 1), segments=8)
        for tokens in case.tokens:
            draw = testing.Inputs(case.seed, triton_kernels.device)
            inputs = list(examples(ATTENTION).example_inputs(config, tokens, draw, case.geometry))
            if not tokens:
                continue
            width = config.num_heads * config.head_dim
            out = torch.full((tokens, width), float("nan"), dtype=config.dtype, device=triton_kernels.device)
            launch(*inputs, out)
            testing.check_close(out, expected_of(config, inputs), config.dtype)

    check()


def test_the_gpu_script_runs_on_the_host(tmp_path):
    """``benchmarks/bench_attention.py --smoke``: its checks, decode, prefill and sweep (split counts, the decode and
    prefill tiles) on tiny shapes, on the CPU (torch and Triton's interpreter), writing both result files."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "TRITON_INTERPRET": "1"}
    script = [sys.executable, str(root / "benchmarks" / "bench_attention.py")]
    command = [*script, "--smoke", "--device", "cpu", "--sweep", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    payload = json.loads((tmp_path / "attention.json").read_text())
    assert payload["environment"]["command"].endswith(f"--out {tmp_path}") and payload["environment"]["commit"]
    checks = [row for row in payload["rows"] if row["part"] == "check"]
    assert {row["backend"] for row in checks} == {"torch", "triton"} and {row["status"] for row in checks} == {"pass"}
    timed = {(row["part"], row["impl"].split()[0]) for row in payload["rows"] if row.get("us")}
    assert {("decode", "lazyops"), ("decode", "SDPA"), ("prefill", "lazyops"), ("sweep", "SDPA")} <= timed
    swept = {row["impl"] for row in payload["rows"] if row["part"] == "sweep" and row.get("us")}
    assert {"triton split 1", "triton split 2", "triton 16x64 w4 s3", "triton 128x64 w8 s3"} <= swept
    assert not [row for row in payload["rows"] if row.get("error")]
    assert "## The issue's goals" in (tmp_path / "attention.md").read_text()


def test_the_h100s_split_rule_takes_what_its_sweep_measured_fastest():
    """benchmarks/results/h100/attention.md (2026-12-06), decode over 1024 keys: split 16 at batch 1 (6.3 µs, against
    8.6 at the H200 rule's 4) and 8 at batch 4 (10.0 µs against 10.9); 16 x 1024 unchanged. Long sequences
    (2026-12-07's sweep, decision 010): 64 x 8192 split 2 (710.0 µs against 764.8 unsplit), 64 x 32768 split 4
    (2,755.7 against 3,124.0), 16 x 32768 split 8 (706.7 against 738.8 at the fill rule's 2); 256 sequences, which
    fill the GPU 15 times over, stay unsplit."""
    from lazyops._backends.triton.paged_attention import attention_table, plan

    table = attention_table("NVIDIA H100 80GB HBM3")
    config = ATTENTION.bind(32, 8, 128, torch.bfloat16, block_size=16, max_seq_len=1024)
    assert [plan(config, b, b, 64, 132, table).segments for b in (1, 4, 16, 64)] == [16, 8, 2, 1]
    longer = ATTENTION.bind(32, 8, 128, torch.bfloat16, block_size=16, max_seq_len=8192)
    assert [plan(longer, b, b, 512, 132, table).segments for b in (1, 4, 16, 64, 256)] == [32, 8, 2, 2, 1]
    longest = ATTENTION.bind(32, 8, 128, torch.bfloat16, block_size=16, max_seq_len=32768)
    assert [plan(longest, b, b, 2048, 132, table).segments for b in (1, 4, 16, 64, 256)] == [32, 8, 8, 4, 1]
