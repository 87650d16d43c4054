"""What the RMSNorm family shares: ``rmsnorm_tl``, ``add_rmsnorm_tl`` and their float8 forms take one configuration
(``n``, ``dtype``, ``eps``, ``weight_dtype``, ``weight_offset``), one weight parameter and one definition of the
norm (and the same conformance cases: ``lazyops.testing.cases.rmsnorm``). A member (``class RMSNormSpec(NormFamily,
KernelSpec)``) declares its parameters, its output and its reference; this mixin writes the factory's arguments
once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import Fixed, Out

#: The norms' learned scale: ``weight[n]`` in ``weight_dtype`` (float32 under 16-bit activations for Gemma-style
#: checkpoints).
WEIGHT = Fixed("weight", shape=("n",), dtype="weight_dtype")


@dataclass(frozen=True)
class NormConfig:
    n: int
    dtype: torch.dtype
    eps: float
    weight_dtype: torch.dtype
    weight_offset: float
    label: str


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float = 0.0) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (float64 when testing)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (weight_offset + weight.to(x.dtype))


def weight_options(
    factory: str, dtype: torch.dtype, weight_dtype: Any, weight_offset: Any
) -> tuple[torch.dtype, float]:
    """The weight's dtype (the activations' by default) and offset, checked."""
    weight_dtype = dtype if weight_dtype is None else _params.canonical_dtype(factory, weight_dtype, "weight_dtype")
    if isinstance(weight_offset, bool) or not isinstance(weight_offset, (int, float)):
        raise KernelInputError(f"{factory}: weight_offset must be a float (1.0 for Gemma), got {weight_offset!r}")
    return weight_dtype, _params.finite_float(factory, "weight_offset", weight_offset, hint=" (1.0 for Gemma)")


def norm_label(factory: str, n: int, dtype: torch.dtype, eps: float, weight_dtype: torch.dtype, offset: float) -> str:
    """How a norm kernel names itself: the options appear only where they differ from their defaults."""
    options: dict[str, Any] = {"n": n, "dtype": dtype, "eps": eps}
    if weight_dtype != dtype:
        options["weight_dtype"] = weight_dtype
    if offset:
        options["weight_offset"] = offset
    return _params.describe(factory, **options)


class NormFamily:
    """The RMSNorm family's factory arguments, a mixin beside ``KernelSpec``. Its factory's docstring is the
    member's ``__doc__``. A member returns the norm of ``x`` (shaped like it), which ``out=x`` may overwrite."""

    name: ClassVar[str]
    out: ClassVar[Out | None] = Out(like="x", may_alias="x")

    def bind(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-6,
        *,
        weight_dtype: torch.dtype | str | None = None,
        weight_offset: float = 0.0,
    ) -> NormConfig:
        factory = self.name
        n = _params.positive_int(factory, "n", n)
        dtype = _params.canonical_dtype(factory, dtype)
        eps = _params.finite_float(factory, "eps", eps, positive=True)
        weight_dtype, weight_offset = weight_options(factory, dtype, weight_dtype, weight_offset)
        return NormConfig(
            n, dtype, eps, weight_dtype, weight_offset, norm_label(factory, n, dtype, eps, weight_dtype, weight_offset)
        )
