"""``rmsnorm_tl`` against the float64 reference: cases, the reference, the comparison."""

from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from lazyops._backends.torch.rmsnorm import rmsnorm_reference
from lazyops._backends.torch.rmsnorm import rmsnorm_tl as reference_factory  # noqa: F401  (the signature to share)
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import Inputs, check_close, poison, rows

KERNEL = "rmsnorm_tl"


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of ``x`` with ``weight``, in float64."""
    return rmsnorm_reference(x.double(), weight.double(), eps)


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
        poison((m, n), dtype, device)
        worst = max(worst, check_close(kernel(x, weight), reference(x, weight, eps), dtype, what=f"M={m}"))
    return worst
