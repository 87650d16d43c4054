"""``matmul_tl`` against the float64 reference: cases, the reference, the comparison."""

from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from lazyops._backends.torch.matmul import matmul_reference
from lazyops._backends.torch.matmul import matmul_tl as reference_factory  # noqa: F401  (the signature to share)
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import Inputs, check_close, poison

KERNEL = "matmul_tl"
#: Sizes below, at and past the usual tile sides (16 to 128), odd ones, and k not a multiple of any tile.
SIZES = (1, 15, 16, 17, 64, 100, 128, 129, 256, 1000)
#: The cost of a GEMM follows m*n*k, not the size of its inputs: rows are cut to this many products per element
#: of the element budget.
PRODUCTS_PER_ELEMENT = 30


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in float64."""
    return matmul_reference(a.double(), b.double())


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(strategies.feature_sizes(SIZES, max_small=300))
    k = draw(strategies.feature_sizes(SIZES, max_small=300))
    dtype = draw(strategies.dtypes())
    return Case(KERNEL, (n, k, dtype), {}, draw(strategies.token_sequences()), draw(strategies.seeds()))


def check(factory: Callable[..., Any], case: Case, *, device: str, max_elements: int) -> float:
    n, k, dtype = case.args
    kernel = case.build(factory)
    inputs = Inputs(case.seed, device)
    b = inputs.randn(k, n, dtype=dtype)
    worst = 0.0
    for m in case.tokens:
        m = min(m, max(1, PRODUCTS_PER_ELEMENT * max_elements // (n * k)))
        a = inputs.randn(m, k, dtype=dtype)
        poison((m, n), dtype, device)
        worst = max(worst, check_close(kernel(a, b), reference(a, b), dtype, what=f"M={m}"))
    return worst
