"""GELU-and-mul, the gate of GeGLU MLPs: ``y = gelu(x[:, :n], approximate) * x[:, n:]``, math in float32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._gated import GatedFamily
from lazyops.specs._spec import KernelSpec

#: GELU's two forms, as ``torch.nn.functional.gelu`` names them: the exact erf form and the tanh approximation.
APPROXIMATIONS = ("none", "tanh")

# How the backends compute the gate's factor without cancellation. ``0.5 * g * (1 + erf(g / sqrt 2))`` and
# ``0.5 * g * (1 + tanh(u))`` (torch's own, and ``F.gelu``'s in float32) subtract nearly equal numbers for a
# negative gate: relative error 1.2e-5 at g = -3.3 in float32, past its 1e-5 tolerance, 4 % at g = -5. The
# backends use ``1 + erf(z) = erfc(-z)`` and ``1 + tanh(u) = 2 * sigmoid(2u)`` instead
# (``tests/kernels/test_gelu_tail.py``).

#: ``1 / sqrt(2)``: the erf form is ``0.5 * g * erfc(-g * SQRT_HALF)``.
SQRT_HALF = 0.7071067811865476
#: The tanh form is ``g * sigmoid(2u)`` with ``2u = g * (TANH_LINEAR + TANH_CUBIC * g * g)``.
TANH_LINEAR = 1.5957691216057308  # 2 * sqrt(2 / pi)
TANH_CUBIC = TANH_LINEAR * 0.044715
#: For kernel languages without ``erfc`` (Triton, TileLang): ``erfc(a) = t * exp(-a * a + P(t))`` for ``a >= 0``,
#: ``t = 1 / (1 + a / 2)``, ``P`` the polynomial of these coefficients (constant term first), and
#: ``erfc(-a) = 2 - erfc(a)``: fractional error below 1.2e-7 everywhere (Numerical Recipes' ``erfcc``; 1.04e-7 on
#: [0, 10] against ``math.erfc``, ``tests/kernels/test_gelu_tail.py``).
ERFC_COEFFICIENTS = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def erfc_of_nonnegative(a: float) -> float:
    """``erfc(a)`` for ``a >= 0`` by :data:`ERFC_COEFFICIENTS`, in Python: what the kernels compute, to test."""
    import math

    t = 1.0 / (1.0 + 0.5 * a)
    polynomial = 0.0
    for coefficient in reversed(ERFC_COEFFICIENTS):
        polynomial = polynomial * t + coefficient
    return t * math.exp(-a * a + polynomial)


class GeluAndMulKernel(Protocol):
    """What ``gelu_and_mul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``y[M, n] = gelu(x[:, :n]) * x[:, n:]`` for ``x[..., 2n]``, in the factory's dtype;
        written into ``out`` when given."""
        ...


@dataclass(frozen=True)
class GeluAndMulConfig:
    n: int
    dtype: torch.dtype
    approximate: str
    label: str


class GeluAndMulSpec(GatedFamily, KernelSpec):
    name = "gelu_and_mul_tl"
    kernel_type = GeluAndMulKernel

    def bind(self, n: int, dtype: torch.dtype | str, approximate: str = "none") -> GeluAndMulConfig:
        """The gate of a GeGLU MLP: ``x[M, 2n]`` holds the gate then the up projection.

        Returns ``kernel(x[..., 2n], *, out=None) -> y[..., n] = gelu(x[..., :n], approximate) * x[..., n:]`` in
        ``dtype``; the math runs in float32. ``approximate`` is ``"none"`` (the erf form) or ``"tanh"``, as in
        ``torch.nn.functional.gelu``.
        """
        n = _params.positive_int(self.name, "n", n)
        dtype = _params.canonical_dtype(self.name, dtype)
        if approximate not in APPROXIMATIONS:
            raise KernelInputError(
                f"{self.name}: approximate must be one of {', '.join(map(repr, APPROXIMATIONS))}, got {approximate!r}"
            )
        return GeluAndMulConfig(
            n, dtype, approximate, _params.describe(self.name, n=n, dtype=dtype, approximate=approximate)
        )

    def activation(self, config: GeluAndMulConfig, gate: torch.Tensor) -> torch.Tensor:
        # The definition in the forms that do not cancel: even in float64 ``F.gelu``'s ``1 + tanh(u)`` is off by
        # 4e-4 at g = -6.5 (1 + tanh(u) = 8.6e-13 there), and ``1 + erf`` by 7 % at g = -8.
        if config.approximate == "tanh":
            return gate * torch.sigmoid(gate * (TANH_LINEAR + TANH_CUBIC * gate * gate))
        complement: torch.Tensor = torch.special.erfc(gate * -SQRT_HALF)  # 1 + erf(g / sqrt 2)
        return 0.5 * gate * complement


spec = GeluAndMulSpec()
