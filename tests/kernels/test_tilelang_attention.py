"""The TileLang attention kernels of issue 29: ``paged_attention_tl`` and ``kv_cache_write_tl``.

On a CPU (CI): every program lowers to CUDA for Hopper (sm_90a) over the configurations that matter (head sizes 64,
128 and 256; GQA 1, 4, 8 and a group wider than a tile; window and soft-cap; an fp8 cache; the prefill, decode and
split programs and the merge), and the source shows what the design relies on: both products on ``wgmma``, keys
and values gathered by 16-byte ``cp.async`` copies that zero-fill an absent block instead of reading it,
double-buffered, 64-bit cache offsets, and a grid sized from shapes only (CUDA-graph safe). The index arithmetic
the programs share with the launch (row blocks, split shares), the launch plan and the factory's refusals run on
plain ints. On a GPU (marked ``gpu``): both kernels, built for a few shapes, against float32 torch.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, replace

import pytest

tilelang = pytest.importorskip("tilelang")

import torch  # noqa: E402
from tvm.target import Target  # noqa: E402

from lazyops._backends.tilelang import kv_cache_write, paged_attention  # noqa: E402
from lazyops._backends.tilelang.paged_attention import (  # noqa: E402
    DECODE_TILES,
    MIN_TILES_PER_SPLIT,
    PREFILL_TILES,
    PROGRAMS_PER_SM,
    STAGES,
    Packing,
    first_row_block,
    plan_launch,
    row_blocks,
    split_share,
)
from lazyops._errors import KernelInputError  # noqa: E402

HOPPER = {"kind": "cuda", "arch": "sm_90a"}
FP8 = torch.float8_e4m3fn
#: Hopper's shared memory a block may use, and half an SM's (two programs resident).
SHARED_LIMIT = 227 * 1024
HALF_SM = 228 * 1024 // 2


@dataclass(frozen=True)
class AttentionConfig:
    """The contract's ``PagedAttentionConfig`` (ATTENTION.md), as the factory hands it to the launch."""

    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    dtype: torch.dtype = torch.bfloat16
    block_size: int = 16
    max_seq_len: int = 32768
    scale: float = 128**-0.5
    sliding_window: int = 0
    softcap: float = 0.0
    cache_dtype: torch.dtype = torch.bfloat16
    validate: bool = False
    label: str = "paged_attention_tl(test)"


@dataclass(frozen=True)
class KVConfig:
    """The contract's ``KVCacheWriteConfig``."""

    num_kv_heads: int = 8
    head_dim: int = 128
    dtype: torch.dtype = torch.bfloat16
    block_size: int = 16
    cache_dtype: torch.dtype = torch.bfloat16
    label: str = "kv_cache_write_tl(test)"


def lower(program) -> tuple[str, str]:
    """The device kernel's CUDA source for sm_90a, and the host function's script (it shows the launch grid)."""
    target = Target(HOPPER)
    with target:
        artifact = tilelang.lower(program, target=target)
    assert "__global__" in artifact.kernel_source
    return artifact.kernel_source, artifact.host_mod.script()


def signature(source: str) -> str:
    start = source.index("__global__")
    return source[start : source.index("{", start)]


def launch_grid(host: str) -> str:
    """The grid and block arguments of the host's kernel launch (after the kernel's own arguments)."""
    (call,) = re.findall(r'T\.call_packed\("main_kernel", (.*)\)', host)
    return call


# --- paged attention: the lowered programs ---------------------------------------------------------------------

#: (config, variant of ``programs``): each lowered once. Together: head sizes 64/128/256, groups 1/4/8/128, float16
#: and bfloat16, window, soft-cap, fp8, and all three attention programs.
ATTENTION_CASES = {
    "decode-d128-gqa4": (AttentionConfig(), "decode"),
    "split-d128-gqa4": (AttentionConfig(), "split"),
    "prefill-d128-gqa4-window-softcap": (AttentionConfig(sliding_window=4096, softcap=50.0), "prefill"),
    "prefill-d64-mha-fp16": (
        AttentionConfig(8, 8, 64, torch.float16, scale=0.125, cache_dtype=torch.float16),
        "prefill",
    ),
    "split-d64-gqa8-fp8": (
        AttentionConfig(16, 2, 64, torch.float16, scale=0.125, cache_dtype=FP8, block_size=32),
        "split",
    ),
    "prefill-d256-gqa8-fp8": (AttentionConfig(32, 4, 256, scale=1 / 16, cache_dtype=FP8), "prefill"),
    "decode-d256-mha-window": (AttentionConfig(8, 8, 256, scale=1 / 16, sliding_window=1024), "decode"),
    "decode-mqa-group-wider-than-a-tile": (AttentionConfig(128, 1, 128), "decode"),
}


