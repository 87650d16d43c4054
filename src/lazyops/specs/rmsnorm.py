"""RMSNorm: ``y = x / sqrt(mean(x**2) + eps) * (weight_offset + weight)`` over the last dimension, math in float32.

``weight_offset=1.0`` is Gemma's RMSNorm (its checkpoints store ``weight - 1``); ``weight_dtype`` lets the weight
be float32 under 16-bit activations, as Gemma and LayerNorm checkpoints keep their norm parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic


class RMSNormKernel(Protocol):
    """What ``rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``y[..., n] = x / sqrt(mean(x**2) + eps) * (weight_offset + weight[n])`` for ``x[..., n]``, in the
        factory's dtype; written into ``out`` when given (``out`` may be ``x`` itself)."""
        ...


@dataclass(frozen=True)
class RMSNormConfig:
    n: int
    dtype: torch.dtype
    eps: float
    weight_dtype: torch.dtype
    weight_offset: float
    label: str


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float = 0.0) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (float64 when testing)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (weight_offset + weight.to(x.dtype))


def norm_options(factory: str, dtype: torch.dtype, weight_dtype: Any, weight_offset: Any) -> tuple[torch.dtype, float]:
    """The weight's dtype (the activations' by default) and offset, checked; what the norm factories share."""
    weight_dtype = dtype if weight_dtype is None else checks.canonical_dtype(factory, weight_dtype)
    if (
        isinstance(weight_offset, bool)
        or not isinstance(weight_offset, (int, float))
        or not math.isfinite(weight_offset)
    ):
        raise KernelInputError(
            f"{factory}: weight_offset must be a finite float (1.0 for Gemma), got {weight_offset!r}"
        )
    return weight_dtype, float(weight_offset)


def norm_config(factory: str, n: Any, dtype: Any, eps: Any, weight_dtype: Any, weight_offset: Any) -> RMSNormConfig:
    """The configuration every RMSNorm factory (plain, residual-add, float8) takes, checked and normalised."""
    n = checks.positive_int(factory, "n", n)
    dtype = checks.canonical_dtype(factory, dtype)
    eps = checks.positive_float(factory, "eps", eps)
    weight_dtype, weight_offset = norm_options(factory, dtype, weight_dtype, weight_offset)
    label = describe_norm(factory, n, dtype, eps, weight_dtype, weight_offset)
    return RMSNormConfig(n, dtype, eps, weight_dtype, weight_offset, label)


def describe_norm(
    factory: str, n: int, dtype: torch.dtype, eps: float, weight_dtype: torch.dtype, offset: float
) -> str:
    """The label of a norm kernel: the options appear only where they differ from their defaults."""
    options: dict[str, Any] = {"n": n, "dtype": dtype, "eps": eps}
    if weight_dtype != dtype:
        options["weight_dtype"] = weight_dtype
    if offset:
        options["weight_offset"] = offset
    return checks.describe(factory, **options)


class RMSNormSpec(KernelSpec):
    name = "rmsnorm_tl"
    inputs = ("x", "weight")
    row_inputs = ("x",)
    out_like = "x"
    out_aliases = ("x",)
    kernel_type = RMSNormKernel

    def configure(
        self,
        n: int,
        dtype: torch.dtype | str,
        eps: float = 1e-6,
        *,
        weight_dtype: torch.dtype | str | None = None,
        weight_offset: float = 0.0,
    ) -> RMSNormConfig:
        """RMSNorm over the last dimension of ``x[..., n]`` with a learned ``weight[n]``.

        Returns ``kernel(x[..., n], weight[n], *, out=None) -> y[..., n]`` in ``dtype``; the math runs in float32.
        ``weight`` is in ``weight_dtype`` (default: ``dtype``; float32 for Gemma-style checkpoints) and scales as
        ``weight_offset + weight`` (``weight_offset=1.0`` is Gemma's RMSNorm). ``x`` may have any leading
        dimensions and strided rows; ``out`` (same shape, ``dtype``) may be ``x`` itself.
        """
        return norm_config(self.name, n, dtype, eps, weight_dtype, weight_offset)

    def check(self, config: RMSNormConfig, x: Any, weight: Any) -> None:
        checks.check_rows(config.label, "x", x, width=config.n, dtype=config.dtype)
        checks.check_tensor(
            config.label, "weight", weight, shape=(config.n,), dtype=config.weight_dtype, device=x.device
        )

    def plain_layout(self, config: RMSNormConfig) -> tuple[checks.PlainInput, ...]:
        return (checks.rows_input(config.n, config.dtype), checks.fixed_input((config.n,), config.weight_dtype))

    def reference(self, config: RMSNormConfig, x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (rmsnorm_reference(x, weight, config.eps, config.weight_offset),)

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name, strategies.epsilons(), **strategies.norm_options())

    def example_inputs(
        self, config: RMSNormConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return draw.randn(tokens, config.n, dtype=config.dtype), draw.randn(config.n, dtype=config.weight_dtype)

    def token_elements(self, config: RMSNormConfig, geometry: Mapping[str, Any]) -> int:
        return config.n

    def traffic(self, config: RMSNormConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        return Traffic(bytes=2 * tokens * config.n * config.dtype.itemsize + config.n * config.weight_dtype.itemsize)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


spec = RMSNormSpec()
