"""Softmax over the last dimension, as ``torch.softmax`` computes it on every input, ``-inf`` included."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from lazyops.specs._arguments import RowConfig, row_config
from lazyops.specs._params import Out, Rows
from lazyops.specs._spec import Example, KernelSpec

#: How the conformance examples mask logits with ``-inf`` (attention masks do this routinely): nowhere, one entry,
#: a span, the whole first ``block`` entries (the first pass of a looping kernel), all but one entry, the whole row
#: (whose softmax is NaN, as torch gives). Masked rows alternate with unmasked ones.
MASKS = ("none", "one", "span", "block", "all-but-one", "all")


class SoftmaxKernel(Protocol):
    """What ``softmax_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``y[..., n] = softmax(x[..., n])`` over the last dimension, in the factory's dtype; written into ``out``
        when given (``out`` may be ``x`` itself)."""
        ...


#: The configuration of ``softmax_tl``: the row width ``n`` and the dtype.
SoftmaxConfig = RowConfig


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


class SoftmaxSpec(KernelSpec):
    name = "softmax_tl"
    kernel_type = SoftmaxKernel
    params = (Rows("x", draw=masked_logits),)
    out = Out(like="x", may_alias="x")

    def bind(self, n: int, dtype: torch.dtype | str) -> RowConfig:
        """Softmax over the last dimension of ``x[M, n]``.

        Returns ``kernel(x[..., n], *, out=None) -> y[..., n]`` in ``dtype``; the math runs in float32. ``-inf``
        logits get 0, and a row that is all ``-inf`` gives NaN, as ``torch.softmax`` does. ``x`` may have any
        leading dimensions and strided rows; ``out`` may be ``x`` itself.
        """
        return row_config(self.name, n, dtype)

    def reference(self, config: SoftmaxConfig, x: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (torch.softmax(x, dim=-1),)

    def cases(self) -> Any:
        from hypothesis import strategies as st

        from lazyops.testing import strategies

        masks = st.fixed_dictionaries({"mask": st.sampled_from(MASKS), "block": st.sampled_from([1024, 4096, 16384])})
        return strategies.row_cases(self.name, geometry=masks)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = SoftmaxSpec()
