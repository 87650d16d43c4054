"""Residual add fused with RMSNorm, as vLLM's ``fused_add_rms_norm``: ``residual += x``, then RMSNorm of the sum."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic
from lazyops.specs.rmsnorm import RMSNormConfig, norm_config, rmsnorm_reference


class AddRMSNormKernel(Protocol):
    """What ``add_rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, /, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``residual[..., n] += x[..., n]`` in place, then ``y[..., n]``: RMSNorm of the sum times
        ``weight_offset + weight[n]``; written into ``out`` when given (``out`` may be ``x`` itself)."""
        ...


#: the same options as rmsnorm's (n, dtype, eps, weight_dtype, weight_offset)
AddRMSNormConfig = RMSNormConfig


class AddRMSNormSpec(KernelSpec):
    name = "add_rmsnorm_tl"
    inputs = ("x", "residual", "weight")
    row_inputs = ("x", "residual")
    out_like = "x"
    mutates = ("residual",)
    out_aliases = ("x",)
    results = ("out", "residual")
    kernel_type = AddRMSNormKernel

    def configure(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-6,
        *,
        weight_dtype: torch.dtype | str | None = None,
        weight_offset: float = 0.0,
    ) -> AddRMSNormConfig:
        """``residual += x``, then RMSNorm of the sum with ``weight[n]``.

        Returns ``kernel(x[..., n], residual[..., n], weight[n], *, out=None) -> y[..., n]``; ``residual`` is
        updated in place to ``x + residual`` (rounded to ``dtype``), the norm is taken of the float32 sum.
        ``weight_dtype`` and ``weight_offset`` are as for ``rmsnorm_tl`` (``weight_offset=1.0``: Gemma). ``out``
        may be ``x`` itself (vLLM's and FlashInfer's fused add-RMSNorm write the norm over the input).
        """
        return norm_config(self.name, n, dtype, eps, weight_dtype, weight_offset)

    def check(self, config: AddRMSNormConfig, x: Any, residual: Any, weight: Any) -> None:
        label, n, dtype = config.label, config.n, config.dtype
        checks.check_rows(label, "x", x, width=n, dtype=dtype)
        checks.check_rows(label, "residual", residual, width=n, dtype=dtype, device=x.device)
        checks.check_tensor(label, "weight", weight, shape=(n,), dtype=config.weight_dtype, device=x.device)
        checks.same_leading(label, "x", x, "residual", residual)

    def plain_layout(self, config: AddRMSNormConfig) -> tuple[checks.PlainInput, ...]:
        rows = checks.rows_input(config.n, config.dtype)
        return (rows, rows, checks.fixed_input((config.n,), config.weight_dtype))

    def reference(  # type: ignore[override]
        self, config: AddRMSNormConfig, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y, residual after the call)``: RMSNorm of ``x + residual``, and that sum."""
        total = x + residual
        return rmsnorm_reference(total, weight, config.eps, config.weight_offset), total

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name, strategies.epsilons(), **strategies.norm_options())

    def example_inputs(
        self, config: AddRMSNormConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        n, dtype = config.n, config.dtype
        return (
            draw.randn(tokens, n, dtype=dtype),
            draw.randn(tokens, n, dtype=dtype, scale=4.0),
            draw.randn(n, dtype=config.weight_dtype),
        )

    def token_elements(self, config: AddRMSNormConfig, geometry: Mapping[str, Any]) -> int:
        return config.n

    def traffic(self, config: AddRMSNormConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        # x and residual read, residual and y written, the weight read once
        return Traffic(bytes=4 * tokens * config.n * config.dtype.itemsize + config.n * config.weight_dtype.itemsize)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = AddRMSNormSpec()
