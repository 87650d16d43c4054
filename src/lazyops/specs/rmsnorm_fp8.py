"""RMSNorm quantized to float8 for the next GEMM, as vLLM's ``rms_norm_static_fp8_quant``.

``y = saturate(rmsnorm(x) * (weight_offset + weight) / scale)`` in float32, converted once to
``torch.float8_e4m3fn``: the norm is never rounded to the activations' dtype on the way, and values beyond the
format's ±448 saturate there (clamp, then convert, as vLLM's ``scaled_fp8_conversion``), where a plain conversion
would give NaN or depend on the hardware's mode. NaN stays NaN. ``scale`` is a one-element float32 tensor (a
per-tensor static scale), not a Python float, so that a CUDA graph captured once serves a scale updated later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic
from lazyops.specs.rmsnorm import RMSNormConfig, norm_config, rmsnorm_reference

#: The output's dtype, and the largest finite value it holds (``torch.finfo(torch.float8_e4m3fn).max``).
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0

#: The static configuration: the same fields as ``rmsnorm_tl``'s (the output dtype is fixed, so it adds none).
RMSNormFP8Config = RMSNormConfig


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


#: The scale as a plain call passes it (see ``check_scale``).
SCALE_INPUT = checks.fixed_input((1,), torch.float32)


def check_scale(label: str, scale: Any, device: torch.device) -> None:
    """A per-tensor scale: one float32 element beside the activations."""
    checks.check_tensor(label, "scale", scale, shape=(1,), dtype=torch.float32, device=device)


def draw_scale(draw: Any) -> torch.Tensor:
    """A static scale around 0.02, spread over a few octaves: normed values of about ±1 to ±20 land in float8's
    normal range, the largest ones saturate at ±448 in some examples, a few small ones reach its subnormals."""
    octaves = draw.randn(1, dtype=torch.float32, device="cpu")
    return (0.02 * torch.exp2(octaves)).to(draw.device)


class RMSNormFP8Spec(KernelSpec):
    name = "rmsnorm_fp8_tl"
    inputs = ("x", "weight", "scale")
    row_inputs = ("x",)
    out_like = "x"
    kernel_type = RMSNormFP8Kernel

    def configure(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-6,
        *,
        weight_dtype: torch.dtype | str | None = None,
        weight_offset: float = 0.0,
    ) -> RMSNormFP8Config:
        """RMSNorm over the last dimension of ``x[..., n]``, scaled and converted to float8 for the next GEMM.

        Returns ``kernel(x[..., n], weight[n], scale[1], *, out=None) -> y[..., n]`` in ``torch.float8_e4m3fn``:
        ``y = saturate(rmsnorm(x) * (weight_offset + weight) / scale)``, computed in float32 and converted once,
        values beyond ±448 saturating (vLLM's ``rms_norm_static_fp8_quant``). ``scale`` is a float32 tensor of one
        element (a per-tensor static scale; a tensor, so that CUDA graphs see its updates). ``weight_dtype`` and
        ``weight_offset`` are as for ``rmsnorm_tl``. ``x`` may have any leading dimensions and strided rows.
        """
        return norm_config(self.name, n, dtype, eps, weight_dtype, weight_offset)

    def check(self, config: RMSNormFP8Config, x: Any, weight: Any, scale: Any) -> None:
        checks.check_rows(config.label, "x", x, width=config.n, dtype=config.dtype)
        checks.check_tensor(
            config.label, "weight", weight, shape=(config.n,), dtype=config.weight_dtype, device=x.device
        )
        check_scale(config.label, scale, x.device)

    def plain_layout(self, config: RMSNormFP8Config) -> tuple[checks.PlainInput, ...]:
        weight = checks.fixed_input((config.n,), config.weight_dtype)
        return (checks.rows_input(config.n, config.dtype), weight, SCALE_INPUT)

    def out_dtype(self, config: RMSNormFP8Config) -> torch.dtype:
        return FP8_DTYPE

    def reference(  # type: ignore[override]
        self, config: RMSNormFP8Config, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
    ) -> tuple[torch.Tensor]:
        """The value the float8 conversion receives (the judge compares the kernel's float8 output with it)."""
        return (quantize_reference(rmsnorm_reference(x, weight, config.eps, config.weight_offset), scale),)

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name, strategies.epsilons(), **strategies.norm_options())

    def example_inputs(
        self, config: RMSNormFP8Config, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return (
            draw.randn(tokens, config.n, dtype=config.dtype),
            draw.randn(config.n, dtype=config.weight_dtype),
            draw_scale(draw),
        )

    def token_elements(self, config: RMSNormFP8Config, geometry: Mapping[str, Any]) -> int:
        return config.n

    def traffic(self, config: RMSNormFP8Config, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        # x read, y written in one byte an element, the weight and the scale read once
        return Traffic(
            bytes=tokens * config.n * (config.dtype.itemsize + 1) + config.n * config.weight_dtype.itemsize + 4
        )

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = RMSNormFP8Spec()
