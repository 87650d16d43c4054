"""``silu_and_mul_fp8_tl``'s examples: ``quant_fp8_tl``'s, on gated rows ``[g, u]`` twice as wide."""

from __future__ import annotations

from lazyops.specs.silu_and_mul_fp8 import spec
from lazyops.testing.cases.quant_fp8 import QuantFP8Examples

examples = QuantFP8Examples(spec)
