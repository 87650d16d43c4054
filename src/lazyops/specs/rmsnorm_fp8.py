"""RMSNorm quantized to float8 for the next GEMM, as vLLM's ``rms_norm_static_fp8_quant`` and, with dynamic scales,
its ``rms_norm_dynamic_per_token_quant`` (per token) and ``rms_norm`` then ``per_token_group_quant_fp8`` (per group).

``y = saturate(rmsnorm(x) * (weight_offset + weight) / scale)`` in float32, converted once to
``torch.float8_e4m3fn``: the norm is never rounded to the activations' dtype on the way, and values beyond the
format's ±448 saturate there (clamp, then convert, as vLLM's ``scaled_fp8_conversion``), where a plain conversion
would give NaN or depend on the hardware's mode. NaN stays NaN. With ``scales="static"`` (the default) ``scale`` is a
one-element float32 tensor (a per-tensor static scale), not a Python float, so that a CUDA graph captured once serves
a scale updated later. With ``scales="token"`` or ``"group"`` (``group_size``, ``column_major``, ``ue8m0``) the scales
are ``quant_fp8_tl``'s (``lazyops.specs.quant_fp8``), computed from the float32 norm and written into ``scale``:
the fused kernel is, bit for bit, the float32 norm handed to ``quant_fp8_tl`` in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._norm import WEIGHT, NormConfig, norm_label, rmsnorm_reference, weight_options
from lazyops.specs._params import Out, Rows
from lazyops.specs._spec import KernelSpec
from lazyops.specs.quant_fp8 import FP8_DTYPE, FP8_MAX, SCALE, QuantFP8Config, quant_reference, scale_options

__all__ = ["FP8_DTYPE", "FP8_MAX", "NormFP8", "NormFP8Config", "RMSNormFP8Config", "RMSNormFP8Spec", "spec"]

#: the granularities the norms take: ``quant_fp8_tl``'s, less the per-tensor dynamic scale (a reduction across the
#: whole call: norm, then ``quant_fp8_tl(..., scales="tensor")``)
NORM_SCALES = ("static", "token", "group")


@dataclass(frozen=True)
class NormFP8Config(NormConfig):
    """The family's configuration and the scales' (``quant_fp8_tl``'s options)."""

    scales: str = "static"
    group_size: int = 128
    column_major: bool = False
    ue8m0: bool = False

    @property
    def groups(self) -> int:
        """Scales a row (``quant_fp8_tl``'s): ``n // group_size`` per group, else 1."""
        return self.n // self.group_size if self.scales == "group" else 1

    @cached_property
    def quant(self) -> QuantFP8Config:
        """The ``quant_fp8_tl`` configuration of the float32 norm: what the dynamic scales are computed by."""
        return QuantFP8Config(
            self.n, torch.float32, self.scales, self.group_size, self.column_major, self.ue8m0, self.label
        )


#: the configuration of ``rmsnorm_fp8_tl``
RMSNormFP8Config = NormFP8Config


class RMSNormFP8Kernel(Protocol):
    """What ``rmsnorm_fp8_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, /, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``y[..., n] = saturate(x / sqrt(mean(x**2) + eps) * (weight_offset + weight[n]) / scale)`` for
        ``x[..., n]``, in ``torch.float8_e4m3fn``; ``scale`` read (static) or written (dynamic); written into
        ``out`` when given."""
        ...


def quantize_reference(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What the float8 conversion receives: ``y / scale`` clamped to the format's range (float64 when testing)."""
    return (y / scale).clamp(-FP8_MAX, FP8_MAX)


#: The fp8 norms' ``scale``: ``quant_fp8_tl``'s, ``[1]`` read under ``scales="static"``, else written, shaped by
#: the scales.
SCALES = SCALE
#: The float8 output, shaped like ``x``.
FP8_OUT = Out(like="x", dtype=FP8_DTYPE)


class NormFP8:
    """What the float8 members of the RMSNorm family share (a mixin beside ``KernelSpec``): their factory takes the
    norm's arguments and the scales' options (``quant_fp8_tl``'s, less the per-tensor dynamic scale), ``scale`` (the
    last parameter, :data:`SCALES`) is shaped by them, and the norm is quantized as ``quant_fp8_tl`` quantizes."""

    name: ClassVar[str]
    #: a dynamic scale is the float32 norm's maximum / 448: as close to float64's as the float32 norm is
    derived_results: ClassVar[tuple[str, ...]] = ("scale",)

    def bind(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-6,
        *,
        weight_dtype: torch.dtype | str | None = None,
        weight_offset: float = 0.0,
        scales: str = "static",
        group_size: int = 128,
        column_major: bool = False,
        ue8m0: bool = False,
    ) -> NormFP8Config:
        # no docstring: the factory's is the member's class docstring (``KernelSpec.factory_doc``)
        factory = self.name
        n = _params.positive_int(factory, "n", n)
        dtype = _params.canonical_dtype(factory, dtype)
        eps = _params.finite_float(factory, "eps", eps, positive=True)
        weight_dtype, weight_offset = weight_options(factory, dtype, weight_dtype, weight_offset)
        label = norm_label(factory, n, dtype, eps, weight_dtype, weight_offset)
        if scales == "tensor":
            raise KernelInputError(
                f"{factory}: scales must be one of {', '.join(NORM_SCALES)}, got 'tensor' (a per-tensor dynamic "
                "scale needs the whole call's maximum: the norm, then quant_fp8_tl(..., scales='tensor'))"
            )
        options: dict[str, Any] = {}
        group_size = scale_options(factory, n, options, scales, group_size, column_major, ue8m0)
        if scales != "static":  # a static kernel keeps the label it had before the dynamic scales
            label = label[:-1] + "".join(f", {key}={value!r}" for key, value in options.items()) + ")"
        return NormFP8Config(
            n, dtype, eps, weight_dtype, weight_offset, label, scales, group_size, bool(column_major), bool(ue8m0)
        )

    def quantized(self, config: NormFP8Config, y: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(what the float8 conversion receives, the scale after the call)`` for the norm ``y`` (float64)."""
        if config.scales == "static":
            return quantize_reference(y, scale), scale
        return quant_reference(config.quant, y, scale)


class RMSNormFP8Spec(NormFP8, KernelSpec):
    """RMSNorm over the last dimension of ``x[..., n]``, scaled and converted to float8 for the next GEMM.

    Returns ``kernel(x[..., n], weight[n], scale, *, out=None) -> y[..., n]`` in ``torch.float8_e4m3fn``:
    ``y = saturate(rmsnorm(x) * (weight_offset + weight) / scale)``, computed in float32 and converted once,
    values beyond ±448 saturating. ``weight_dtype`` and ``weight_offset`` are as for ``rmsnorm_tl``. ``x`` may have
    any leading dimensions and strided rows. ``scales``:

    - ``"static"`` (the default): ``scale[1]``, float32, given and read (a tensor, so that CUDA graphs see its
      updates); vLLM's ``rms_norm_static_fp8_quant``;
    - ``"token"``: ``scale[M, 1]`` written, one scale a row, ``amax(|y|) / 448`` (vLLM's
      ``rms_norm_dynamic_per_token_quant``);
    - ``"group"``: ``scale[M, n // group_size]`` written, row-major, or the transpose of a ``[n // group_size, M]``
      buffer with ``column_major=True``; ``ue8m0=True`` rounds them up to powers of two (in vLLM, ``rms_norm``
      then ``per_token_group_quant_fp8``).

    Dynamic scales are ``quant_fp8_tl``'s: the result is, bit for bit, the float32 norm handed to
    ``quant_fp8_tl(n, torch.float32, scales, ...)`` (a zero row's scale is ``1e-10 / 448``, NaN is skipped).
    """

    name = "rmsnorm_fp8_tl"
    kernel_type = RMSNormFP8Kernel
    params = (Rows("x"), WEIGHT, SCALES)
    out = FP8_OUT

    def reference(  # type: ignore[override]
        self, config: NormFP8Config, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """``(what the float8 conversion receives, the scale after the call)``: the judge compares the kernel's
        float8 output with the first."""
        return self.quantized(config, rmsnorm_reference(x, weight, config.eps, config.weight_offset), scale)


spec = RMSNormFP8Spec()
