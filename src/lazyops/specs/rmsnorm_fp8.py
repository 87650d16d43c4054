"""RMSNorm quantized to float8 for the next GEMM, as vLLM's ``rms_norm_static_fp8_quant``.

``y = saturate(rmsnorm(x) * (weight_offset + weight) / scale)`` in float32, converted once to
``torch.float8_e4m3fn``: the norm is never rounded to the activations' dtype on the way, and values beyond the
format's ±448 saturate there (clamp, then convert, as vLLM's ``scaled_fp8_conversion``), where a plain conversion
would give NaN or depend on the hardware's mode. NaN stays NaN. ``scale`` is a one-element float32 tensor (a
per-tensor static scale), not a Python float, so that a CUDA graph captured once serves a scale updated later.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from lazyops.specs._norm import WEIGHT, NormConfig, NormSpec, rmsnorm_reference
from lazyops.specs._params import Fixed, Out, Rows

#: The output's dtype, and the largest finite value it holds (``torch.finfo(torch.float8_e4m3fn).max``).
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0

#: the configuration of ``rmsnorm_fp8_tl`` (the family's; the output dtype is fixed, so it adds none)
RMSNormFP8Config = NormConfig


class RMSNormFP8Kernel(Protocol):
    """What ``rmsnorm_fp8_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, /, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``y[..., n] = saturate(x / sqrt(mean(x**2) + eps) * (weight_offset + weight[n]) / scale[0])`` for
        ``x[..., n]``, in ``torch.float8_e4m3fn``; written into ``out`` when given."""
        ...


def quantize_reference(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What the float8 conversion receives: ``y / scale`` clamped to the format's range (float64 when testing)."""
    return (y / scale).clamp(-FP8_MAX, FP8_MAX)


def draw_scale(draw: Any, config: Any, tokens: int, geometry: Any) -> torch.Tensor:
    """A static scale around 0.02, spread over a few octaves: normed values of about ±1 to ±20 land in float8's
    normal range, the largest ones saturate at ±448 in some examples, a few small ones reach its subnormals."""
    octaves = draw.randn(1, dtype=torch.float32, device="cpu")
    return (0.02 * torch.exp2(octaves)).to(draw.device)


#: A per-tensor scale: one float32 element beside the activations.
SCALE = Fixed("scale", shape=(1,), dtype=torch.float32, draw=draw_scale)
#: The float8 output, shaped like ``x``.
FP8_OUT = Out(like="x", dtype=FP8_DTYPE)


class RMSNormFP8Spec(NormSpec):
    """RMSNorm over the last dimension of ``x[..., n]``, scaled and converted to float8 for the next GEMM.

    Returns ``kernel(x[..., n], weight[n], scale[1], *, out=None) -> y[..., n]`` in ``torch.float8_e4m3fn``:
    ``y = saturate(rmsnorm(x) * (weight_offset + weight) / scale)``, computed in float32 and converted once,
    values beyond ±448 saturating (vLLM's ``rms_norm_static_fp8_quant``). ``scale`` is a float32 tensor of one
    element (a per-tensor static scale; a tensor, so that CUDA graphs see its updates). ``weight_dtype`` and
    ``weight_offset`` are as for ``rmsnorm_tl``. ``x`` may have any leading dimensions and strided rows.
    """

    name = "rmsnorm_fp8_tl"
    kernel_type = RMSNormFP8Kernel
    params = (Rows("x"), WEIGHT, SCALE)
    out = FP8_OUT

    def reference(  # type: ignore[override]
        self, config: NormConfig, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> tuple[torch.Tensor]:
        """The value the float8 conversion receives (the judge compares the kernel's float8 output with it)."""
        return (quantize_reference(rmsnorm_reference(x, weight, config.eps, config.weight_offset), scale),)


spec = RMSNormFP8Spec()
