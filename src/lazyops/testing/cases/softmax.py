"""``softmax_tl``'s examples: logits masked with ``-inf`` as attention masks do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example
from lazyops.specs.softmax import SoftmaxConfig, spec
from lazyops.testing import strategies
from lazyops.testing.cases._base import Draw, Examples

#: How the conformance examples mask logits with ``-inf`` (attention masks do this routinely): nowhere, one entry,
#: a span, the whole first ``block`` entries (the first pass of a looping kernel), all but one entry, the whole row
#: (whose softmax is NaN, as torch gives). Masked rows alternate with unmasked ones.
MASKS = ("none", "one", "span", "block", "all-but-one", "all")


def masked_logits(draw: Any, config: SoftmaxConfig, tokens: int, geometry: Any) -> torch.Tensor:
    """Logits of spread 3, every other row masked with ``-inf`` as ``geometry["mask"]`` says (:data:`MASKS`)."""
    x = draw.randn(tokens, config.n, dtype=torch.float32, scale=3.0, device="cpu")
    mask = geometry.get("mask", "none")
    n = config.n
    for row in range(0, tokens, 2):
        if mask == "one":
            x[row, int(draw.randint(n, dtype=torch.int64, device="cpu"))] = float("-inf")
        elif mask == "span":
            start, length = (int(v) for v in draw.randint(n, 2, dtype=torch.int64, device="cpu"))
            x[row, start : start + length + 1] = float("-inf")
        elif mask == "block":
            x[row, : geometry["block"]] = float("-inf")
        elif mask == "all-but-one":
            keep = int(draw.randint(n, dtype=torch.int64, device="cpu"))
            x[row, :keep] = x[row, keep + 1 :] = float("-inf")
        elif mask == "all":
            x[row] = float("-inf")
    logits: torch.Tensor = x.to(config.dtype).to(draw.device)
    return logits


class SoftmaxExamples(Examples):
    draws: ClassVar[Mapping[str, Draw]] = {"x": masked_logits}

    def cases(self) -> Any:
        masks = st.fixed_dictionaries({"mask": st.sampled_from(MASKS), "block": st.sampled_from([1024, 4096, 16384])})
        return strategies.row_cases(self.spec.name, geometry=masks)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


examples = SoftmaxExamples(spec)
