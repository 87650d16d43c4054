"""``quant_fp8_tl``'s examples (``silu_and_mul_fp8_tl`` draws the same): rows that break quantizers, every scale
granularity, a static scale of 1 that values of 300 saturate; and the float8 family's written scales, which the fp8
norms' examples take too."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.quant_fp8 import SCALES, QuantFP8Config, scale_shape, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Examples


def written_scale(config: QuantFP8Config, tokens: int, device: Any) -> torch.Tensor:
    """An example's ``scale`` for a dynamic configuration: its shape and layout, filled with -1 (the call writes
    it)."""
    if config.column_major:
        return torch.full((config.groups, tokens), -1.0, device=device).t()
    return torch.full(scale_shape(config, tokens), -1.0, device=device)


def draw_x(draw: Any, config: QuantFP8Config, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """Rows that break quantizers: normal values with (by the example's geometry) a zero row, a single huge outlier,
    values at ±448 and beyond (a static scale of 1 and wide rows), float8's subnormals beside the outlier, NaN."""
    width = config.x_width
    x = draw.randn(tokens, width, dtype=torch.float32, scale=float(geometry.get("spread", 1.0)), device="cpu")
    cpu = draw.generator
    if tokens and geometry.get("zero_row"):
        x[int(torch.randint(tokens, (1,), generator=cpu))] = 0.0
    if tokens and geometry.get("outlier"):
        row, col = int(torch.randint(tokens, (1,), generator=cpu)), int(torch.randint(width, (1,), generator=cpu))
        x[row, col] = 3e4 if config.dtype is not torch.float16 else 6e4
    if tokens and geometry.get("nan"):
        x[int(torch.randint(tokens, (1,), generator=cpu)), int(torch.randint(width, (1,), generator=cpu))] = math.nan
    if config.gated:  # exp(-g) overflows below -88: a GPU gives silu = -0 there, Triton's interpreter warns (numpy)
        x[:, : config.n].clamp_(min=-80.0)
    drawn: torch.Tensor = x.to(draw.device, config.dtype)
    return drawn


class QuantFP8Examples(Examples):
    """The geometry beyond the configuration: ``spread`` (of the normal values), ``zero_row``, ``outlier``,
    ``nan`` and ``scale_ub`` (a bound of 2 on the per-token scales' absolute maximum)."""

    def cases(self) -> Any:

        @st.composite
        def cases(draw: st.DrawFn) -> Case:
            scales = draw(st.sampled_from(SCALES))
            group_size = draw(st.sampled_from([128, 128, 16, 8])) if scales == "group" else 128
            n = group_size * draw(st.integers(1, 4)) if scales == "group" else draw(strategies.feature_sizes())
            kwargs: dict[str, Any] = {"scales": scales}
            if scales == "group":
                kwargs.update(group_size=group_size, column_major=draw(st.booleans()), ue8m0=draw(st.booleans()))
            geometry = {
                "spread": draw(st.sampled_from([1.0, 1.0, 300.0, 1e-3])),
                "zero_row": draw(st.booleans()),
                "outlier": draw(st.booleans()),
                "nan": draw(st.sampled_from([False, False, True])),
                "scale_ub": scales == "token" and draw(st.booleans()),
            }
            tokens = draw(strategies.token_sequences(max_tokens=40))
            args = (n, draw(strategies.dtypes()))
            return Case(self.spec.name, args, kwargs, tokens, draw(strategies.seeds()), geometry)

        return cases()

    def example_inputs(
        self, config: QuantFP8Config, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        x = draw_x(draw, config, tokens, geometry)
        if config.scales == "static":  # 1: values of 300 and the outlier saturate; 1e-3 ones are subnormal
            scale = torch.ones(1, dtype=torch.float32, device=draw.device)
        else:
            scale = written_scale(config, tokens, draw.device)
        scale_ub = torch.empty(0, device=draw.device)
        if geometry.get("scale_ub"):
            scale_ub = torch.full((1,), 2.0, device=draw.device)
        return x, scale, scale_ub

    def traffic(self, config: QuantFP8Config, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        scales = math.prod(scale_shape(config, tokens)) * 4
        return Traffic(bytes=tokens * (config.x_width * config.dtype.itemsize + config.n) + scales)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype, "token"))


examples = QuantFP8Examples(spec)
