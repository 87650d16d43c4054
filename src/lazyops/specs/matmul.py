"""Matrix product ``c = a[M, k] @ b[k, n]``, accumulated in float32, in the factory's dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops.specs import _checks as checks
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
    inputs = ("a", "b")
    row_inputs = ("a",)
    kernel_type = MatmulKernel

    def configure(self, n: int, k: int, dtype: torch.dtype | str) -> MatmulConfig:
        """A GEMM with the weight's shape fixed: ``a[M, k] @ b[k, n]``.

        Returns ``kernel(a[..., k], b[k, n], *, out=None) -> c[..., n]`` in ``dtype``; products accumulate in
        float32. ``a`` may have any leading dimensions and strided rows.
        """
        n = checks.positive_int(self.name, "n", n)
        k = checks.positive_int(self.name, "k", k)
        dtype = checks.canonical_dtype(self.name, dtype)
        return MatmulConfig(n, k, dtype, checks.describe(self.name, n=n, k=k, dtype=dtype))

    def check(self, config: MatmulConfig, a: Any, b: Any) -> None:
        checks.check_rows(config.label, "a", a, width=config.k, dtype=config.dtype)
        checks.check_tensor(config.label, "b", b, shape=(config.k, config.n), dtype=config.dtype, device=a.device)

    def plain_layout(self, config: MatmulConfig) -> tuple[checks.PlainInput, ...]:
        return (checks.rows_input(config.k, config.dtype), checks.fixed_input((config.k, config.n), config.dtype))

    def out_width(self, config: MatmulConfig) -> int:
        return config.n

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

    def example_inputs(
        self, config: MatmulConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return draw.randn(tokens, config.k, dtype=config.dtype), draw.randn(config.k, config.n, dtype=config.dtype)

    def token_elements(self, config: MatmulConfig, geometry: Mapping[str, Any]) -> int:
        return max(1, config.n * config.k // PRODUCTS_PER_ELEMENT)

    def traffic(self, config: MatmulConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        n, k = config.n, config.k
        moved = (tokens * k + k * n + tokens * n) * config.dtype.itemsize
        return Traffic(bytes=moved, flops=2 * tokens * n * k, bound="compute")

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, 4096, dtype))


spec = MatmulSpec()
