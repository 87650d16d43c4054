"""softmax_tl on ``-inf`` (attention masks) in every width class: what ``torch.softmax`` gives, NaN rows included.

The conformance examples draw masked rows too (``lazyops.testing.cases.softmax.MASKS``); this pins each mask against
each way a backend walks a row: in one pass (narrow), and in blocks with an online maximum (past 16384 in Triton,
past 16384 resident features in TileLang), where a first block of nothing but ``-inf`` once gave NaN everywhere.
"""

from __future__ import annotations

import pytest
import torch

from lazyops.testing import Case, check_case
from lazyops.testing.cases.softmax import MASKS

#: One pass, a narrow row packed with others, and rows walked block by block (with a ragged last block).
WIDTHS = (100, 4096, 20000, 40000)


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("mask", [mask for mask in MASKS if mask != "none"])
def test_masked_rows_give_what_torch_gives(kernels, n, mask):
    factory = kernels.factory("softmax_tl")
    for block in (1024, 16384):
        case = Case("softmax_tl", (n, torch.float32), {}, (3, 1), seed=n, geometry={"mask": mask, "block": block})
        check_case(factory, case, device=kernels.device, max_elements=kernels.max_elements)
