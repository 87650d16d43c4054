"""SiLU-and-mul, the gated activation of SwiGLU MLPs: ``silu(x[:, :n]) * x[:, n:]``."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops._backends._checks import canonical_dtype, check_tensor, describe, positive_int


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (the kernel passes float32, the tests float64)."""
    n = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :n]) * x[..., n:]


class SiluAndMulKernel(Protocol):
    """What ``silu_and_mul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /) -> torch.Tensor:
        """``y[M, n] = silu(x[:, :n]) * x[:, n:]`` for ``x[M, 2n]``, in the factory's dtype."""
        ...


def silu_and_mul_tl(n: int, dtype: torch.dtype | str) -> SiluAndMulKernel:
    """The gate of a SwiGLU MLP: ``x[M, 2n]`` holds the gate then the up projection.

    Returns ``kernel(x[M, 2n]) -> y[M, n] = silu(x[:, :n]) * x[:, n:]`` in ``dtype``; the math runs in float32.
    """
    n = positive_int("silu_and_mul_tl", "n", n)
    dtype = canonical_dtype("silu_and_mul_tl", dtype)
    name = describe("silu_and_mul_tl", n=n, dtype=dtype)

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x, shape=("M", 2 * n), dtype=dtype)
        return silu_and_mul_reference(x.float()).to(dtype)

    return silu_and_mul
