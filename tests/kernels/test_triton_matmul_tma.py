"""Triton's TMA GEMM kernel (``_matmul_tma_kernel``), one tile a program, persistent, and split-K (float32
partials into a ``[split, M, n]`` workspace), against the float64 product; under Triton's interpreter here, with
small tiles, and on a GPU with the prefill and decode tiles.

The kernel leaves the edges to the copy engine (zeros loaded past M, n and k; stores clipped), so the shapes put
a ragged block on every side. A persistent launch walks more tiles than it has programs. Calls whose tensors TMA
cannot address (a row stride that is not a 16-byte multiple, a start that is not 16-byte aligned) go to the
pointer kernel of the same tile: those are here too, as input and as output. Outputs are poisoned with NaN first.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton")
pytest.importorskip("triton.tools.tensor_descriptor")

from lazyops._backends.triton import matmul


def split_k(tiles: matmul.Tiling, k: int, slices: int) -> matmul.Tiling:
    """``tiles`` splitting ``k`` into ``slices`` slices of whole k-steps as ``tiling`` does (the last the shortest,
    its steps past k loading zeros)."""
    steps = -(-k // tiles.block_k)  # ceiling divisions
    k_slice = -(-steps // slices) * tiles.block_k
    split = -(-k // k_slice)
    return matmul.Tiling(
        tiles.block_m,
        tiles.block_n,
        tiles.block_k,
        tiles.num_warps,
        tiles.num_stages,
        split,
        k_slice if split > 1 else 0,
        tma=True,
    )


def tilings(on_host: bool, k: int) -> list[matmul.Tiling]:
    if on_host:  # tiles small enough that the interpreter walks 100+ of them in seconds
        return [
            matmul.Tiling(16, 16, 32, 4, 2, tma=True),
            matmul.Tiling(16, 32, 16, 4, 2, tma=True, persistent=1),
            split_k(matmul.Tiling(16, 16, 16, 4, 2), k, 3),
        ]
    return [
        matmul.Tiling(128, 256, 64, 8, 3, tma=True),
        matmul.Tiling(128, 256, 64, 8, 3, tma=True, persistent=1),
        matmul.Tiling(128, 128, 64, 4, 4, tma=True, persistent=2),
        split_k(matmul.Tiling(64, 128, 64, 4, 4), k, 4),
        split_k(matmul.Tiling(16, 128, 128, 4, 4), k, 3),
    ]


def shapes(on_host: bool) -> list[tuple[int, int, int]]:
    if on_host:  # (300, 144): 171 tiles of 16 x 16 against 132 persistent programs
        return [(37, 40, 72), (300, 144, 40), (5, 24, 8)]
    return [(1000, 4096, 4096), (4097, 14336, 520), (1536, 1928, 4104), (70, 264, 64)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_tma_tiles_match_the_float64_product_at_ragged_edges_and_unaddressable_views(kernels, dtype) -> None:
    if kernels.backend != "triton":
        pytest.skip("Triton's kernel")
    device = kernels.device
    generator = torch.Generator().manual_seed(12)
    tolerance = 8e-3 if dtype == torch.bfloat16 else 1e-3
    for m, n, k in shapes(kernels.on_host):
        a = torch.randn(m, k + 3, generator=generator).to(device=device, dtype=dtype)
        b = (torch.randn(k, n, generator=generator) / k**0.5).to(device=device, dtype=dtype)
        dense = a[:, :k].contiguous()
        for tiles in tilings(kernels.on_host, k):
            launch = matmul.build_matmul(n, k, dtype, lambda *_, tiles=tiles: tiles)
            # dense (TMA), a row stride of k + 3 elements (not 16-byte: the pointer kernel), an output view whose
            # rows are n + 1 apart (likewise), a start one element past an aligned one
            shifted = torch.empty(m * k + 1, device=device, dtype=dtype)[1:].view(m, k)
            shifted.copy_(dense)
            for x, out in (
                (dense, torch.empty(m, n, device=device, dtype=dtype)),
                (a[:, :k], torch.empty(m, n, device=device, dtype=dtype)),
                (dense, torch.empty(m, n + 1, device=device, dtype=dtype)[:, :n]),
                (shifted, torch.empty(m, n, device=device, dtype=dtype)),
            ):
                out.fill_(float("nan"))
                launch(x, b, out)
                expected = x.double() @ b.double()
                error = ((out.double() - expected).norm() / expected.norm()).item()
                assert error <= tolerance, f"{tiles} at {(m, n, k)}, {dtype}, x strides {x.stride()}: {error:.2e}"


def test_a_tma_tiling_runs_the_pointer_kernel_where_tma_cannot_describe_the_weight(kernels) -> None:
    """A weight whose rows are not 16-byte multiples (n = 20 float16) cannot be a TMA descriptor's: the plan
    drops the TMA flag and the call still computes the product."""
    if kernels.backend != "triton":
        pytest.skip("Triton's kernel")
    tiles = matmul.Tiling(16, 16, 32, 4, 2, tma=True, persistent=1)
    launch = matmul.build_matmul(20, 32, torch.float16, lambda *_: tiles)
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(9, 32, generator=generator).half().to(kernels.device)
    b = torch.randn(32, 20, generator=generator).half().to(kernels.device)
    out = torch.full((9, 20), float("nan"), dtype=torch.float16, device=kernels.device)
    launch(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_a_graphs_only_tma_tiling_launches_the_pointer_kernel_eagerly_and_tma_while_captured(
    kernels, monkeypatch
) -> None:
    """``tma_in_graphs_only`` (the decode tile, ``DECODE_16``): an eager call runs the pointer kernel of the same tile
    (its launch costs less host time than building and encoding three descriptors), a call made while the stream
    captures a CUDA graph the TMA kernel; both compute the product, split-K's reduce included. Here the capture
    is the module's ``stream_is_capturing`` answering True."""
    if kernels.backend != "triton":
        pytest.skip("Triton's kernel")
    from lazyops._backends.triton import _launch

    launched: list[str] = []
    launch_kernel = _launch.Launcher.__call__

    def spy(self, grid, *args):
        launched.append(getattr(self.kernel, "__name__", str(self.kernel)))
        return launch_kernel(self, grid, *args)

    monkeypatch.setattr(_launch.Launcher, "__call__", spy)
    k = 96
    tiles = dataclasses.replace(split_k(matmul.Tiling(16, 16, 16, 4, 2), k, 3), tma_in_graphs_only=True)
    launch = matmul.build_matmul(32, k, torch.bfloat16, lambda *_: tiles)
    generator = torch.Generator().manual_seed(5)
    a = torch.randn(3, k, generator=generator).to(kernels.device, torch.bfloat16)
    b = (torch.randn(k, 32, generator=generator) / k**0.5).to(kernels.device, torch.bfloat16)
    expected = a.double() @ b.double()
    for capturing, kernel in ((False, "_matmul_kernel"), (True, "_matmul_tma_kernel")):
        monkeypatch.setattr(matmul, "stream_is_capturing", lambda capturing=capturing: capturing)
        launched.clear()
        out = torch.full((3, 32), float("nan"), dtype=torch.bfloat16, device=kernels.device)
        launch(a, b, out)
        assert launched == [kernel, "_sum_slices_kernel"], f"capturing={capturing}: {launched}"
        error = ((out.double() - expected).norm() / expected.norm()).item()
        assert error <= 8e-3, f"capturing={capturing}: {error:.2e}"


