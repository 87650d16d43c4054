"""Residual add fused with RMSNorm in plain PyTorch (the spec: ``lazyops.specs.add_rmsnorm``).

The sum is stored into ``residual`` in its dtype (one rounding, as the spec asks), and the norm is taken of that
stored sum: one in-place add and the RMSNorm route of ``rmsnorm``, with no float32 copy of the sum kept aside.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch.rmsnorm import normalizer
from lazyops.specs.add_rmsnorm import AddRMSNormConfig, spec


@spec.implementation(strided_rows=True)
def add_rmsnorm_tl(config: AddRMSNormConfig) -> Callable[..., torch.Tensor]:
    normalize = normalizer(config.n, config.eps, config.weight_offset, config.dtype)

    def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        residual.add_(x)
        return normalize(residual, weight)

    return add_rmsnorm
