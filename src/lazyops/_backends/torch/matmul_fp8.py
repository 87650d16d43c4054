"""Scaled float8 GEMM in plain PyTorch (the spec: ``lazyops.specs.matmul_fp8``).

On the CPU (and any device without a scaled GEMM): both operands dequantised in float32 (each float8 value times
its block's scale), one float32 ``mm``, the bias added, rounded once to the output dtype. On CUDA, per-tensor and
rowwise scales go to ``torch._scaled_mm`` (cuBLASLt's fp8 GEMM, accumulation promoted to float32: the judge
refuses fast accumulation) where it serves the call: compute capability 8.9 or later, ``k`` and ``n`` multiples of
16, a 16-bit output, for rowwise scales bfloat16 (the only one torch's rowwise kernel writes), the bias then added
after (its rowwise kernel takes none in some releases). Block scales, and what ``_scaled_mm`` does not serve, are
dequantised as on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.matmul_fp8 import MatmulFP8Config, dequantised, spec


def scaled_mm_serves(config: MatmulFP8Config) -> bool:
    """Whether ``torch._scaled_mm`` takes this configuration's calls (on a device of compute capability 8.9+)."""
    if config.scales == "block" or config.k % 16 or config.n % 16 or not hasattr(torch, "_scaled_mm"):
        return False
    return config.dtype == torch.bfloat16 or (config.scales == "tensor" and config.dtype == torch.float16)


@spec.implementation(strided_rows=True)
def matmul_fp8_tl(config: MatmulFP8Config) -> Callable[..., torch.Tensor]:
    dtype, rowwise = config.dtype, config.scales == "rowwise"
    serves = scaled_mm_serves(config)
    capable: dict[int, bool] = {}  # per CUDA device index: compute capability 8.9 or later

    def on_scaled_mm(a: torch.Tensor) -> bool:
        if not serves or not a.is_cuda:
            return False
        index = a.get_device()
        if index not in capable:
            capable[index] = torch.cuda.get_device_capability(index) >= (8, 9)
        return capable[index]

    def matmul_fp8(
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        bias = bias if bias is not None and bias.numel() else None
        if on_scaled_mm(a):
            scale_b_row = scale_b.reshape(1, -1) if rowwise else scale_b
            fused_bias = None if rowwise else bias
            c: torch.Tensor = torch._scaled_mm(
                a.contiguous(), b.t(), scale_a=scale_a, scale_b=scale_b_row, bias=fused_bias, out_dtype=dtype
            )
            return c.add_(bias) if rowwise and bias is not None else c
        a_values, b_values = dequantised(config, a, b, scale_a, scale_b)
        product = a_values @ b_values.T
        if bias is not None:
            product += bias
        return product.to(dtype)

    return matmul_fp8
