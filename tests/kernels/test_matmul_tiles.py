"""matmul_tl at prefill sizes, where the GPU backends take their large tiles: judged by the conformance kit in
float64, on GPUs only (the conformance examples stay small enough for Triton's interpreter, so they never reach
these tiles).

The shapes aim at the edges of the large tiles: a ragged last row block (1000 and 4097 tokens against 128-row
tiles), a weight width that is not a multiple of the tile's 256 columns, a width whose rows are not 16-byte
multiples (4100 bf16 columns: TileLang cannot describe them to TMA and falls back to predicated stores), and a
depth that is not a multiple of the 64-deep k-step. Each output is poisoned with NaN before the call, so an
element a tile forgets to write fails the check.
"""

from __future__ import annotations

import pytest
import torch

from lazyops.testing import Case, check_case

SHAPES = (
    (1000, 4096, 4096),
    (4097, 14336, 512),
    (2048, 4100, 1024),
    (1536, 1920, 4160),
)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=str)
def test_large_tiles_cover_every_element_within_tolerance(kernels, m, n, k, dtype) -> None:
    if kernels.on_host:
        pytest.skip("prefill-sized products need a GPU (Triton's interpreter would take minutes)")
    factory = kernels.factory("matmul_tl")
    case = Case("matmul_tl", (n, k, dtype), {}, (m, 7), seed=m + n + k)
    check_case(factory, case, device=kernels.device, max_elements=2**40)


#: Widths and depths for the decode plans (TileLang: 16, 64 and 128 tokens; Triton: 16 and 128): a weight whose
#: rows are 16-byte multiples (TMA loads and stores) and two that are not (TileLang's predicated fallbacks).
DECODE_WEIGHTS = ((4096, 4096), (1000, 1001), (4100, 520))


@pytest.mark.parametrize(("n", "k"), DECODE_WEIGHTS, ids=str)
def test_decode_plans_cover_every_element_across_their_token_buckets(kernels, n, k) -> None:
    """One kernel called at token counts on both sides of each decode bucket's bound, in one case (an engine's
    batch changes between steps): 1, 16, 17, 40, 64, 65, 128 and 129 tokens."""
    if kernels.on_host:
        pytest.skip(
            "the decode plans are GPU programs (Triton's interpreter covers the logic in the conformance tests)"
        )
    factory = kernels.factory("matmul_tl")
    case = Case("matmul_tl", (n, k, torch.bfloat16), {}, (1, 16, 17, 40, 64, 65, 128, 129), seed=n + k)
    check_case(factory, case, device=kernels.device, max_elements=2**40)
