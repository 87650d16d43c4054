"""Residual add fused with RMSNorm quantized to float8, in plain PyTorch (the spec:
``lazyops.specs.add_rmsnorm_fp8``).

CPU: the sum is formed in float32 and normed as it is; ``residual`` receives it rounded to its dtype. Other
devices: ``residual += x`` in place, then ``rmsnorm_fp8``'s route on the stored sum (16-bit: the norm of the
rounded sum, as the users' composition and ``add_rmsnorm`` take it; float32: the same numbers). Dynamic scales, on
every device: the float32 sum, its float32 norm, then ``quant_fp8_tl``'s route (the unfused pair, bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch.quant_fp8 import quantize
from lazyops._backends.torch.rmsnorm import inverse_rms, norm_weight
from lazyops._backends.torch.rmsnorm_fp8 import float32_norm, quantize_on_device, rms_norm_float32
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec
from lazyops.specs.rmsnorm_fp8 import FP8_DTYPE, FP8_MAX


@spec.implementation(strided_rows=True)
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., torch.Tensor]:
    offset, n, eps = config.weight_offset, config.n, config.eps
    inverse = inverse_rms(n, eps)
    dynamic, quant = config.scales != "static", config.quant

    def add_rmsnorm_fp8(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> torch.Tensor:
        if offset:
            weight = norm_weight(weight, offset)
        if not x.is_cpu and not dynamic:
            residual.add_(x)
            return quantize_on_device(residual, weight, scale, n, eps)
        upcast = x.float()
        # one new float32 tensor, whatever the dtype (x stays as it was)
        total = upcast.add_(residual) if upcast is not x else torch.add(x, residual)
        residual.copy_(total)
        if dynamic:
            return quantize(quant, float32_norm(total, weight, inverse, n, eps), scale)
        return rms_norm_float32(total, weight, inverse).div_(scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)

    return add_rmsnorm_fp8
