"""The gated activations' examples (``silu_and_mul_tl``; ``gelu_and_mul_tl`` adds its approximations)."""

from __future__ import annotations

from typing import Any

import torch

from lazyops.specs._spec import Example
from lazyops.specs.silu_and_mul import spec
from lazyops.testing import strategies
from lazyops.testing.cases._base import Examples


class GatedExamples(Examples):
    def cases(self) -> Any:
        return strategies.row_cases(self.spec.name)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


examples = GatedExamples(spec)
