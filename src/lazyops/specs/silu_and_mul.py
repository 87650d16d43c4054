"""SiLU-and-mul, the gate of SwiGLU MLPs: ``y = silu(x[:, :n]) * x[:, n:]``, math in float32."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic


class SiluAndMulKernel(Protocol):
    """What ``silu_and_mul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /) -> torch.Tensor:
        """``y[M, n] = silu(x[:, :n]) * x[:, n:]`` for ``x[M, 2n]``, in the factory's dtype."""
        ...


@dataclass(frozen=True)
class SiluAndMulConfig:
    n: int
    dtype: torch.dtype
    label: str


class SiluAndMulSpec(KernelSpec):
    name = "silu_and_mul_tl"
    inputs = ("x",)
    kernel_type = SiluAndMulKernel

    def configure(self, n: int, dtype: torch.dtype | str) -> SiluAndMulConfig:
        """The gate of a SwiGLU MLP: ``x[M, 2n]`` holds the gate then the up projection.

        Returns ``kernel(x[M, 2n]) -> y[M, n] = silu(x[:, :n]) * x[:, n:]`` in ``dtype``; the math runs in float32.
        """
        n = checks.positive_int(self.name, "n", n)
        dtype = checks.canonical_dtype(self.name, dtype)
        return SiluAndMulConfig(n, dtype, checks.describe(self.name, n=n, dtype=dtype))

    def check(self, config: SiluAndMulConfig, x: Any) -> None:
        checks.check_tensor(config.label, "x", x, shape=("M", 2 * config.n), dtype=config.dtype)

    def output(self, config: SiluAndMulConfig, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], config.n))

    def reference(self, config: SiluAndMulConfig, x: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        n = config.n
        return (torch.nn.functional.silu(x[..., :n]) * x[..., n:],)

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name)

    def example_inputs(
        self, config: SiluAndMulConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return (draw.randn(tokens, 2 * config.n, dtype=config.dtype, scale=3.0),)

    def token_elements(self, config: SiluAndMulConfig, geometry: Mapping[str, Any]) -> int:
        return 2 * config.n

    def traffic(self, config: SiluAndMulConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        return Traffic(bytes=3 * tokens * config.n * config.dtype.itemsize)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = SiluAndMulSpec()
