"""RMSNorm quantized to float8 in plain PyTorch (the spec: ``lazyops.specs.rmsnorm_fp8``).

CPU: the norm is computed in float32 and handed to the quantization as it is: rounding it to the activations'
dtype first (what ``rmsnorm_tl`` returns) would round twice. Then ``/ scale``, the clamp to ±448, one conversion.

Other devices (CUDA): ``F.rms_norm``'s fused kernel. A float32 ``x`` (or a weight of another dtype than ``x``'s,
Gemma's ``1 + weight`` among them) is normed in float32 with ``weight / scale`` as its weight: one rounding, and one
full-size pass fewer than dividing afterwards. 16-bit ``x`` and weight take the users' composition, ``rms_norm``
in the input dtype, then ``float() / scale``, clamp and convert (in place after the upcast): the float32 route's
upcast copy and extra op cost 1.7x its time at one token on an H200 (94 against 54 µs, the route before this
one), and rounding the norm to 16 bits before float8 moves the error by under 1 % of float8's own
(``tests/kernels/test_fp8_routes.py``; the README's rounding table).

Dynamic scales (``scales="token"``, ``"group"``), on every device: the float32 norm (as ``rmsnorm_tl`` computes it
on that device: :func:`float32_norm`) handed to ``quant_fp8_tl``'s
route (``lazyops._backends.torch.quant_fp8.quantize``), which writes the scales: the unfused pair, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch.quant_fp8 import quantize
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


def float32_norm(
    x: torch.Tensor, weight: torch.Tensor, inverse: Callable[[torch.Tensor], torch.Tensor], n: int, eps: float
) -> torch.Tensor:
    """The float32 norm a dynamic scale is taken from, computed as ``rmsnorm_tl`` computes a float32 norm on ``x``'s
    device (the unfused pair's first half, bit for bit): :func:`rms_norm_float32` on the CPU, ``torch.rms_norm``'s
    fused kernel elsewhere (its rounding differs from the composition's)."""
    if x.is_cpu:
        return rms_norm_float32(x, weight, inverse)
    return torch.rms_norm(x.float(), (n,), weight.float(), eps)


def quantize_on_device(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """The route off the CPU (see the module's docstring): ``x[M, n]`` (rows may be strided), ``weight`` with its
    offset applied."""
    if x.dtype == torch.float32 or weight.dtype != x.dtype:
        folded = torch.div(weight.float(), scale)  # a new float32 tensor, the weight left as it was
        normed = torch.rms_norm(x.float(), (n,), folded, eps)
    else:
        normed = torch.rms_norm(x, (n,), weight, eps).float().div_(scale)
    return normed.clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


@spec.implementation(strided_rows=True)
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., torch.Tensor]:
    offset, n, eps = config.weight_offset, config.n, config.eps
    inverse = inverse_rms(n, eps)
    dynamic, quant = config.scales != "static", config.quant

    def rmsnorm_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        if offset:
            weight = norm_weight(weight, offset)
        if dynamic:
            return quantize(quant, float32_norm(x, weight, inverse, n, eps), scale)
        if x.is_cpu:
            return rms_norm_float32(x, weight, inverse).div_(scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        return quantize_on_device(x, weight, scale, n, eps)

    return rmsnorm_fp8
