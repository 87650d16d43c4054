"""Residual add fused with RMSNorm, as in vLLM's ``fused_add_rms_norm``."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops._backends._checks import (
    canonical_dtype,
    check_tensor,
    describe,
    positive_float,
    positive_int,
    same_size,
)
from lazyops._backends.torch.rmsnorm import rmsnorm_reference


def add_rmsnorm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rmsnorm(x + residual), x + residual)`` in the inputs' dtype; the caller writes the second back."""
    total = x + residual
    return rmsnorm_reference(total, weight, eps), total


class AddRMSNormKernel(Protocol):
    """What ``add_rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, /) -> torch.Tensor:
        """``residual[M, n] += x[M, n]`` in place, then ``y[M, n]``: RMSNorm of the sum times ``weight[n]``."""
        ...


def add_rmsnorm_tl(n: int, dtype: torch.dtype | str, eps: float = 1e-6) -> AddRMSNormKernel:
    """``residual += x``, then RMSNorm of the sum with ``weight[n]``.

    Returns ``kernel(x[M, n], residual[M, n], weight[n]) -> y[M, n]``; ``residual`` is updated in place to
    ``x + residual`` (rounded to ``dtype``), the norm is taken of the float32 sum.
    """
    n = positive_int("add_rmsnorm_tl", "n", n)
    dtype = canonical_dtype("add_rmsnorm_tl", dtype)
    eps = positive_float("add_rmsnorm_tl", "eps", eps)
    name = describe("add_rmsnorm_tl", n=n, dtype=dtype, eps=eps)

    def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x, shape=("M", n), dtype=dtype)
        check_tensor(name, "residual", residual, shape=("M", n), dtype=dtype, device=x.device)
        check_tensor(name, "weight", weight, shape=(n,), dtype=dtype, device=x.device)
        same_size(name, "the token count M", {"x": x.shape[0], "residual": residual.shape[0]})
        y, total = add_rmsnorm_reference(x.float(), residual.float(), weight.float(), eps)
        residual.copy_(total)
        return y.to(dtype)

    return add_rmsnorm
