"""Residual add fused with RMSNorm quantized to float8, in plain PyTorch (the spec:
``lazyops.specs.add_rmsnorm_fp8``).

The sum is formed in float32 and normed as it is; ``residual`` receives it rounded to its dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch.rmsnorm import inverse_rms, norm_weight
from lazyops._backends.torch.rmsnorm_fp8 import quantize, rms_norm_float32
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec


@spec.implementation(strided_rows=True)
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., torch.Tensor]:
    offset = config.weight_offset
    inverse = inverse_rms(config.n, config.eps)

    def add_rmsnorm_fp8(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> torch.Tensor:
        total = x.float().add(residual)  # a new float32 tensor, whatever the dtype (x stays as it was)
        residual.copy_(total)
        return quantize(rms_norm_float32(total, norm_weight(weight, offset), inverse), scale)

    return add_rmsnorm_fp8
