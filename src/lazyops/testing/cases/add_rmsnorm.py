"""``add_rmsnorm_tl``'s examples: the RMSNorm family's."""

from __future__ import annotations

from lazyops.specs.add_rmsnorm import spec
from lazyops.testing.cases.rmsnorm import NormExamples

examples = NormExamples(spec)
