"""Residual add fused with RMSNorm in plain PyTorch (the spec: ``lazyops.specs.add_rmsnorm``)."""

from __future__ import annotations

from typing import Callable

import torch

from lazyops.specs.add_rmsnorm import AddRMSNormConfig, spec
from lazyops.specs.rmsnorm import rmsnorm_reference


@spec.implementation
def add_rmsnorm_tl(config: AddRMSNormConfig) -> Callable[..., torch.Tensor]:
    dtype, eps = config.dtype, config.eps

    def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        total = x.float() + residual.float()
        residual.copy_(total)
        return rmsnorm_reference(total, weight.float(), eps).to(dtype)

    return add_rmsnorm