@functools.cache
def lowered_attention(case: str) -> tuple[str, str]:
    config, variant = ATTENTION_CASES[case]
    return lower(paged_attention.programs(config)[variant]())


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_program_lowers_to_the_designed_kernel(case: str) -> None:
    config, variant = ATTENTION_CASES[case]
    tile = (PREFILL_TILES if variant == "prefill" else DECODE_TILES)[config.head_dim]
    split = variant == "split"
    source, host = lowered_attention(case)
    kernel = signature(source)
    fp8 = config.cache_dtype is FP8

    # Every size that varies between calls is a kernel parameter: one binary for any batch, length and cache.
    for size in ("int M", "int B", "int Hk", "int NB", "int MB", "int64_t q_stride", "int table_stride"):
        assert size in kernel, f"{size} must be a run-time size"
    # Row strides in 64 bits: TileLang narrows a stride to its declared type, unchecked, so rows 2**31 elements
    # apart wrapped on an H200 (found by lazyops.testing.check_large_offsets).
    assert ("int64_t o_stride" in kernel) == (not split)
    # The values are run-time arguments (the device kernel takes those its code reads).
    assert "float scale" in kernel
    assert ("float softcap" in kernel) == bool(config.softcap)
    assert ("int window" in kernel) == bool(config.sliding_window)
    assert ("int S" in kernel) == split
    assert (" partial_out" in kernel and " partial_lse" in kernel) == split
    assert (" out," in kernel or " out)" in kernel) != split
    assert ("k_scale" in kernel and "v_scale" in kernel) == fp8, "the fp8 scales are read from memory, every launch"
    cache = "fp8_e4_t" if fp8 else {torch.bfloat16: "bfloat16_t", torch.float16: "half_t"}[config.dtype]
    for name in ("key_cache", "value_cache"):
        assert f"const {cache}* __restrict__ {name}" in kernel, f"{name} must be its own {cache} parameter"
    assert f"__launch_bounds__({tile.threads}" in source

    # Both products on Hopper's tensor cores: Q K^T from shared memory, P V with P in registers.
    operand = {torch.bfloat16: "kBFloat16", torch.float16: "kFloat16"}[config.dtype]
    assert re.search(rf"wgmma_ss<tl::DataType::{operand}, tl::DataType::{operand}, tl::DataType::kFloat32", source)
    assert re.search(rf"wgmma_rs<tl::DataType::{operand}, tl::DataType::{operand}, tl::DataType::kFloat32", source)

    # Keys and values gathered through the block table by 16-byte cp.async copies; an absent key's copy has a false
    # predicate (a zero-fill that reads nothing) rather than an address outside the cache; the offsets are 64-bit.
    gathers = [line for line in source.splitlines() if "cp_async_gs_conditional<16>" in line]
    for name in ("key_cache", "value_cache"):
        copies = [line for line in gathers if f"(&({name}[" in line]
        assert copies, f"{name} must be gathered by cp.async"
        for line in copies:
            assert re.search(r"\(\(int64_t\)block\w*\) \* \(", line), "the cache offset must be 64-bit"
            assert re.search(r"\(\(block\w* < NB\) && \(0 <= block\w*\)\)\);$", line), "must zero-fill absent blocks"
    if fp8:
        assert all("_staged)" in line for line in gathers), "fp8 keys and values are staged as loaded"
        assert "__tl_cvt_fp8x2_to_float2" in source, "and converted in shared memory"
    # Double-buffered: the next tile's copies in flight while the current one is computed.
    assert "cp_async_wait<1>" in source
    assert f"cp_async_wait<{STAGES}>" not in source

    assert ("tanhf" in source) == bool(config.softcap)
    # The grid: row blocks from M and B, kv heads (and chunks of a wide group), splits from S; no index value.
    grid = launch_grid(host)
    assert "[" not in grid, f"the grid must come from shapes only, not from tensor values: {grid}"
    assert ("S" in re.split(r"\W+", grid)) == split


