"""``matmul_tl``'s examples: sizes around the tiles' edges; its cost is counted in products, not elements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.matmul import MatmulConfig, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Examples

#: Sizes below, at and past the usual tile sides (16 to 128), odd ones, and k not a multiple of any tile.
SIZES = (1, 15, 16, 17, 64, 100, 128, 129, 256, 1000)
#: A GEMM's cost follows m*n*k, not its inputs' size: a token is charged n*k / this many elements of the budget.
PRODUCTS_PER_ELEMENT = 30


class MatmulExamples(Examples):
    def cases(self) -> Any:
        sizes = strategies.feature_sizes(SIZES, max_small=300)
        return st.builds(
            lambda n, k, dtype, tokens, seed: Case(self.spec.name, (n, k, dtype), {}, tokens, seed),
            sizes,
            sizes,
            strategies.dtypes(),
            strategies.token_sequences(),
            strategies.seeds(),
        )

    def token_elements(self, config: MatmulConfig, geometry: Mapping[str, Any]) -> int:
        return max(1, config.n * config.k // PRODUCTS_PER_ELEMENT)

    def traffic(self, config: MatmulConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        moved = super().traffic(config, tokens, geometry).bytes
        return Traffic(bytes=moved, flops=2 * tokens * config.n * config.k, bound="compute")

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, 4096, dtype))


examples = MatmulExamples(spec)
