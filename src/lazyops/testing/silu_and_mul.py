"""``silu_and_mul_tl`` against the float64 reference: cases, the reference, the comparison."""

from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from lazyops._backends.torch.silu_and_mul import silu_and_mul_reference
from lazyops._backends.torch.silu_and_mul import silu_and_mul_tl as reference_factory  # noqa: F401
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import Inputs, check_close, poison, rows

KERNEL = "silu_and_mul_tl"
#: Output widths: block boundaries and their neighbours, and more than one column block (4096 in Triton).
WIDTHS = (1, 3, 64, 100, 128, 1000, 1024, 4096, 5000, 8192, 14336)


def reference(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[:, :n]) * x[:, n:]`` in float64."""
    return silu_and_mul_reference(x.double())


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(strategies.feature_sizes(WIDTHS))
    dtype = draw(strategies.dtypes())
    return Case(KERNEL, (n, dtype), {}, draw(strategies.token_sequences()), draw(strategies.seeds()))


def check(factory: Callable[..., Any], case: Case, *, device: str, max_elements: int) -> float:
    n, dtype = case.args
    kernel = case.build(factory)
    inputs = Inputs(case.seed, device)
    worst = 0.0
    for m in case.tokens:
        m = rows(m, 2 * n, max_elements)
        x = inputs.randn(m, 2 * n, dtype=dtype, scale=3.0)
        poison((m, n), dtype, device)
        worst = max(worst, check_close(kernel(x), reference(x), dtype, what=f"M={m}"))
    return worst
