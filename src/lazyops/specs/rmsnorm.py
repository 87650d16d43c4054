"""RMSNorm: ``y = x / sqrt(mean(x**2) + eps) * weight`` over the last dimension, math in float32."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic


class RMSNormKernel(Protocol):
    """What ``rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, /) -> torch.Tensor:
        """``y[M, n] = x / sqrt(mean(x**2) + eps) * weight[n]`` for ``x[M, n]``, in the factory's dtype."""
        ...


@dataclass(frozen=True)
class RMSNormConfig:
    n: int
    dtype: torch.dtype
    eps: float
    label: str


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (float64 when testing)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNormSpec(KernelSpec):
    name = "rmsnorm_tl"
    inputs = ("x", "weight")
    kernel_type = RMSNormKernel

    def configure(self, n: int, dtype: torch.dtype | str, eps: float = 1e-6) -> RMSNormConfig:
        """RMSNorm over the last dimension of ``x[M, n]`` with a learned ``weight[n]``.

        Returns ``kernel(x[M, n], weight[n]) -> y[M, n]`` in ``dtype``; the math runs in float32.
        """
        n = checks.positive_int(self.name, "n", n)
        dtype = checks.canonical_dtype(self.name, dtype)
        eps = checks.positive_float(self.name, "eps", eps)
        return RMSNormConfig(n, dtype, eps, checks.describe(self.name, n=n, dtype=dtype, eps=eps))

    def check(self, config: RMSNormConfig, x: Any, weight: Any) -> None:
        checks.check_tensor(config.label, "x", x, shape=("M", config.n), dtype=config.dtype)
        checks.check_tensor(config.label, "weight", weight, shape=(config.n,), dtype=config.dtype, device=x.device)

    def output(self, config: RMSNormConfig, x: Any, weight: Any) -> torch.Tensor:
        return torch.empty_like(x)

    def reference(self, config: RMSNormConfig, x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (rmsnorm_reference(x, weight, config.eps),)

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name, strategies.epsilons())

    def example_inputs(
        self, config: RMSNormConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return draw.randn(tokens, config.n, dtype=config.dtype), draw.randn(config.n, dtype=config.dtype)

    def token_elements(self, config: RMSNormConfig, geometry: Mapping[str, Any]) -> int:
        return config.n

    def traffic(self, config: RMSNormConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        size = config.dtype.itemsize
        return Traffic(bytes=(2 * tokens * config.n + config.n) * size)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = RMSNormSpec()
