"""``matmul_fp8_tl``'s Triton tiles as data (``configs/matmul_fp8.json``): every row of every device's table, launched
at the token counts it serves, computes the product (in Triton's interpreter here, each device's table put in place
of the default one), and the factory picks a row from the token count alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lazyops.testing import Case, check_case

triton_matmul_fp8 = pytest.importorskip("lazyops._backends.triton.matmul_fp8")
TABLES = json.loads(Path(triton_matmul_fp8.TABLES).read_text(encoding="utf-8"))["tables"]


def counts(tiles) -> tuple[int, ...]:
    """Each row's largest token count and the first past the last bound (the open row), with a one-token call."""
    bounds = [tile.max_m for tile in tiles[:-1]]
    return (1, *bounds, bounds[-1] + 3)


@pytest.mark.parametrize("scales", ["rowwise", "block"])
@pytest.mark.parametrize("device", sorted(TABLES))
def test_every_tile_of_every_table_multiplies_right(device, scales, monkeypatch):
    """n = 200 and k = 300: neither a multiple of any tile side nor of the 128 block; a bias; each row's bucket
    reached, its edge included."""
    import lazyops.triton

    if not triton_matmul_fp8.interpreting(triton_matmul_fp8._matmul_fp8_kernel):
        pytest.skip("on a GPU the factory reads its own device's table; tests/kernels/test_matmul_fp8.py runs there")
    tiles = triton_matmul_fp8.tile_table(device)
    monkeypatch.setattr(triton_matmul_fp8, "tile_table", lambda name=None: tiles)
    n = 200 + sorted(TABLES).index(device)  # a configuration of its own: no kernel built on another table serves it
    case = Case("matmul_fp8_tl", (n, 300, torch.bfloat16), {"scales": scales}, counts(tiles), seed=5,
                geometry={"bias": True, "column_major": scales == "block"})  # fmt: skip
    check_case(lazyops.triton.matmul_fp8_tl, case, device="cpu", max_elements=1 << 30)


def test_the_factory_launches_the_row_of_the_calls_token_count(monkeypatch):
    """The grid is the chosen tile's: ``(ceil(M / block_m), ceil(n / block_n))`` with that row's warps and stages,
    from the shapes alone (what lets a CUDA graph replay it)."""
    import lazyops.triton

    launched = []

    class Recorder:
        def __init__(self, kernel, constexprs, **options):
            self.tile = (constexprs["BLOCK_M"], constexprs["BLOCK_N"], options["num_warps"], options["num_stages"])

        def __call__(self, grid, *args):
            launched.append((grid, self.tile))

    monkeypatch.setattr(triton_matmul_fp8, "Launcher", Recorder)
    tiles = triton_matmul_fp8.tile_table(None)
    kernel = lazyops.triton.matmul_fp8_tl(96, 128, torch.bfloat16, "rowwise")
    for tokens in counts(tiles):
        a, b = torch.zeros(tokens, 128, dtype=torch.float8_e4m3fn), torch.zeros(96, 128, dtype=torch.float8_e4m3fn)
        kernel(a, b, torch.ones(tokens, 1), torch.ones(96, 1))
    for (grid, tile), tokens in zip(launched, counts(tiles), strict=True):
        row = triton_matmul_fp8.tiling(tokens, tiles)
        assert tile == (row.block_m, row.block_n, row.num_warps, row.num_stages), tokens
        assert grid == (-(-tokens // row.block_m), -(-96 // row.block_n)), tokens