def test_configurations_differing_in_values_only_share_their_programs() -> None:
    """TileLang's compile cache is keyed by a program's text: the scale, the window and soft-cap values and the kv
    head count are run-time values, so configurations differing only there compile once (the conformance kit draws
    many of them, and every compile costs the GPU session tens of seconds)."""
    base = AttentionConfig(sliding_window=64, softcap=30.0)
    variants = [
        base,
        replace(base, num_heads=8, num_kv_heads=2),
        replace(base, scale=0.5, sliding_window=7, softcap=1.5),
        replace(base, max_seq_len=1024),
    ]
    for variant in ("prefill", "decode", "split", "merge"):
        texts = {paged_attention.programs(config)[variant]().script() for config in variants}
        assert len(texts) == 1, f"{variant}: the values are compiled in"
    assert (
        paged_attention.programs(base)["decode"]().script()
        != paged_attention.programs(replace(base, sliding_window=0))["decode"]().script()
    ), "a window that is off costs the mask nothing: that is compiled in"


@pytest.mark.parametrize("head_dim", [64, 128])
def test_merge_program_folds_the_shares_in_parallel_groups(head_dim: int) -> None:
    source, host = lower(paged_attention.merge_program(head_dim, "bfloat16"))
    kernel = signature(source)
    for size in ("int M", "int H", "int S", "int64_t o_stride"):
        assert size in kernel
    groups, unroll = paged_attention.MERGE_GROUPS, paged_attention.MERGE_UNROLL
    assert f"__launch_bounds__({head_dim}" in source
    assert f"for (int u = 0; u < {unroll}; ++u)" in source, "shares loaded back to back, not one round trip each"
    assert f"tl::AllReduce<tl::MaxOp, {head_dim}, {head_dim // groups}" in source, "the groups' maxima combined"
    lines = source.splitlines()
    loads = [n for n, line in enumerate(lines) if "partial_out[" in line]
    assert loads and all(any("< exp2f(" in line for line in lines[n - 4 : n]) for n in loads), (
        "a share is read only where its weight is positive: an empty split's output is never written"
    )
    assert "[" not in launch_grid(host)


# --- the KV-cache write: the lowered program -------------------------------------------------------------------

KV_CASES = {
    "bf16-8x128": KVConfig(),
    "fp8-8x128": KVConfig(cache_dtype=FP8),
    "fp16-1x64-block32": KVConfig(1, 64, torch.float16, block_size=32, cache_dtype=torch.float16),
}


@pytest.mark.parametrize("case", KV_CASES)
def test_kv_cache_write_lowers_to_one_guarded_vector_copy_a_token(case: str) -> None:
    config = KV_CASES[case]
    (program,) = kv_cache_write.programs(config).values()
    source, host = lower(program())
    kernel = signature(source)
    fp8 = config.cache_dtype is FP8
    for size in ("int M", "int NB", "int64_t key_stride", "int64_t value_stride"):
        assert size in kernel
    assert "const int64_t* __restrict__ slot_mapping" in kernel
    # The slot read once a token and tested against both ends before anything is written.
    assert source.count("slot_mapping[") == 1
    bound = rf"\(\(\(int64_t\)0 <= slot\) && \(slot < \(\(\(int64_t\)NB\) \* \(int64_t\){config.block_size}\)\)\)"
    assert re.search(bound, source), "a negative slot (padding) and a slot past the cache are skipped"
    # 64-bit cache offsets: slot * Hk * D.
    assert f"slot * (int64_t){config.num_kv_heads * config.head_dim}" in source
    if fp8:
        assert "__NV_SATFINITE" in source and "__NV_E4M3" in source, "the hardware conversion saturates at ±448"
        assert "k_scale[0]" in source and "v_scale[0]" in source
    elif config.num_kv_heads * config.head_dim >= 1024:
        assert source.count("*(uint4*)(") >= 4, "keys and values copied in 16-byte vectors"
    assert "[" not in launch_grid(host)


# --- the index arithmetic, on plain ints -----------------------------------------------------------------------


