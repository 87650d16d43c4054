"""Matrix product ``c = a[M, k] @ b[k, n]``, accumulated in float32, in the factory's dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from lazyops.specs import _params
from lazyops.specs._params import Fixed, Out, Rows
from lazyops.specs._spec import KernelSpec


class MatmulKernel(Protocol):
    """What ``matmul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, a: torch.Tensor, b: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``c[..., n] = a[..., k] @ b[k, n]``, accumulated in float32, in the factory's dtype; written into
        ``out`` when given."""
        ...


@dataclass(frozen=True)
class MatmulConfig:
    n: int
    k: int
    dtype: torch.dtype
    label: str


class MatmulSpec(KernelSpec):
    name = "matmul_tl"
    kernel_type = MatmulKernel
    params = (Rows("a", width="k"), Fixed("b", shape=("k", "n")))
    out = Out(width="n")

    def bind(self, n: int, k: int, dtype: torch.dtype | str) -> MatmulConfig:
        """A GEMM with the weight's shape fixed: ``a[M, k] @ b[k, n]``.

        Returns ``kernel(a[..., k], b[k, n], *, out=None) -> c[..., n]`` in ``dtype``; products accumulate in
        float32. ``a`` may have any leading dimensions and strided rows.
        """
        n = _params.positive_int(self.name, "n", n)
        k = _params.positive_int(self.name, "k", k)
        dtype = _params.canonical_dtype(self.name, dtype)
        return MatmulConfig(n, k, dtype, _params.describe(self.name, n=n, k=k, dtype=dtype))

    def reference(self, config: MatmulConfig, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (a @ b,)


spec = MatmulSpec()
