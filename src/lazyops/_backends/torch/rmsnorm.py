"""RMSNorm: ``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops._backends._checks import canonical_dtype, check_tensor, describe, positive_float, positive_int


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (the kernel passes float32, the tests float64)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNormKernel(Protocol):
    """What ``rmsnorm_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, /) -> torch.Tensor:
        """``y[M, n] = x / sqrt(mean(x**2) + eps) * weight[n]`` for ``x[M, n]``, in the factory's dtype."""
        ...


def rmsnorm_tl(n: int, dtype: torch.dtype | str, eps: float = 1e-6) -> RMSNormKernel:
    """RMSNorm over the last dimension of ``x[M, n]`` with a learned ``weight[n]``.

    Returns ``kernel(x[M, n], weight[n]) -> y[M, n]`` in ``dtype``; the math runs in float32.
    """
    n = positive_int("rmsnorm_tl", "n", n)
    dtype = canonical_dtype("rmsnorm_tl", dtype)
    eps = positive_float("rmsnorm_tl", "eps", eps)
    name = describe("rmsnorm_tl", n=n, dtype=dtype, eps=eps)

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x, shape=("M", n), dtype=dtype)
        check_tensor(name, "weight", weight, shape=(n,), dtype=dtype, device=x.device)
        return rmsnorm_reference(x.float(), weight.float(), eps).to(dtype)

    return rmsnorm
