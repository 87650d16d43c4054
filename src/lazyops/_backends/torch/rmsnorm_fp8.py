"""RMSNorm quantized to float8 in plain PyTorch (the spec: ``lazyops.specs.rmsnorm_fp8``).

The norm is computed in float32 and handed to the quantization as it is: rounding it to the activations' dtype
first (what ``rmsnorm_tl`` returns) would round twice. Then ``/ scale``, the clamp to ±448, one conversion.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch.rmsnorm import inverse_rms, norm_weight
from lazyops.specs.rmsnorm_fp8 import FP8_DTYPE, FP8_MAX, RMSNormFP8Config, spec


def rms_norm_float32(
    x: torch.Tensor, weight: torch.Tensor, inverse: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """RMSNorm of ``x[M, n]`` (rows may be strided) as a new float32 tensor, never rounded to ``x``'s dtype;
    ``inverse`` is the configuration's :func:`~lazyops._backends.torch.rmsnorm.inverse_rms`."""
    upcast = x.float()
    # For float32 input ``.float()`` is ``x`` itself, which must stay as it was: the first product is a new tensor.
    return torch.mul(upcast, inverse(upcast)).mul_(weight)


def quantize(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``y`` (float32, a tensor of the caller's own) divided by ``scale``, saturated and converted to float8."""
    return y.div_(scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


@spec.implementation(strided_rows=True)
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., torch.Tensor]:
    offset = config.weight_offset
    inverse = inverse_rms(config.n, config.eps)

    def rmsnorm_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return quantize(rms_norm_float32(x, norm_weight(weight, offset), inverse), scale)

    return rmsnorm_fp8
