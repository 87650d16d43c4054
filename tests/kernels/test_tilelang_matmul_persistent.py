"""TileLang's persistent GEMM program (``Tile.persistent``): a fixed number of blocks walking the output tiles.

Lowered for sm_90a here (no GPU needed): one block an SM, a loop over the tiles TileLang's ``T.Persistent``
schedules, TMA loads and stores, a producer warpgroup. On a GPU: the product at
shapes with a ragged last row block, column groups that are not a multiple of 8 column blocks, k not a multiple
of the k-step, against float64, the output poisoned with NaN first.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytest.importorskip("tilelang")

from lazyops._backends.tilelang import matmul

PERSISTENT = replace(matmul.LARGE, persistent=1)


def lower(program) -> str:
    import tilelang
    from tvm.target import Target

    hopper = Target({"kind": "cuda", "arch": "sm_90a"})
    with hopper:
        return tilelang.lower(program, target=hopper).kernel_source


@pytest.mark.parametrize("n", [4096, 1280, 14336])
def test_the_persistent_program_walks_the_tiles_with_one_block_an_sm(n) -> None:
    source = lower(matmul.matmul_program(n, 4096, "bfloat16", PERSISTENT, sm_count=132))
    assert "__launch_bounds__(384, 1)" in source, "two consumer warpgroups and a producer, one block an SM"
    assert "for (int w = 0;" in source and "* 132) + ((int)blockIdx.x)" in source, "tiles 132 apart"
    assert "tma_load" in source and "tma_store" in source and "wgmma" in source


def test_the_factory_keeps_a_block_a_tile_because_persistence_measured_slower() -> None:
    """Every persistent tiling measured slower than a block a tile on the H200 (decision 005: geometric means
    0.866-0.909 against 0.977), so no tile the factory builds is persistent."""
    assert matmul.LARGE.persistent == 0 and matmul.SMALL.persistent == 0
    for plan in matmul.split_plans(matmul.spec.bind(4096, 4096, "bfloat16")):
        assert plan.tile.persistent == 0


@pytest.mark.parametrize(("m", "n", "k"), [(1000, 4096, 4096), (4097, 14336, 520), (1536, 1920, 4160), (70, 264, 64)])
def test_the_persistent_program_matches_the_float64_product(m, n, k) -> None:
    if not torch.cuda.is_available():
        pytest.skip("TileLang's programs run on a CUDA GPU")
    from lazyops._backends.tilelang._runtime import compiled, direct

    sm_count = torch.cuda.get_device_properties().multi_processor_count
    # (``compiled`` caches by label and key: the key names the shape, or every shape would get the first's kernel)
    (kernel,) = compiled(
        "test_persistent", {(n, k, sm_count): lambda: matmul.matmul_program(n, k, "bfloat16", PERSISTENT, sm_count)}
    ).values()
    generator = torch.Generator().manual_seed(m + n + k)
    a = torch.randn(m, k, generator=generator).to(device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(k, n, generator=generator) / k**0.5).to(device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    direct(kernel)(a, b, c)
    expected = a.double() @ b.double()
    error = ((c.double() - expected).norm() / expected.norm()).item()
    assert error <= 8e-3, f"[{m}, {k}] x [{k}, {n}]: relative error {error:.2e}"
