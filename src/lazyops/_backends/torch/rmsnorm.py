"""RMSNorm in plain PyTorch (the spec: ``lazyops.specs.rmsnorm``)."""

from __future__ import annotations

from typing import Callable

import torch

from lazyops.specs.rmsnorm import RMSNormConfig, rmsnorm_reference, spec


@spec.implementation
def rmsnorm_tl(config: RMSNormConfig) -> Callable[..., torch.Tensor]:
    dtype, eps = config.dtype, config.eps

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rmsnorm_reference(x.float(), weight.float(), eps).to(dtype)

    return rmsnorm
