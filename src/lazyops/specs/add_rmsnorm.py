"""Residual add fused with RMSNorm, as vLLM's ``fused_add_rms_norm``: ``residual += x``, then RMSNorm of the sum."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops.specs._norm import WEIGHT, NormConfig, NormFamily, rmsnorm_reference
from lazyops.specs._params import Rows
from lazyops.specs._spec import KernelSpec

#: the configuration of ``add_rmsnorm_tl`` (the family's)
AddRMSNormConfig = NormConfig


class AddRMSNormKernel(Protocol):
    """What ``add_rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, /, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``residual[..., n] += x[..., n]`` in place, then ``y[..., n]``: RMSNorm of the sum times
        ``weight_offset + weight[n]``; written into ``out`` when given (``out`` may be ``x`` itself)."""
        ...


class AddRMSNormSpec(NormFamily, KernelSpec):
    """``residual += x``, then RMSNorm of the sum with ``weight[n]``.

    Returns ``kernel(x[..., n], residual[..., n], weight[n], *, out=None) -> y[..., n]``; ``residual`` is updated
    in place to ``x + residual`` (rounded to ``dtype``), the norm is taken of the float32 sum. ``weight_dtype`` and
    ``weight_offset`` are as for ``rmsnorm_tl`` (``weight_offset=1.0``: Gemma). ``out`` may be ``x`` itself
    (vLLM's and FlashInfer's fused add-RMSNorm write the norm over the input).
    """

    name = "add_rmsnorm_tl"
    kernel_type = AddRMSNormKernel
    # a residual stream runs wider than the activation added to it
    params = (Rows("x"), Rows("residual", mutated=True, scale=4.0), WEIGHT)

    def reference(  # type: ignore[override]
        self, config: NormConfig, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y, residual after the call)``: RMSNorm of ``x + residual``, and that sum."""
        total = x + residual
        return rmsnorm_reference(total, weight, config.eps, config.weight_offset), total


spec = AddRMSNormSpec()
