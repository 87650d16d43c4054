"""The MoE kernels' Triton and TileLang paths read nothing on the host, so a CUDA graph can capture them (issue 36).

``torch.cuda.set_sync_debug_mode`` needs a GPU; here the host side of each call (the spec's checks, the
allocations, the gathers, the launches) runs on the CPU under a dispatch mode that fails on every torch operator
that hands a tensor's values to the host (``.item()``, ``nonzero``, ``unique``, ``bincount``, a boolean mask...),
with ``tolist``/``item``/``cpu``/``numpy`` patched to fail too, and the Triton launches replaced by a recorder: no
kernel runs, only what the host does around them is seen. The recorded grids must also be the same for any
routing of the same shapes: sizes from ``T``, ``k``, ``E`` and the block size alone. TileLang's alignment runs here
on its programs built for TileLang's C target; on a GPU its route and alignment are captured in a graph.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("triton")

from lazyops._backends.torch import moe_align as torch_moe_align
from lazyops._backends.triton import fused_moe as triton_fused_moe
from lazyops._backends.triton import moe_align as triton_moe_align
from lazyops._backends.triton._common import interpreting
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.moe_align import sizes

#: operators whose result depends on tensor values the host must read (their output size, or a Python scalar)
HOST_READS = {
    "_local_scalar_dense",
    "item",
    "nonzero",
    "nonzero_static",
    "unique",
    "_unique",
    "_unique2",
    "unique_consecutive",
    "unique_dim",
    "bincount",
    "masked_select",
    "is_nonzero",
    "equal",
    "repeat_interleave",
}

#: indexing operators that call ``nonzero`` inside their kernel when an index is a boolean mask
MASK_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


class NoHostReads(TorchDispatchMode):
    """Fails on any operator in :data:`HOST_READS` (and on boolean-mask indexing, which is ``nonzero``)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in HOST_READS:
            raise AssertionError(f"{func} reads tensor values on the host")
        if name in MASK_INDEXING and any(
            isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8) for index in args[1] or ()
        ):
            raise AssertionError(f"{func} with a boolean mask reads tensor values on the host (nonzero)")
        return func(*args, **(kwargs or {}))


#: the CPU tests need Triton's interpreter (host tensors); on a GPU, :func:`test_a_cuda_graph_captures_the_moe_layer`
interpreted = pytest.mark.skipif(
    not interpreting(triton_moe_align._count_kernel), reason="Triton compiles here: the GPU test captures a graph"
)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[int, ...]]]:
    """The Triton launches as ``(kernel name, grid)``, none run; the tensor methods that read values fail."""
    launches: list[tuple[str, tuple[int, ...]]] = []

    def record(self: Launcher, grid: tuple[int, ...], *args: Any) -> None:
        assert all(type(size) is int for size in grid), f"a grid from tensor values: {grid}"
        launches.append((getattr(self.kernel, "__name__", str(self.kernel)), tuple(grid)))

    def refuse(name: str) -> Any:
        def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"Tensor.{name}() reads values on the host")

        return method

    monkeypatch.setattr(Launcher, "__call__", record)
    for name in ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__index__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
    return launches


def routings(tokens: int, top_k: int, experts: int) -> list[torch.Tensor]:
    """Two routings of the same shape: every token to experts ``0..k-1`` (the worst imbalance), and spread."""
    skewed = torch.arange(top_k, dtype=torch.int32).repeat(tokens, 1)
    spread = torch.randperm(tokens * top_k).remainder(experts).to(torch.int32).view(tokens, top_k)
    return [skewed, spread]


def alignment_launches(tokens: int, top_k: int, experts: int) -> int:
    """Triton's alignment launches: one up to its single launch's bound (2048 assignments, fewer than 512 experts;
    a Triton with ``tl.gather``), three past it."""
    single = triton_moe_align.HAS_GATHER and tokens * top_k <= 2048 and experts < 512
    return 1 if single else 3


@interpreted
@pytest.mark.parametrize(
    ("tokens", "top_k", "experts", "block"),
    # the single launch (its bound: 256 tokens of top-8, DeepSeek-V3's 256 experts), then the three launches past it
    [(1, 1, 1, 16), (7, 2, 8, 16), (256, 8, 256, 16), (257, 8, 256, 16), (300, 8, 128, 64), (4, 2, 512, 16)],
)
def test_triton_moe_align_reads_nothing_on_the_host(recorded, tokens, top_k, experts, block):
    kernel = triton_moe_align.moe_align_tl(experts, top_k, block)
    padded, blocks = sizes(tokens, top_k, experts, block)
    grids = []
    for ids in routings(tokens, top_k, experts):
        outputs = (torch.empty(padded, dtype=torch.int32), torch.empty(blocks, dtype=torch.int32))
        with NoHostReads():
            kernel(ids, *outputs, torch.empty(1, dtype=torch.int32))
        grids.append(list(recorded))
        recorded.clear()
    assert grids[0] == grids[1] and len(grids[0]) == alignment_launches(tokens, top_k, experts)


