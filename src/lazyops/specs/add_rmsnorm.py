"""Residual add fused with RMSNorm, as vLLM's ``fused_add_rms_norm``: ``residual += x``, then RMSNorm of the sum."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic
from lazyops.specs.rmsnorm import rmsnorm_reference


class AddRMSNormKernel(Protocol):
    """What ``add_rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, /) -> torch.Tensor:
        """``residual[M, n] += x[M, n]`` in place, then ``y[M, n]``: RMSNorm of the sum times ``weight[n]``."""
        ...


@dataclass(frozen=True)
class AddRMSNormConfig:
    n: int
    dtype: torch.dtype
    eps: float
    label: str


class AddRMSNormSpec(KernelSpec):
    name = "add_rmsnorm_tl"
    inputs = ("x", "residual", "weight")
    mutates = ("residual",)
    results = ("out", "residual")
    kernel_type = AddRMSNormKernel

    def configure(self, n: int, dtype: torch.dtype | str, eps: float = 1e-6) -> AddRMSNormConfig:
        """``residual += x``, then RMSNorm of the sum with ``weight[n]``.

        Returns ``kernel(x[M, n], residual[M, n], weight[n]) -> y[M, n]``; ``residual`` is updated in place to
        ``x + residual`` (rounded to ``dtype``), the norm is taken of the float32 sum.
        """
        n = checks.positive_int(self.name, "n", n)
        dtype = checks.canonical_dtype(self.name, dtype)
        eps = checks.positive_float(self.name, "eps", eps)
        return AddRMSNormConfig(n, dtype, eps, checks.describe(self.name, n=n, dtype=dtype, eps=eps))

    def check(self, config: AddRMSNormConfig, x: Any, residual: Any, weight: Any) -> None:
        label, n, dtype = config.label, config.n, config.dtype
        checks.check_tensor(label, "x", x, shape=("M", n), dtype=dtype)
        checks.check_tensor(label, "residual", residual, shape=("M", n), dtype=dtype, device=x.device)
        checks.check_tensor(label, "weight", weight, shape=(n,), dtype=dtype, device=x.device)
        checks.same_size(label, "the token count M", {"x": x.shape[0], "residual": residual.shape[0]})

    def output(self, config: AddRMSNormConfig, x: Any, residual: Any, weight: Any) -> torch.Tensor:
        return torch.empty_like(x)

    def reference(  # type: ignore[override]
        self, config: AddRMSNormConfig, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y, residual after the call)``: RMSNorm of ``x + residual``, and that sum."""
        total = x + residual
        return rmsnorm_reference(total, weight, config.eps), total

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name, strategies.epsilons())

    def example_inputs(
        self, config: AddRMSNormConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        n, dtype = config.n, config.dtype
        return (
            draw.randn(tokens, n, dtype=dtype),
            draw.randn(tokens, n, dtype=dtype, scale=4.0),
            draw.randn(n, dtype=dtype),
        )

    def token_elements(self, config: AddRMSNormConfig, geometry: Mapping[str, Any]) -> int:
        return config.n

    def traffic(self, config: AddRMSNormConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        # x and residual read, residual and y written, the weight read once
        return Traffic(bytes=(4 * tokens * config.n + config.n) * config.dtype.itemsize)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = AddRMSNormSpec()