@pytest.mark.parametrize("block_tokens", [1, 2, 3, 16])
def test_row_blocks_give_every_sequence_its_own_blocks_inside_the_grid(block_tokens: int) -> None:
    """Sequence b's queries take row blocks first_row_block(b) .. + ceil(q_b / tokens) - 1: after the previous
    sequence's, and before row_blocks(M, B): the grid covers every ragged batch, whatever its lengths."""
    for lengths in itertools.product(range(0, 6), repeat=3):
        starts = [0, *itertools.accumulate(lengths)]
        grid = row_blocks(starts[-1], len(lengths), block_tokens)
        firsts = [first_row_block(starts[b], b, block_tokens) for b in range(len(lengths))]
        assert firsts == sorted(set(firsts)), "strictly increasing: the binary search finds one sequence"
        end = 0
        for b, length in enumerate(lengths):
            assert firsts[b] >= end
            end = firsts[b] + -(-length // block_tokens)
        assert end <= grid


def test_split_shares_cover_a_row_blocks_tiles_once() -> None:
    for tiles, splits in itertools.product(range(0, 41), range(1, 10)):
        share = split_share(tiles, splits)
        covered = [t for i in range(splits) for t in range(i * share, min((i + 1) * share, tiles))]
        assert covered == list(range(tiles))


@pytest.mark.parametrize(("group", "block_m"), [(1, 64), (4, 64), (6, 64), (8, 128), (64, 64), (128, 64)])
def test_packing_fits_the_tile_and_covers_the_group(group: int, block_m: int) -> None:
    pack = Packing.of(group, block_m)
    assert pack.heads * pack.tokens <= block_m and pack.tokens >= 1
    assert pack.heads * pack.chunks >= group > pack.heads * (pack.chunks - 1)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("cache_itemsize", [2, 1])
def test_tiles_fit_shared_memory(head_dim: int, cache_itemsize: int) -> None:
    """Every tile fits a block's shared memory; a decode tile half an SM's, so two decode programs share an SM."""
    assert PREFILL_TILES[head_dim].shared_bytes(head_dim, 2, cache_itemsize) <= SHARED_LIMIT
    assert DECODE_TILES[head_dim].shared_bytes(head_dim, 2, cache_itemsize) <= HALF_SM


# --- the launch plan -------------------------------------------------------------------------------------------

H200_SMS = 132


def test_decode_at_batch_one_splits_the_keys_over_the_gpu() -> None:
    plan = plan_launch(AttentionConfig(), tokens=1, batch=1, width=2048, sm_count=H200_SMS)
    assert plan.variant == "decode" and plan.splits > 1
    programs = row_blocks(1, 1, Packing.of(4, DECODE_TILES[128].block_m).tokens) * 8
    assert programs * plan.splits >= PROGRAMS_PER_SM * H200_SMS


def test_decode_at_a_large_batch_does_not_split() -> None:
    assert plan_launch(AttentionConfig(), tokens=256, batch=256, width=2048, sm_count=H200_SMS).splits == 1


def test_splits_are_bounded_by_the_longest_sequence_the_call_can_hold() -> None:
    """The factory's max_seq_len bounds a sequence, and so does its block table row (a shape, as graph-safe)."""
    keys = DECODE_TILES[128].block_n * MIN_TILES_PER_SPLIT * 3
    short = AttentionConfig(max_seq_len=keys)
    assert plan_launch(short, tokens=1, batch=1, width=2048, sm_count=H200_SMS).splits == 3
    assert plan_launch(AttentionConfig(), tokens=1, batch=1, width=keys // 16, sm_count=H200_SMS).splits == 3
    assert plan_launch(AttentionConfig(), tokens=1, batch=1, width=2048, sm_count=H200_SMS, splits=5).splits == 5


def test_prefill_and_chunked_prefill_take_the_prefill_tile() -> None:
    assert plan_launch(AttentionConfig(), tokens=8192, batch=1, width=512, sm_count=H200_SMS).variant == "prefill"
    assert plan_launch(AttentionConfig(), tokens=16 * 512, batch=16, width=32, sm_count=H200_SMS).variant == "prefill"
    # A decode step with a few speculative tokens a sequence still fits a decode program's rows.
    assert plan_launch(AttentionConfig(), tokens=4 * 64, batch=64, width=512, sm_count=H200_SMS).variant == "decode"


# --- the factories' refusals -----------------------------------------------------------------------------------


def test_float32_is_refused_naming_the_backends_that_serve_it() -> None:
    """At the factory (``build``), before anything compiles: here, without a GPU, a refusal that came after the
    compile would be the missing GPU's BackendError instead."""
    for build, config in (
        (paged_attention.build, AttentionConfig(dtype=torch.float32, cache_dtype=torch.float32)),
        (kv_cache_write.build, KVConfig(dtype=torch.float32, cache_dtype=torch.float32)),
    ):
        with pytest.raises(KernelInputError, match=r"test\).*float32.*'torch' or 'triton'"):
            build(config)


def test_head_sizes_without_a_tile_are_refused() -> None:
    with pytest.raises(KernelInputError, match=r"head_dim in \(64, 128, 256\), not 96"):
        paged_attention.build(AttentionConfig(head_dim=96))


# --- on a GPU: against float32 torch ---------------------------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def labelled(config):
    """``config`` named by all its fields, as the spec names it: the label keys the compiled-kernel cache, so two
    configurations that differ anywhere must not share one."""
    return replace(config, label=repr(replace(config, label="")))


def reference_attention(
    config: AttentionConfig,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> torch.Tensor:
    """``[T, Hq, D]`` float32: per sequence, its keys gathered through its table row (a block id outside the cache
    is an absent key, as the kernel documents), causal and windowed, soft-capped, softmax, times the values."""
    heads, kv_heads, head_dim, block_size = config.num_heads, config.num_kv_heads, config.head_dim, config.block_size
    out = torch.zeros(query.shape[0], heads, head_dim, dtype=torch.float32, device=query.device)
    num_blocks = key_cache.shape[0]
    starts, lengths = cu_seqlens_q.tolist(), seq_lens.tolist()
    for b, length in enumerate(lengths):
        start, end = starts[b], starts[b + 1]
        if end == start:
            continue
        positions = torch.arange(length, device=query.device)
        blocks = block_table[b].long()[positions // block_size]
        present = (blocks >= 0) & (blocks < num_blocks)
        rows = blocks.clamp(0, num_blocks - 1) * block_size + positions % block_size
        absent = ~present[:, None, None]  # the clamped rows of absent keys may hold anything, NaN included
        keys = key_cache.float().reshape(-1, kv_heads, head_dim)[rows].masked_fill(absent, 0.0)
        values = value_cache.float().reshape(-1, kv_heads, head_dim)[rows].masked_fill(absent, 0.0)
        if k_scale is not None:
            keys, values = keys * k_scale.float(), values * v_scale.float()
        group = heads // kv_heads
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        logits = torch.einsum("qhd,khd->hqk", query[start:end].float(), keys) * config.scale
        if config.softcap:
            logits = config.softcap * torch.tanh(logits / config.softcap)
        query_positions = torch.arange(length - (end - start), length, device=query.device)[:, None]
        allowed = (positions[None, :] <= query_positions) & present[None, :]
        if config.sliding_window:
            allowed &= positions[None, :] > query_positions - config.sliding_window
        logits = logits.masked_fill(~allowed, float("-inf"))
        out[start:end] = torch.einsum("hqk,khd->qhd", torch.softmax(logits, dim=-1).nan_to_num(0.0), values)
    return out


@dataclass(frozen=True)
class Batch:
    """A ragged batch: each sequence's total length and how many of its last tokens are queries."""

    seq_lens: tuple[int, ...]
    q_lens: tuple[int, ...]


GPU_CASES = {
    # decode at batch 1: the split path (asserted below)
    "split-decode": (AttentionConfig(max_seq_len=4096), Batch((3000,), (1,))),
    "decode-ragged-split": (AttentionConfig(), Batch((1, 16, 17, 33, 250), (1, 1, 1, 1, 1))),
    # 70 sequences: enough decode programs to fill the GPU without a split
    "decode-batch": (AttentionConfig(), Batch(tuple(range(1, 351, 5)), (1,) * 70)),
    # a few new tokens a sequence (speculative decoding, short chunks): the decode tile's rows hold several tokens
    "decode-multi-token-split": (AttentionConfig(), Batch((300, 301), (4, 4))),
    "prefill-and-chunked": (AttentionConfig(), Batch((200, 64, 300, 5), (200, 64, 40, 0))),
    "window-softcap-fp16": (
        AttentionConfig(dtype=torch.float16, cache_dtype=torch.float16, sliding_window=50, softcap=30.0),
        Batch((300, 130), (300, 3)),
    ),
    "d64-mha": (AttentionConfig(8, 8, 64, scale=0.125, block_size=32), Batch((100, 31), (100, 31))),
    "prefill-fp8": (AttentionConfig(cache_dtype=FP8), Batch((100, 70), (100, 20))),
    "d256-gqa8-fp8-split": (
        AttentionConfig(32, 4, 256, scale=1 / 16, cache_dtype=FP8, max_seq_len=2048),
        Batch((2000,), (1,)),
    ),
}


def attention_inputs(config: AttentionConfig, batch: Batch, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Queries as a slice of a packed qkv buffer; a cache with shuffled blocks and NaN in every unwritten slot."""
    device, block_size = "cuda", config.block_size
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    blocks_of = [-(-length // block_size) for length in batch.seq_lens]
    width = max(blocks_of) + 2
    num_blocks = sum(blocks_of) + 3
    tokens = sum(batch.q_lens)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=generator).to(device, config.dtype)
    query = qkv[:, : heads * head_dim]
    fp8 = config.cache_dtype is FP8
    # Made in float32 on the host (NaN written there), converted once: fp8 tensors take few ops on the device.
    caches = [
        torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=generator) * (40 if fp8 else 1)
        for _ in range(2)
    ]
    order = torch.randperm(num_blocks, generator=generator).tolist()
    table = torch.full((len(batch.seq_lens), width), num_blocks + 5, dtype=torch.int32)  # past the cache
    for b, count in enumerate(blocks_of):
        table[b, :count] = torch.tensor(order[:count], dtype=torch.int32)
        order = order[count:]
        unwritten = count * block_size - batch.seq_lens[b]
        if unwritten:  # a partly filled last block holds garbage, NaN included: the kernel must not let it in
            for cache in caches:
                cache[table[b, count - 1], block_size - unwritten :] = float("nan")
    scales = (None, None)
    if fp8:
        scales = tuple(torch.tensor([s], device=device) for s in (0.05, 0.03))
    return {
        "query": query,
        "key_cache": caches[0].to(device, config.cache_dtype),
        "value_cache": caches[1].to(device, config.cache_dtype),
        "block_table": table.to(device),
        "seq_lens": torch.tensor(batch.seq_lens, dtype=torch.int32, device=device),
        "cu_seqlens_q": torch.tensor([0, *itertools.accumulate(batch.q_lens)], dtype=torch.int32, device=device),
        "k_scale": scales[0],
        "v_scale": scales[1],
    }


def assert_attention_close(out: torch.Tensor, expected: torch.Tensor) -> None:
    """Within the rounding of a 16-bit P and output: 2 % of the outputs' size (an fp8 cache's dequantised values
    reach several units)."""
    atol = 2e-2 * max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=atol)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("case", GPU_CASES)
def test_paged_attention_matches_float32_torch(case: str) -> None:
    config, batch = GPU_CASES[case]
    config = labelled(config)
    inputs = attention_inputs(config, batch, torch.Generator().manual_seed(29))
    launch = paged_attention.build(config)
    tokens = inputs["query"].shape[0]
    out = torch.full((tokens, config.num_heads * config.head_dim), float("nan"), device="cuda", dtype=config.dtype)
    launch(*inputs.values(), out)
    expected = reference_attention(
        config, inputs["query"].view(tokens, config.num_heads, -1), *list(inputs.values())[1:]
    )
    assert_attention_close(out.view_as(expected), expected)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = plan_launch(config, tokens, *inputs["block_table"].shape, sms)
    if "split" in case:
        assert plan.splits > 1, "this case is there to run the split programs and the merge"


@pytest.mark.gpu
@gpu
def test_paged_attention_treats_a_block_outside_the_cache_as_absent() -> None:
    """Index values the host did not check: the kernel reads nothing outside the cache and drops those keys."""
    config = labelled(AttentionConfig())
    inputs = attention_inputs(config, Batch((40, 40), (1, 40)), torch.Generator().manual_seed(3))
    num_blocks = inputs["key_cache"].shape[0]
    inputs["block_table"][0, 1] = num_blocks  # sequence 0's keys 16..31 are absent
    inputs["block_table"][1, 0] = -7  # sequence 1's keys 0..15 are absent: its first 16 queries see none (zeros)
    out = torch.full((41, 32 * 128), float("nan"), device="cuda", dtype=config.dtype)
    paged_attention.build(config)(*inputs.values(), out)
    expected = reference_attention(config, inputs["query"].view(41, 32, 128), *list(inputs.values())[1:])
    assert_attention_close(out.view_as(expected), expected)


@pytest.mark.gpu
@gpu
def test_paged_attention_replays_from_a_cuda_graph_with_new_index_values() -> None:
    """Captured once, replayed with other lengths, block tables and query offsets (the same shapes): the grid and
    the split come from shapes only, so each replay computes the new values' attention."""
    config = labelled(AttentionConfig(max_seq_len=1024))
    launch = paged_attention.build(config)
    batches = (Batch((300, 17, 1), (1, 1, 1)), Batch((16, 900, 64), (1, 1, 1)), Batch((1, 2, 1000), (1, 1, 1)))
    drawn = [attention_inputs(config, batch, torch.Generator().manual_seed(b)) for b, batch in enumerate(batches)]
    # One set of buffers, shaped for the largest draw; each draw is copied in before its replay.
    blocks = max(inputs["key_cache"].shape[0] for inputs in drawn)
    width = max(inputs["block_table"].shape[1] for inputs in drawn)
    static = dict(drawn[0])
    static["key_cache"] = static["key_cache"].new_zeros((blocks, *static["key_cache"].shape[1:]))
    static["value_cache"] = torch.zeros_like(static["key_cache"])
    static["block_table"] = static["block_table"].new_full((3, width), blocks)
    static["query"] = drawn[0]["query"].clone()
    out = torch.empty(3, config.num_heads * config.head_dim, device="cuda", dtype=config.dtype)

    def load(inputs: dict[str, torch.Tensor]) -> None:
        for name in ("key_cache", "value_cache"):
            static[name].zero_()[: inputs[name].shape[0]] = inputs[name]
        static["block_table"].fill_(blocks)[:, : inputs["block_table"].shape[1]] = inputs["block_table"]
        for name in ("query", "seq_lens", "cu_seqlens_q"):
            static[name].copy_(inputs[name])

    load(drawn[0])
    launch(*static.values(), out)  # compiles nothing (the factory did), settles the allocator
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(*static.values(), out)
    for inputs in drawn:
        load(inputs)
        graph.replay()
        expected = reference_attention(
            config, static["query"].view(3, config.num_heads, -1), *list(static.values())[1:]
        )
        assert_attention_close(out.view_as(expected), expected)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, FP8])
def test_kv_cache_write_matches_torch(cache_dtype: torch.dtype) -> None:
    config = labelled(KVConfig(cache_dtype=cache_dtype))
    generator = torch.Generator().manual_seed(7)
    heads, head_dim, block_size, num_blocks, tokens = 8, 128, 16, 6, 20
    qkv = (torch.randn(tokens, (32 + 2 * heads) * head_dim, generator=generator) * 100).to("cuda", torch.bfloat16)
    key, value = qkv[:, 32 * head_dim : 40 * head_dim], qkv[:, 40 * head_dim :]
    slots = torch.randperm(num_blocks * block_size, generator=generator)[:tokens]
    slots[3], slots[11] = -1, num_blocks * block_size  # padding, and a slot past the cache: both skipped
    sentinel = torch.full((num_blocks, block_size, heads, head_dim), 0.5)
    key_cache, value_cache = (sentinel.to("cuda", cache_dtype) for _ in range(2))
    scales = (torch.tensor([0.3], device="cuda"), torch.tensor([0.7], device="cuda"))
    if cache_dtype is not FP8:
        scales = (None, None)
    kv_cache_write.build(config)(key, value, key_cache, value_cache, slots.cuda(), *scales)

    # Compared as bytes on the host (fp8 tensors take few ops): each kept token's row at its slot, the rest untouched.
    written = (slots >= 0) & (slots < num_blocks * block_size)
    for x, cache, scale in ((key, key_cache, scales[0]), (value, value_cache, scales[1])):
        stored = x.view(tokens, heads, head_dim).cpu()
        if scale is not None:
            stored = (stored.float() / scale.cpu()).clamp(-448, 448).to(FP8)
        expected = sentinel.to(cache_dtype).view(-1, heads, head_dim).view(torch.uint8).clone()
        expected[slots[written]] = stored.view(torch.uint8)[written]
        assert torch.equal(cache.cpu().view(-1, heads, head_dim).view(torch.uint8), expected)
