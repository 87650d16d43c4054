"""The RMSNorm family's examples (``rmsnorm_tl``; ``add_rmsnorm_tl`` and the fp8 norms draw the same cases)."""

from __future__ import annotations

from typing import Any

import torch

from lazyops.specs._spec import Example
from lazyops.specs.rmsnorm import spec
from lazyops.testing import strategies
from lazyops.testing.cases._base import Examples


class NormExamples(Examples):
    def cases(self) -> Any:
        return strategies.norm_cases(self.spec)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


examples = NormExamples(spec)
