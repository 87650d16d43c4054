"""Matrix product ``a[M, k] @ b[k, n]`` with float32 accumulation."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops._backends._checks import canonical_dtype, check_tensor, describe, positive_int


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The definition, computed in the inputs' dtype (the kernel passes float32, the tests float64)."""
    return a @ b


class MatmulKernel(Protocol):
    """What ``matmul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, a: torch.Tensor, b: torch.Tensor, /) -> torch.Tensor:
        """``c[M, n] = a[M, k] @ b[k, n]``, accumulated in float32, in the factory's dtype."""
        ...


def matmul_tl(n: int, k: int, dtype: torch.dtype | str) -> MatmulKernel:
    """A GEMM with the weight's shape fixed: ``a[M, k] @ b[k, n]``.

    Returns ``kernel(a[M, k], b[k, n]) -> c[M, n]`` in ``dtype``; products accumulate in float32.
    """
    n = positive_int("matmul_tl", "n", n)
    k = positive_int("matmul_tl", "k", k)
    dtype = canonical_dtype("matmul_tl", dtype)
    name = describe("matmul_tl", n=n, k=k, dtype=dtype)

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "a", a, shape=("M", k), dtype=dtype)
        check_tensor(name, "b", b, shape=(k, n), dtype=dtype, device=a.device)
        return matmul_reference(a.float(), b.float()).to(dtype)

    return matmul
