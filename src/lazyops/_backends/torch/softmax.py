"""Softmax over the last dimension."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops._backends._checks import canonical_dtype, check_tensor, describe, positive_int


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """The definition, computed in ``x``'s dtype (the kernel passes float32, the tests float64)."""
    return torch.softmax(x, dim=-1)


class SoftmaxKernel(Protocol):
    """What ``softmax_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /) -> torch.Tensor:
        """``y[M, n] = softmax(x[M, n])`` over the last dimension, in the factory's dtype; ``M`` may vary."""
        ...


def softmax_tl(n: int, dtype: torch.dtype | str) -> SoftmaxKernel:
    """Softmax over the last dimension of ``x[M, n]``.

    Returns ``kernel(x[M, n]) -> y[M, n]`` in ``dtype``; the math runs in float32.
    """
    n = positive_int("softmax_tl", "n", n)
    dtype = canonical_dtype("softmax_tl", dtype)
    name = describe("softmax_tl", n=n, dtype=dtype)

    def softmax(x: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x, shape=("M", n), dtype=dtype)
        return softmax_reference(x.float()).to(dtype)

    return softmax
