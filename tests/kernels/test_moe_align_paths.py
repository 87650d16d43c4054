"""Triton ``moe_align_tl``'s two paths (issue 36): one launch up to 2048 assignments (256 tokens of top-8) and
fewer than 512 experts, three launches past either bound. Each is the spec's alignment exactly on both sides of the
bound, for every routing the kit draws (skewed, every token to one expert, a quarter absent), block sizes of vLLM's
tiles and odd ones, one program's tile and many. The kit's own draws rarely cross the bound on the host (its sizes
are cut to what the interpreter runs quickly): these cases cross it on purpose."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("triton")

from lazyops._backends.triton import moe_align
from lazyops._backends.triton._common import interpreting
from lazyops._backends.triton._launch import Launcher
from lazyops.testing import Case, check_case

DEVICE = "cpu" if interpreting(moe_align._single_kernel) else "cuda"
SINGLE, THREE = ["_single_kernel"], ["_count_kernel", "_prefix_kernel", "_place_kernel"]

#: ``(tokens, top_k, experts, block)`` and the kernels each call runs, with and without ``tl.gather``
CASES = [
    ((1, 1, 1, 16), SINGLE),
    ((1, 8, 256, 16), SINGLE),
    ((256, 8, 256, 16), SINGLE),  # the bound: 2048 assignments, DeepSeek-V3's experts
    ((257, 8, 256, 16), THREE),
    ((256, 8, 128, 64), SINGLE),  # Qwen3-30B-A3B's routing, vLLM's 64-row blocks
    ((256, 8, 256, 128), SINGLE),
    ((682, 3, 60, 7), SINGLE),  # 2046 assignments, odd experts and blocks
    ((683, 3, 60, 7), THREE),
    ((1024, 2, 64, 1), SINGLE),  # blocks of one row: 2048 blocks
    ((9, 2, 16, 300), SINGLE),  # blocks wider than a step's 2048 rows at 16 blocks
    ((4, 2, 511, 16), SINGLE),
    ((4, 2, 512, 16), THREE),  # 512 experts and the absent ones' bin: past the histogram's 512 bins
]


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernels the Triton launches run, by name (each launch still runs)."""
    names: list[str] = []
    launch = Launcher.__call__

    def record(self: Launcher, grid: tuple[int, ...], *args: Any) -> None:
        names.append(self.kernel.__name__)
        launch(self, grid, *args)

    monkeypatch.setattr(Launcher, "__call__", record)
    return names


@pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="Triton compiles here, for a GPU")
@pytest.mark.parametrize("geometry", [{}, {"one_expert": True}, {"absent": True}], ids=["skewed", "one", "absent"])
@pytest.mark.parametrize(("args", "kernels"), CASES, ids=[str(args) for args, _ in CASES])
def test_each_path_is_the_spec_on_either_side_of_the_bound(launched, args, kernels, geometry):
    tokens, top_k, experts, block = args
    case = Case("moe_align_tl", (experts, top_k, block), {}, (tokens,), seed=tokens + experts, geometry=geometry)
    check_case(moe_align.moe_align_tl, case, device=DEVICE, max_elements=10**7)
    assert launched == (kernels if moe_align.HAS_GATHER else THREE)


@pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="Triton compiles here, for a GPU")
def test_one_factory_takes_both_paths_as_the_token_count_changes(launched):
    """As an engine calls it: decode steps, a prefill past the bound, decode again; each call the spec's answer."""
    case = Case("moe_align_tl", (128, 8, 64), {}, (1, 300, 3, 256, 64), seed=5, geometry={"absent": True})
    check_case(moe_align.moe_align_tl, case, device=DEVICE, max_elements=10**7)
    single = SINGLE if moe_align.HAS_GATHER else THREE
    assert launched == single + THREE + single * 3
