"""LayerNorm: ``y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias`` over the last dimension, math in float32.

``torch.nn.functional.layer_norm``'s definition, as vLLM and FlashInfer (``norm.layernorm``) use it: the mean is
subtracted, the variance is the biased one (divided by ``n``), ``eps`` is added inside the square root, and the
result is rounded once, when it is stored. ``weight_dtype`` lets weight and bias be float32 under 16-bit
activations, as LayerNorm checkpoints often keep them (FlashInfer's ``layernorm`` takes bf16 ``x`` with float32
``gamma`` and ``beta``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from lazyops.specs import _params
from lazyops.specs._norm import norm_label, weight_options
from lazyops.specs._params import Fixed, Out, Rows
from lazyops.specs._spec import KernelSpec


class LayerNormKernel(Protocol):
    """What ``layernorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, /, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``y[..., n] = (x - mean(x)) / sqrt(var(x) + eps) * weight[n] + bias[n]`` for ``x[..., n]``, in the
        factory's dtype; written into ``out`` when given (``out`` may be ``x`` itself)."""
        ...


@dataclass(frozen=True)
class LayerNormConfig:
    n: int
    dtype: torch.dtype
    eps: float
    weight_dtype: torch.dtype
    label: str


def layernorm_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (float64 when testing): centred first, so the variance is the mean
    of squares of small numbers, not a difference of two large ones."""
    centred = x - x.mean(dim=-1, keepdim=True)
    variance = centred.pow(2).mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(variance + eps) * weight.to(x.dtype) + bias.to(x.dtype)


class LayerNormSpec(KernelSpec):
    name = "layernorm_tl"
    kernel_type = LayerNormKernel
    params = (
        Rows("x"),
        Fixed("weight", shape=("n",), dtype="weight_dtype"),
        Fixed("bias", shape=("n",), dtype="weight_dtype"),
    )
    out = Out(like="x", may_alias="x")

    def bind(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-5,
        *,
        weight_dtype: torch.dtype | str | None = None,
    ) -> LayerNormConfig:
        """LayerNorm over the last dimension of ``x[..., n]`` with a learned ``weight[n]`` and ``bias[n]``.

        Returns ``kernel(x[..., n], weight[n], bias[n], *, out=None) -> y[..., n]`` in ``dtype``:
        ``torch.nn.functional.layer_norm``'s definition (the biased variance, ``eps`` inside the square root), the
        math in float32 and one rounding at the store. ``weight`` and ``bias`` are in ``weight_dtype`` (default:
        ``dtype``; float32 under 16-bit activations). ``x`` may have any leading dimensions and strided rows;
        ``out`` (same shape, ``dtype``) may be ``x`` itself.
        """
        n = _params.positive_int(self.name, "n", n)
        dtype = _params.canonical_dtype(self.name, dtype)
        eps = _params.finite_float(self.name, "eps", eps, positive=True)
        weight_dtype, _ = weight_options(self.name, dtype, weight_dtype, 0.0)
        return LayerNormConfig(n, dtype, eps, weight_dtype, norm_label(self.name, n, dtype, eps, weight_dtype, 0.0))

    def reference(  # type: ignore[override]
        self, config: LayerNormConfig, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
    ) -> tuple[torch.Tensor]:
        return (layernorm_reference(x, weight, bias, config.eps),)


spec = LayerNormSpec()
