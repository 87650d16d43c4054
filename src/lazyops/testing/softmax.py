"""``softmax_tl`` against the float64 reference: cases, the reference, the comparison."""

from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from lazyops._backends.torch.softmax import softmax_reference
from lazyops._backends.torch.softmax import softmax_tl as reference_factory  # noqa: F401  (the signature to share)
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import Inputs, check_close, poison, rows

KERNEL = "softmax_tl"


def reference(x: torch.Tensor) -> torch.Tensor:
    """softmax of ``x`` over its last dimension, in float64."""
    return softmax_reference(x.double())


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(strategies.feature_sizes())
    dtype = draw(strategies.dtypes())
    return Case(KERNEL, (n, dtype), {}, draw(strategies.token_sequences()), draw(strategies.seeds()))


def check(factory: Callable[..., Any], case: Case, *, device: str, max_elements: int) -> float:
    n, dtype = case.args
    kernel = case.build(factory)
    inputs = Inputs(case.seed, device)
    worst = 0.0
    for m in case.tokens:
        m = rows(m, n, max_elements)
        x = inputs.randn(m, n, dtype=dtype, scale=3.0)
        poison((m, n), dtype, device)
        worst = max(worst, check_close(kernel(x), reference(x), dtype, what=f"M={m}"))
    return worst
