"""``add_rmsnorm_fp8_tl``'s examples: the float8 norms'."""

from __future__ import annotations

from lazyops.specs.add_rmsnorm_fp8 import spec
from lazyops.testing.cases.rmsnorm_fp8 import NormFP8Examples

examples = NormFP8Examples(spec)
