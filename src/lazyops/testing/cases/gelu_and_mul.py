"""``gelu_and_mul_tl``'s examples: both approximations; the benchmark times the tanh form engines use."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example
from lazyops.specs.gelu_and_mul import APPROXIMATIONS, spec
from lazyops.testing import strategies
from lazyops.testing.cases._base import Examples


class GeluAndMulExamples(Examples):
    def cases(self) -> Any:
        return strategies.row_cases(self.spec.name, approximate=st.sampled_from(APPROXIMATIONS))

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype), {"approximate": "tanh"})


examples = GeluAndMulExamples(spec)
