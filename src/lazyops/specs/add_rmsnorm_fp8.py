"""Residual add fused with RMSNorm quantized to float8, as vLLM's ``fused_add_rms_norm_static_fp8_quant``:
``residual += x`` (in the activations' dtype), then the float8 RMSNorm of the float32 sum (see
``lazyops.specs.rmsnorm_fp8``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic
from lazyops.specs.add_rmsnorm import AddRMSNormConfig
from lazyops.specs.rmsnorm import norm_config, rmsnorm_reference
from lazyops.specs.rmsnorm_fp8 import FP8_DTYPE, SCALE_INPUT, check_scale, draw_scale, quantize_reference

#: The static configuration: the same fields as ``add_rmsnorm_tl``'s.
AddRMSNormFP8Config = AddRMSNormConfig


class AddRMSNormFP8Kernel(Protocol):
    """What ``add_rmsnorm_fp8_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        /,
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``residual[..., n] += x[..., n]`` in place, then ``y[..., n]`` in ``torch.float8_e4m3fn``: RMSNorm of
        the sum times ``weight_offset + weight[n]``, divided by ``scale[0]`` and saturated to ±448; written into
        ``out`` when given."""
        ...


class AddRMSNormFP8Spec(KernelSpec):
    name = "add_rmsnorm_fp8_tl"
    inputs = ("x", "residual", "weight", "scale")
    row_inputs = ("x", "residual")
    out_like = "x"
    mutates = ("residual",)
    results = ("out", "residual")
    kernel_type = AddRMSNormFP8Kernel

    def configure(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-6,
        *,
        weight_dtype: torch.dtype | str | None = None,
        weight_offset: float = 0.0,
    ) -> AddRMSNormFP8Config:
        """``residual += x``, then RMSNorm of the sum, scaled and converted to float8 for the next GEMM.

        Returns ``kernel(x[..., n], residual[..., n], weight[n], scale[1], *, out=None) -> y[..., n]`` in
        ``torch.float8_e4m3fn``; ``residual`` is updated in place to ``x + residual`` (rounded to ``dtype``), and
        ``y = saturate(rmsnorm(x + residual) * (weight_offset + weight) / scale)`` is taken of the float32 sum and
        converted once, values beyond ±448 saturating (vLLM's ``fused_add_rms_norm_static_fp8_quant``). ``scale``
        is a float32 tensor of one element; ``weight_dtype`` and ``weight_offset`` are as for ``rmsnorm_tl``.
        """
        return norm_config(self.name, n, dtype, eps, weight_dtype, weight_offset)

    def check(self, config: AddRMSNormFP8Config, x: Any, residual: Any, weight: Any, scale: Any) -> None:
        label, n, dtype = config.label, config.n, config.dtype
        checks.check_rows(label, "x", x, width=n, dtype=dtype)
        checks.check_rows(label, "residual", residual, width=n, dtype=dtype, device=x.device)
        checks.check_tensor(label, "weight", weight, shape=(n,), dtype=config.weight_dtype, device=x.device)
        check_scale(label, scale, x.device)
        checks.same_leading(label, "x", x, "residual", residual)

    def plain_layout(self, config: AddRMSNormFP8Config) -> tuple[checks.PlainInput, ...]:
        rows = checks.rows_input(config.n, config.dtype)
        return (rows, rows, checks.fixed_input((config.n,), config.weight_dtype), SCALE_INPUT)

    def out_dtype(self, config: AddRMSNormFP8Config) -> torch.dtype:
        return FP8_DTYPE

    def reference(  # type: ignore[override]
        self,
        config: AddRMSNormFP8Config,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(what the float8 conversion receives, residual after the call)``."""
        total = x + residual
        return quantize_reference(rmsnorm_reference(total, weight, config.eps, config.weight_offset), scale), total

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name, strategies.epsilons(), **strategies.norm_options())

    def example_inputs(
        self, config: AddRMSNormFP8Config, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        n, dtype = config.n, config.dtype
        return (
            draw.randn(tokens, n, dtype=dtype),
            draw.randn(tokens, n, dtype=dtype, scale=4.0),
            draw.randn(n, dtype=config.weight_dtype),
            draw_scale(draw),
        )

    def token_elements(self, config: AddRMSNormFP8Config, geometry: Mapping[str, Any]) -> int:
        return config.n

    def traffic(self, config: AddRMSNormFP8Config, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        # x and residual read, residual written, y written in one byte an element, the weight and scale read once
        item = config.dtype.itemsize
        return Traffic(bytes=tokens * config.n * (3 * item + 1) + config.n * config.weight_dtype.itemsize + 4)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = AddRMSNormFP8Spec()
