"""RMSNorm over the last dimension, math in float32; ``weight_offset=1.0`` and a float32 weight for Gemma."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops.specs._norm import WEIGHT, NormFamily, rmsnorm_reference
from lazyops.specs._norm import NormConfig as RMSNormConfig
from lazyops.specs._params import Rows
from lazyops.specs._spec import KernelSpec


class RMSNormKernel(Protocol):
    """What ``rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``y[..., n] = x / sqrt(mean(x**2) + eps) * (weight_offset + weight[n])`` for ``x[..., n]``, in the
        factory's dtype; written into ``out`` when given (``out`` may be ``x`` itself)."""


class RMSNormSpec(NormFamily, KernelSpec):
    """RMSNorm over the last dimension of ``x[..., n]`` with a learned ``weight[n]``.

    Returns ``kernel(x[..., n], weight[n], *, out=None) -> y[..., n]`` in ``dtype``; the math runs in float32.
    ``weight`` is in ``weight_dtype`` (default: ``dtype``; float32 for Gemma-style checkpoints) and scales as
    ``weight_offset + weight`` (``weight_offset=1.0`` is Gemma's RMSNorm). ``x`` may have any leading dimensions
    and strided rows; ``out`` (same shape, ``dtype``) may be ``x`` itself.
    """

    name = "rmsnorm_tl"
    kernel_type = RMSNormKernel
    params = (Rows("x"), WEIGHT)

    def reference(self, config: RMSNormConfig, x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (rmsnorm_reference(x, weight, config.eps, config.weight_offset),)


spec = RMSNormSpec()