@interpreted
@pytest.mark.parametrize("mapped", [False, True], ids=["all experts", "expert_map"])
@pytest.mark.parametrize(("tokens", "top_k", "experts"), [(1, 2, 8), (64, 8, 128), (300, 8, 128)])
def test_triton_fused_moe_reads_nothing_on_the_host(recorded, tokens, top_k, experts, mapped):
    hidden, inter = 32, 16
    options = {"global_experts": 2 * experts} if mapped else {}
    kernel = triton_fused_moe.fused_moe_tl(hidden, inter, experts, top_k, torch.float32, **options)
    x = torch.randn(tokens, hidden)
    w13, w2 = torch.randn(experts, 2 * inter, hidden), torch.randn(experts, hidden, inter)
    weights = torch.rand(tokens, top_k)
    expert_map = torch.arange(2 * experts, dtype=torch.int32).remainder(experts) if mapped else None
    grids = []
    for ids in routings(tokens, top_k, experts):
        with NoHostReads():
            kernel(x, w13, w2, weights, ids, expert_map=expert_map, out=torch.empty(tokens, hidden))
        grids.append(list(recorded))
        recorded.clear()
    assert grids[0] == grids[1] and len(grids[0]) == alignment_launches(tokens, top_k, experts) + 2  # the GEMMs


def test_torch_moe_align_reads_nothing_on_the_host(monkeypatch):
    """The torch backend's alignment is graph-safe too (its fused_moe is not: see its docstring)."""
    for name in ("tolist", "item", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _name=name, **k: pytest.fail(f"Tensor.{_name}()"))
    kernel = torch_moe_align.moe_align_tl(8, 2, 16)
    padded, blocks = sizes(5, 2, 8, 16)
    outputs = (torch.empty(padded, dtype=torch.int32), torch.empty(blocks, dtype=torch.int32))
    with NoHostReads():
        kernel(torch.tensor([[1, 3]] * 5, dtype=torch.int32), *outputs, torch.empty(1, dtype=torch.int32))


def test_the_detector_catches_a_host_read():
    with pytest.raises(AssertionError, match="host"), NoHostReads():
        torch.bincount(torch.tensor([1, 2]))
    with pytest.raises(AssertionError, match="host"), NoHostReads():
        torch.arange(3)[torch.tensor([True, False, True])]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a CUDA device")
@pytest.mark.parametrize("tokens", [1, 4096])
@pytest.mark.parametrize(
    ("mapped", "deepseek"),
    [(False, False), (True, False), (False, True)],
    ids=["Qwen3-30B-A3B", "Qwen3-30B-A3B with expert_map", "DeepSeek-V3 routing"],
)
def test_a_cuda_graph_captures_the_moe_layer(tokens, mapped, deepseek):
    """Triton's route, alignment and experts at Qwen3-30B-A3B's shapes (or DeepSeek-V3's router: 8 of 256 experts
    in 4 of 8 groups, biased) under ``set_sync_debug_mode("error")``, captured in one CUDA graph and replayed on
    new logits: the replay equals an eager call."""
    from lazyops._backends.triton.moe_route import moe_route_tl

    experts, top_k, hidden, inter, dtype = 256 if deepseek else 128, 8, 2048, 768, torch.bfloat16
    grouped = {"n_group": 8, "topk_group": 4, "correction_bias": True, "routed_scaling_factor": 2.5}
    route = moe_route_tl(experts, top_k, dtype, **({"scoring": "sigmoid", **grouped} if deepseek else {}))
    bias = torch.randn(experts, device="cuda") / 10 if deepseek else None
    options = {"global_experts": 2 * experts} if mapped else {}
    moe = triton_fused_moe.fused_moe_tl(hidden, inter, experts, top_k, dtype, **options)
    x = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
    w13 = torch.randn(experts, 2 * inter, hidden, device="cuda", dtype=dtype) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, device="cuda", dtype=dtype) / inter**0.5
    logits = torch.randn(tokens, experts, device="cuda", dtype=dtype)
    expert_map = None
    if mapped:
        expert_map = torch.full((2 * experts,), -1, dtype=torch.int32, device="cuda")
        expert_map[::2] = torch.arange(experts, dtype=torch.int32, device="cuda")
    weights = torch.empty(tokens, top_k, device="cuda")
    ids = torch.empty(tokens, top_k, device="cuda", dtype=torch.int32)
    out = torch.empty_like(x)

    def layer() -> None:
        route(logits, weights, ids, correction_bias=bias)
        moe(x, w13, w2, weights, ids, expert_map=expert_map, out=out)

    with torch.inference_mode():
        layer()  # compiles
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            layer()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                layer()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        logits.copy_(torch.randn_like(logits))
        graph.replay()
        replayed = out.clone()
        layer()
        torch.cuda.synchronize()
    assert torch.equal(replayed, out)


