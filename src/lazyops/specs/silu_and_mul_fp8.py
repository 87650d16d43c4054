"""SiLU-and-mul quantized to float8 in the same pass, for the down projection's fp8 GEMM: ``y = saturate(silu(g) * u
/ scale)`` with ``x[..., 2n] = [g, u]``, the product in float32 and converted once, the scales as
``quant_fp8_tl``'s (``lazyops.specs.quant_fp8``): static, per tensor, per token (``scale_ub``) or per group (row- or
column-major, UE8M0). vLLM's ``silu_and_mul_quant`` (static) and ``silu_and_mul_per_token_group_quant_fp8``.

Fused against unfused: the same float32 product handed to ``quant_fp8_tl`` in float32 gives the same bits in a
backend that computes SiLU as its ``silu_and_mul_tl`` does (Triton: ``g / (1 + exp(-g)) * u``; the torch backend:
``F.silu`` then the product); only a 16-bit unfused pair rounds the product to 16 bits first (the README's table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch

from lazyops.specs._spec import KernelSpec
from lazyops.specs.quant_fp8 import QuantFP8Config, QuantFP8Family


@dataclass(frozen=True)
class SiluAndMulFP8Config(QuantFP8Config):
    """``quant_fp8_tl``'s configuration, ``n`` the gate's (and the output's) width, ``x`` a gated input."""

    gated: ClassVar[bool] = True


class SiluAndMulFP8Kernel(Protocol):
    """What ``silu_and_mul_fp8_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        x: torch.Tensor,
        scale: torch.Tensor,
        /,
        *,
        scale_ub: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y[..., n] = saturate(silu(x[..., :n]) * x[..., n:] / scale)`` in ``torch.float8_e4m3fn``; ``scale``
        read (static) or written (dynamic), as ``quant_fp8_tl``'s; written into ``out`` when given."""
        ...


class SiluAndMulFP8Spec(QuantFP8Family, KernelSpec):  # type: ignore[misc]  # (the reference takes named tensors)
    name = "silu_and_mul_fp8_tl"
    kernel_type = SiluAndMulFP8Kernel
    config_type = SiluAndMulFP8Config

    def bind(
        self,
        n: int,
        dtype: torch.dtype | str,
        scales: str = "token",
        *,
        group_size: int = 128,
        column_major: bool = False,
        ue8m0: bool = False,
    ) -> QuantFP8Config:
        """The gate of a SwiGLU MLP quantized to float8 e4m3 for the down projection: ``x[..., 2n]`` holds the gate
        then the up projection.

        Returns ``kernel(x[..., 2n], scale, *, scale_ub=None, out=None) -> y[..., n]`` in ``torch.float8_e4m3fn``,
        ``y = saturate(silu(x[..., :n]) * x[..., n:] / scale)``, the product in float32, converted once. ``scales``
        and its options are ``quant_fp8_tl``'s (``"static"``, ``"tensor"``, ``"token"`` with ``scale_ub``,
        ``"group"`` with ``group_size``, ``column_major``, ``ue8m0``). Replaces vLLM's ``silu_and_mul_quant`` and
        ``silu_and_mul_per_token_group_quant_fp8``.
        """
        return self.configure(n, dtype, scales, group_size, column_major, ue8m0)


spec = SiluAndMulFP8Spec()
