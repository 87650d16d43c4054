"""Matrix product ``c = a[M, k] @ b[k, n]``, accumulated in float32, in the factory's dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops.specs import _arguments as arguments
from lazyops.specs._params import Fixed, Out, Rows
from lazyops.specs._spec import Example, KernelSpec, Traffic

#: Sizes below, at and past the usual tile sides (16 to 128), odd ones, and k not a multiple of any tile.
SIZES = (1, 15, 16, 17, 64, 100, 128, 129, 256, 1000)
#: A GEMM's cost follows m*n*k, not its inputs' size: a token is charged n*k / this many elements of the budget.
PRODUCTS_PER_ELEMENT = 30


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
        n = arguments.positive_int(self.name, "n", n)
        k = arguments.positive_int(self.name, "k", k)
        dtype = arguments.canonical_dtype(self.name, dtype)
        return MatmulConfig(n, k, dtype, arguments.describe(self.name, n=n, k=k, dtype=dtype))

    def reference(self, config: MatmulConfig, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (a @ b,)

    def cases(self) -> Any:
        from hypothesis import strategies as st

        from lazyops.testing import strategies
        from lazyops.testing._case import Case

        sizes = strategies.feature_sizes(SIZES, max_small=300)
        return st.builds(
            lambda n, k, dtype, tokens, seed: Case(self.name, (n, k, dtype), {}, tokens, seed),
            sizes,
            sizes,
            strategies.dtypes(),
            strategies.token_sequences(),
            strategies.seeds(),
        )

    def token_elements(self, config: MatmulConfig, geometry: Mapping[str, Any]) -> int:
        return max(1, config.n * config.k // PRODUCTS_PER_ELEMENT)

    def traffic(self, config: MatmulConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        moved = super().traffic(config, tokens, geometry).bytes
        return Traffic(bytes=moved, flops=2 * tokens * config.n * config.k, bound="compute")

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, 4096, dtype))


spec = MatmulSpec()
