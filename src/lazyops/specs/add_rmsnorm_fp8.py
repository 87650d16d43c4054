"""Residual add fused with RMSNorm quantized to float8, as vLLM's ``fused_add_rms_norm_static_fp8_quant`` (and its
dynamic per-token and per-block forms): ``residual += x`` (in the activations' dtype), then the float8 RMSNorm of
the float32 sum (see ``lazyops.specs.rmsnorm_fp8``, whose scales it takes)."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops.specs._norm import WEIGHT, rmsnorm_reference
from lazyops.specs._params import Rows
from lazyops.specs._spec import KernelSpec
from lazyops.specs.rmsnorm_fp8 import FP8_OUT, SCALES, NormFP8, NormFP8Config

#: the configuration of ``add_rmsnorm_fp8_tl`` (the float8 norms')
AddRMSNormFP8Config = NormFP8Config


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
        the sum times ``weight_offset + weight[n]``, divided by ``scale`` (read if static, else written) and
        saturated to ±448; written into ``out`` when given."""
        ...


class AddRMSNormFP8Spec(NormFP8, KernelSpec):
    """``residual += x``, then RMSNorm of the sum, scaled and converted to float8 for the next GEMM.

    Returns ``kernel(x[..., n], residual[..., n], weight[n], scale, *, out=None) -> y[..., n]`` in
    ``torch.float8_e4m3fn``; ``residual`` is updated in place to ``x + residual`` (rounded to ``dtype``), and
    ``y = saturate(rmsnorm(x + residual) * (weight_offset + weight) / scale)`` is taken of the float32 sum and
    converted once, values beyond ±448 saturating. ``weight_dtype`` and ``weight_offset`` are as for ``rmsnorm_tl``.
    ``scales`` as ``rmsnorm_fp8_tl``'s: ``"static"`` (the default; ``scale[1]`` read, vLLM's
    ``fused_add_rms_norm_static_fp8_quant``), ``"token"`` (``scale[M, 1]`` written) or ``"group"`` (``scale[M, n //
    group_size]`` written, ``column_major``, ``ue8m0``), the dynamic ones bit for bit the float32 norm of the
    float32 sum handed to ``quant_fp8_tl(n, torch.float32, scales, ...)``.
    """

    name = "add_rmsnorm_fp8_tl"
    kernel_type = AddRMSNormFP8Kernel
    params = (Rows("x"), Rows("residual", mutated=True, scale=4.0), WEIGHT, SCALES)
    out = FP8_OUT

    def reference(  # type: ignore[override]
        self, config: NormFP8Config, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """``(what the float8 conversion receives, residual after the call, the scale after the call)``."""
        total = x + residual
        quantized, written = self.quantized(
            config, rmsnorm_reference(total, weight, config.eps, config.weight_offset), scale
        )
        return quantized, total, written


spec = AddRMSNormFP8Spec()
