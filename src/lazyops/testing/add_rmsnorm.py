"""``add_rmsnorm_tl`` against the float64 reference: cases, the reference, the comparison."""

from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from lazyops._backends.torch.add_rmsnorm import add_rmsnorm_reference
from lazyops._backends.torch.add_rmsnorm import add_rmsnorm_tl as reference_factory  # noqa: F401
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import Inputs, check_close, check_each, poison, rows

KERNEL = "add_rmsnorm_tl"


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, residual after the call)`` in float64: RMSNorm of ``x + residual``, and that sum."""
    return add_rmsnorm_reference(x.double(), residual.double(), weight.double(), eps)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(strategies.feature_sizes())
    dtype = draw(strategies.dtypes())
    eps = draw(strategies.epsilons())
    return Case(KERNEL, (n, dtype), {"eps": eps}, draw(strategies.token_sequences()), draw(strategies.seeds()))


def check(factory: Callable[..., Any], case: Case, *, device: str, max_elements: int) -> float:
    n, dtype = case.args
    eps = case.kwargs["eps"]
    kernel = case.build(factory)
    inputs = Inputs(case.seed, device)
    weight = inputs.randn(n, dtype=dtype)
    worst = 0.0
    for m in case.tokens:
        m = rows(m, n, max_elements)
        x = inputs.randn(m, n, dtype=dtype)
        residual = inputs.randn(m, n, dtype=dtype, scale=4.0)
        y_ref, total = reference(x, residual, weight, eps)
        poison((m, n), dtype, device)
        y = kernel(x, residual, weight)
        worst = max(worst, check_close(y, y_ref, dtype, what=f"M={m}"))
        # The residual is the caller's tensor, updated in place: every element is checked.
        check_each(residual, total, dtype, what=f"M={m}: residual")
    return worst
