"""Triton ``fused_moe_tl``'s tiles by tokens (issue 36): the choice follows vLLM's tuned H100 table for
Qwen3-30B-A3B, and every tile set in it computes the kit's answer (in Triton's interpreter, which otherwise runs the
16-row tiles only). Timing the tiles needs the GPU: ``make gpu-moe``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from lazyops._backends.triton import fused_moe
from lazyops._backends.triton._common import interpreting
from lazyops.testing import Case, check_case


@pytest.mark.parametrize(
    ("tokens", "block_m"), [(1, 16), (64, 16), (128, 16), (256, 32), (512, 64), (1024, 64), (1536, 128), (4096, 128)]
)
def test_the_tiles_follow_vllms_h100_table_for_qwen3_30b_a3b(tokens, block_m):
    """vLLM's ``E=128,N=768`` table: BLOCK_SIZE_M 16 up to M = 128, 32 at 256, 64 at 512 and 1024, 128 beyond."""
    assert fused_moe.pick_tiles(tokens, 8, 128).block_m == block_m


def test_float32_halves_the_depth():
    half, full = fused_moe.pick_tiles(4096, 8, 128, float32=True), fused_moe.pick_tiles(4096, 8, 128)
    assert half.block_k * 2 == full.block_k


@pytest.mark.skipif(not interpreting(fused_moe._gate_up_kernel), reason="the GPU conformance runs every tile set")
@pytest.mark.parametrize("tiles", [tiles for _, tiles in fused_moe.TILES], ids=lambda tiles: f"M{tiles.block_m}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_tile_set_computes_the_kits_answer(monkeypatch, tiles, dtype):
    monkeypatch.setattr(fused_moe, "INTERPRETER_TILES", tiles)
    for one_expert in (False, True):
        case = Case("fused_moe_tl", (40, 24, 4, 2, dtype), {}, (37, 3), seed=7, geometry={"one_expert": one_expert})
        check_case(fused_moe.fused_moe_tl, case, device="cpu")
