"""SiLU-and-mul quantized to float8 in plain PyTorch (the spec: ``lazyops.specs.silu_and_mul_fp8``): the product in
float32, then ``quant_fp8_tl``'s route (``lazyops._backends.torch.quant_fp8``)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch.quant_fp8 import quantize_rows
from lazyops.specs.rmsnorm_fp8 import FP8_DTYPE, FP8_MAX
from lazyops.specs.silu_and_mul_fp8 import SiluAndMulFP8Config, spec


@spec.implementation(strided_rows=True)
def silu_and_mul_fp8_tl(config: SiluAndMulFP8Config) -> Callable[..., torch.Tensor]:
    def silu_and_mul_fp8(x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None = None) -> torch.Tensor:
        scaled, computed = quantize_rows(config, x, scale, scale_ub)
        if config.scales != "static":
            scale.copy_(computed)
        quantized: torch.Tensor = scaled.clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        return quantized

    return silu_and_mul_fp8