def test_tilelang_moe_align_reads_nothing_on_the_host():
    """TileLang's three launches and their scratch, around the programs built for TileLang's C target (which run:
    their results are tests/kernels/test_tilelang_moe.py's to judge)."""
    tilelang = pytest.importorskip("tilelang")
    from lazyops._backends.tilelang import moe_align as tilelang_moe_align
    from lazyops._backends.tilelang._dialect import CPU

    experts, top_k, block = 8, 2, 16
    config = tilelang_moe_align.spec.bind(experts, top_k, block)
    programs = {name: build(config, CPU) for name, build in tilelang_moe_align.BUILDERS.items()}
    kernel = tilelang_moe_align.align_launch(
        config, {name: tilelang.compile(p, target="c") for name, p in programs.items()}
    )
    for tokens in (1, 300):
        padded, blocks = sizes(tokens, top_k, experts, block)
        for ids in routings(tokens, top_k, experts):
            outputs = (torch.empty(padded, dtype=torch.int32), torch.empty(blocks, dtype=torch.int32))
            with NoHostReads():
                kernel(ids, *outputs, torch.empty(1, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a CUDA device")
@pytest.mark.parametrize("tokens", [1, 4096])
@pytest.mark.parametrize("deepseek", [False, True], ids=["Qwen3-30B-A3B", "DeepSeek-V3 routing"])
def test_a_cuda_graph_captures_tilelangs_route_and_alignment(tokens, deepseek):
    """TileLang's moe_route_tl and moe_align_tl at Qwen3-30B-A3B's shapes (or DeepSeek-V3's router) under
    ``set_sync_debug_mode("error")``, captured in one CUDA graph and replayed on new logits: the replay equals an
    eager call, and Triton's route and alignment of the same logits (ids exactly). The logits are halves (the spec's
    draw), so both backends' keys are exact and their choices the same."""
    from lazyops import _api
    from lazyops._backends.triton.moe_route import moe_route_tl as triton_route

    reason = _api.unavailable_reason("tilelang")
    if reason:
        pytest.skip(reason)
    from lazyops._backends.tilelang.moe_align import moe_align_tl
    from lazyops._backends.tilelang.moe_route import moe_route_tl

    experts, top_k, block, dtype = 256 if deepseek else 128, 8, 64, torch.bfloat16
    grouped = {"scoring": "sigmoid", "n_group": 8, "topk_group": 4, "correction_bias": True}
    options = {**grouped, "routed_scaling_factor": 2.5} if deepseek else {}
    route, align = moe_route_tl(experts, top_k, dtype, **options), moe_align_tl(experts, top_k, block)
    low = 0 if deepseek else -8

    def halves() -> torch.Tensor:
        return (torch.randint(low, 9, (tokens, experts), device="cuda") / 2).to(dtype)

    bias = torch.randint(0, 2, (experts,), device="cuda").float() * -0.5 if deepseek else None
    logits = halves()
    weights = torch.empty(tokens, top_k, device="cuda")
    ids = torch.empty(tokens, top_k, device="cuda", dtype=torch.int32)
    padded, blocks = sizes(tokens, top_k, experts, block)
    aligned = (
        torch.empty(padded, device="cuda", dtype=torch.int32),
        torch.empty(blocks, device="cuda", dtype=torch.int32),
        torch.empty(1, device="cuda", dtype=torch.int32),
    )

    def step() -> None:
        route(logits, weights, ids, correction_bias=bias)
        align(ids, *aligned)

    with torch.inference_mode():
        step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        logits.copy_(halves())
        graph.replay()
        replayed = [tensor.clone() for tensor in (weights, ids, *aligned)]
        step()
        triton_weights, triton_ids = torch.empty_like(weights), torch.empty_like(ids)
        triton_route(experts, top_k, dtype, **options)(logits, triton_weights, triton_ids, correction_bias=bias)
        triton_aligned = [torch.empty_like(tensor) for tensor in aligned]
        triton_moe_align.moe_align_tl(experts, top_k, block)(triton_ids, *triton_aligned)
        torch.cuda.synchronize()
    for got, want in zip(replayed, (weights, ids, *aligned), strict=True):
        assert torch.equal(got, want)
    assert torch.equal(ids, triton_ids)
    torch.testing.assert_close(weights, triton_weights, rtol=1e-5, atol=1e-6)  # two float32 exps
    for got, want in zip(aligned, triton_aligned, strict=True):
        assert torch.equal(got, want)
