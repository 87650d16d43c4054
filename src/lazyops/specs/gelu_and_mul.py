"""GELU-and-mul, the gate of GeGLU MLPs: ``y = gelu(x[:, :n], approximate) * x[:, n:]``, math in float32."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic

#: GELU's two forms, as ``torch.nn.functional.gelu`` names them: the exact erf form and the tanh approximation.
APPROXIMATIONS = ("none", "tanh")


class GeluAndMulKernel(Protocol):
    """What ``gelu_and_mul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /) -> torch.Tensor:
        """``y[M, n] = gelu(x[:, :n]) * x[:, n:]`` for ``x[M, 2n]``, in the factory's dtype."""
        ...


@dataclass(frozen=True)
class GeluAndMulConfig:
    n: int
    dtype: torch.dtype
    approximate: str
    label: str


class GeluAndMulSpec(KernelSpec):
    name = "gelu_and_mul_tl"
    inputs = ("x",)
    kernel_type = GeluAndMulKernel

    def configure(self, n: int, dtype: torch.dtype | str, approximate: str = "none") -> GeluAndMulConfig:
        """The gate of a GeGLU MLP: ``x[M, 2n]`` holds the gate then the up projection.

        Returns ``kernel(x[M, 2n]) -> y[M, n] = gelu(x[:, :n], approximate) * x[:, n:]`` in ``dtype``; the math
        runs in float32. ``approximate`` is ``"none"`` (the erf form) or ``"tanh"``, as in
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

    def check(self, config: GeluAndMulConfig, x: Any) -> None:
        checks.check_tensor(config.label, "x", x, shape=("M", 2 * config.n), dtype=config.dtype)

    def output(self, config: GeluAndMulConfig, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], config.n))

    def reference(self, config: GeluAndMulConfig, x: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        n = config.n
        return (torch.nn.functional.gelu(x[..., :n], approximate=config.approximate) * x[..., n:],)

    def cases(self) -> Any:
        from hypothesis import strategies as st

        from lazyops.testing import strategies

        return strategies.row_cases(self.name, approximate=st.sampled_from(APPROXIMATIONS))

    def example_inputs(
        self, config: GeluAndMulConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return (draw.randn(tokens, 2 * config.n, dtype=config.dtype, scale=3.0),)

    def token_elements(self, config: GeluAndMulConfig, geometry: Mapping[str, Any]) -> int:
        return 2 * config.n

    def traffic(self, config: GeluAndMulConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        return Traffic(bytes=3 * tokens * config.n * config.dtype.itemsize)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype), {"approximate": "tanh"})


spec = GeluAndMulSpec()
