"""``matmul_fp8_tl``'s examples: float8 operands across the format's range, every scale kind (column-major block
scales too), a bias or none; its cost is counted in products, not elements."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.matmul_fp8 import DTYPES, SCALES, MatmulFP8Config, scale_shapes, spec
from lazyops.specs.quant_fp8 import FP8_DTYPE, FP8_MAX
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Examples

#: A GEMM's cost follows m*n*k: a token is charged n*k / this many elements of the kit's budget (matmul_tl's 30).
PRODUCTS_PER_ELEMENT = 30
#: sizes below, at and past the tile sides and the 128 block, odd ones
SIZES = (1, 15, 16, 17, 64, 100, 128, 129, 256, 300)


def draw_fp8(draw: Any, rows: int, width: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """float8 e4m3 values across its range: spread normal values (by the geometry: float8's subnormals), a zero
    row, values at ±448 (saturated ones, as a quantiser writes them)."""
    values = draw.randn(rows, width, dtype=torch.float32, scale=float(geometry.get("spread", 64.0)), device="cpu")
    cpu = draw.generator
    if rows and geometry.get("zero_row"):
        values[int(torch.randint(rows, (1,), generator=cpu))] = 0.0
    if rows and geometry.get("saturated"):
        values[int(torch.randint(rows, (1,), generator=cpu)), int(torch.randint(width, (1,), generator=cpu))] = 1e4
    drawn: torch.Tensor = values.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).to(draw.device)
    return drawn


def draw_scales(draw: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """Positive float32 scales from ``2**-12`` to ``2**-4`` (log-uniform): a dequantised value of a few units."""
    exponent = torch.rand(shape, generator=draw.generator) * 8 - 12
    return torch.exp2(exponent).to(draw.device)


def draw_a(draw: Any, config: MatmulFP8Config, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    return draw_fp8(draw, tokens, config.k, geometry)


def draw_b(draw: Any, config: MatmulFP8Config, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    return draw_fp8(draw, config.n, config.k, {"spread": geometry.get("spread", 64.0)})


class MatmulFP8Examples(Examples):
    """The geometry beyond the configuration: ``spread`` (of the operands' values), ``zero_row``, ``saturated``,
    ``bias`` and ``column_major`` (block scales of ``a`` as the transpose of a ``[k_blocks, M]`` buffer)."""

    def cases(self) -> Any:
        sizes = strategies.feature_sizes(SIZES, max_small=300)

        @st.composite
        def draw_case(draw: st.DrawFn) -> Case:
            scales = draw(st.sampled_from(SCALES))
            args = (draw(sizes), draw(sizes), draw(strategies.dtypes()))
            geometry = {
                "spread": draw(st.sampled_from([64.0, 64.0, 448.0, 1e-2])),
                "zero_row": draw(st.booleans()),
                "saturated": draw(st.booleans()),
                "bias": draw(st.booleans()),
                "column_major": scales == "block" and draw(st.booleans()),
            }
            tokens = draw(strategies.token_sequences())
            return Case(self.spec.name, args, {"scales": scales}, tokens, draw(strategies.seeds()), geometry)

        return draw_case()

    def example_inputs(
        self, config: MatmulFP8Config, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        a, b = draw_a(draw, config, tokens, geometry), draw_b(draw, config, tokens, geometry)
        shape_a, shape_b = scale_shapes(config, tokens)
        scale_a = draw_scales(draw, shape_a)
        if geometry.get("column_major"):  # the transposed view of a [k_blocks, M] buffer (DeepGEMM's layout)
            scale_a = scale_a.t().contiguous().t()
        scale_b = draw_scales(draw, shape_b)
        bias = torch.empty(0, dtype=config.dtype, device=draw.device)
        if geometry.get("bias"):
            bias = draw.randn(config.n, dtype=config.dtype)
        return a, b, scale_a, scale_b, bias

    def token_elements(self, config: MatmulFP8Config, geometry: Mapping[str, Any]) -> int:
        return max(1, config.n * config.k // PRODUCTS_PER_ELEMENT)

    def traffic(self, config: MatmulFP8Config, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        scale_a, scale_b = scale_shapes(config, tokens)
        moved = tokens * config.k + config.n * config.k + tokens * config.n * config.dtype.itemsize
        moved += 4 * (math.prod(scale_a) + math.prod(scale_b))
        return Traffic(bytes=moved, flops=2 * tokens * config.n * config.k, bound="compute")

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, 4096, dtype if dtype in DTYPES else torch.bfloat16), {"scales": "rowwise"})


examples = MatmulFP8Examples(spec)