def test_the_decode_tile_gives_the_same_bits_eagerly_and_replayed_from_a_cuda_graph(kernels) -> None:
    """The rule's decode tile runs through pointers eagerly and by TMA inside a CUDA graph: the same tile, split
    and reduce order, so an engine's eager warm-up and its graph replays see the same result, bit for bit."""
    if kernels.backend != "triton" or kernels.on_host:
        pytest.skip("Triton on a GPU (CUDA graphs)")
    generator = torch.Generator().manual_seed(9)
    for m, n, k in ((1, 4096, 4096), (16, 4096, 14336), (7, 14336, 4096)):
        assert matmul.tiling(m, n, k, torch.bfloat16).tma_in_graphs_only
        launch = matmul.build_matmul(n, k, torch.bfloat16)
        a = torch.randn(m, k, generator=generator).to(kernels.device, torch.bfloat16)
        b = (torch.randn(k, n, generator=generator) / k**0.5).to(kernels.device, torch.bfloat16)
        eager = torch.empty(m, n, device=kernels.device, dtype=torch.bfloat16)
        launch(a, b, eager)
        replayed = torch.full_like(eager, float("nan"))
        graph = torch.cuda.CUDAGraph()
        # The TMA kernel's first launch, its compile, happens inside the capture: an engine warms up eagerly
        # (through pointers) and captures after.
        with torch.cuda.graph(graph):
            launch(a, b, replayed)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(eager, replayed), f"{(m, n, k)}: {(eager.float() - replayed.float()).abs().max().item()}"
