"""GELU-and-mul, the gate of GeGLU MLPs: ``y = gelu(x[:, :n], approximate) * x[:, n:]``, math in float32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _checks as checks
from lazyops.specs._gated import GatedSpec
from lazyops.specs._spec import Example

#: GELU's two forms, as ``torch.nn.functional.gelu`` names them: the exact erf form and the tanh approximation.
APPROXIMATIONS = ("none", "tanh")


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


class GeluAndMulSpec(GatedSpec):
    name = "gelu_and_mul_tl"
    kernel_type = GeluAndMulKernel

    def configure(self, n: int, dtype: torch.dtype | str, approximate: str = "none") -> GeluAndMulConfig:
        """The gate of a GeGLU MLP: ``x[M, 2n]`` holds the gate then the up projection.

        Returns ``kernel(x[..., 2n], *, out=None) -> y[..., n] = gelu(x[..., :n], approximate) * x[..., n:]`` in
        ``dtype``; the math runs in float32. ``approximate`` is ``"none"`` (the erf form) or ``"tanh"``, as in
        ``torch.nn.functional.gelu``.
        """
        n = checks.positive_int(self.name, "n", n)
        dtype = checks.canonical_dtype(self.name, dtype)
        if approximate not in APPROXIMATIONS:
            raise KernelInputError(
                f"{self.name}: approximate must be one of {', '.join(map(repr, APPROXIMATIONS))}, got {approximate!r}"
            )
        return GeluAndMulConfig(
            n, dtype, approximate, checks.describe(self.name, n=n, dtype=dtype, approximate=approximate)
        )

    def activation(self, config: GeluAndMulConfig, gate: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(gate, approximate=config.approximate)

    def cases(self) -> Any:
        from hypothesis import strategies as st

        from lazyops.testing import strategies

        return strategies.row_cases(self.name, approximate=st.sampled_from(APPROXIMATIONS))

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype), {"approximate": "tanh"})


spec = GeluAndMulSpec()
