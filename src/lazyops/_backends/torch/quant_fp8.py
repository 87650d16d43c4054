"""Activations quantized to float8 in plain PyTorch (the spec: ``lazyops.specs.quant_fp8``).

The spec's definition in float32: the absolute maximum (NaN skipped) of each block, the scale from it, ``x / scale``
clamped to ±448 and converted once. The scale is written into the caller's ``scale`` in place (dynamic scales);
the division uses the float32 scale as stored, so ``y * scale`` dequantizes with what the GEMM reads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.quant_fp8 import FP8_DTYPE, FP8_MAX, QuantFP8Config, absolute_max, dynamic_scale, spec


def quantize_rows(
    config: QuantFP8Config, x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x[M, n]`` (rows may be strided) in float32 over its scale's blocks: ``(saturated x / scale, scale)``."""
    rows = silu_and_mul_float32(x, config.n) if config.gated else x.float()
    if config.scales == "static":
        return rows / scale, scale
    if config.scales == "tensor":
        computed = dynamic_scale(absolute_max(rows.reshape(1, -1)).reshape(1), False)
        return rows / computed, computed
    grouped = rows.reshape(rows.shape[0], config.groups, -1)
    bound = scale_ub if config.scales == "token" and scale_ub is not None and scale_ub.numel() else None
    computed = dynamic_scale(absolute_max(grouped), config.ue8m0, bound)
    return (grouped / computed).reshape(rows.shape), computed.reshape(rows.shape[0], config.groups)


def silu_and_mul_float32(x: torch.Tensor, n: int) -> torch.Tensor:
    """``silu(g) * u`` in float32 for ``x[M, 2n] = [g, u]`` (rows may be strided)."""
    gate, up = x.float().chunk(2, -1)
    return torch.nn.functional.silu(gate).mul_(up)


def quantize(
    config: QuantFP8Config, x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None = None
) -> torch.Tensor:
    """``quant_fp8_tl``'s call on ``x[M, n]``: a dynamic scale written into ``scale``, the float8 result returned
    (also the fp8 norms', on their float32 norm)."""
    scaled, computed = quantize_rows(config, x, scale, scale_ub)
    if config.scales != "static":
        scale.copy_(computed)
    quantized: torch.Tensor = scaled.clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return quantized


@spec.implementation(strided_rows=True)
def quant_fp8_tl(config: QuantFP8Config) -> Callable[..., torch.Tensor]:
    def quant_fp8(x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None = None) -> torch.Tensor:
        return quantize(config, x, scale, scale_ub)

    return quant_fp8
