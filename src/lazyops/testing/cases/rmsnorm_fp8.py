"""The float8 norms' examples (``rmsnorm_fp8_tl``; ``add_rmsnorm_fp8_tl`` draws the same): the RMSNorm family's
cases with a static scale, or with dynamic ones (per token, per group), and the static scale they are drawn with."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._params import Param
from lazyops.specs.quant_fp8 import scale_shape
from lazyops.specs.rmsnorm_fp8 import NormFP8Config, spec
from lazyops.testing.cases.quant_fp8 import written_scale
from lazyops.testing.cases.rmsnorm import NormExamples


def draw_scale(draw: Any, config: Any, tokens: int, geometry: Any) -> torch.Tensor:
    """A static scale around 0.02, spread over a few octaves: normed values of about ±1 to ±20 land in float8's
    normal range, the largest ones saturate at ±448 in some examples, a few small ones reach its subnormals."""
    octaves = draw.randn(1, dtype=torch.float32, device="cpu")
    return (0.02 * torch.exp2(octaves)).to(draw.device)


def scale_kwargs(n: int) -> Any:
    """The dynamic scales' factory arguments for rows of ``n``: per token, or per group (1, 2 or 4 groups a row, as
    ``n`` allows: Triton's interpreter runs a program per group, so a wide row of narrow groups would take minutes),
    row- or column-major, UE8M0 or not."""
    sizes = [n // groups for groups in (1, 2, 4) if n % groups == 0]
    group = st.fixed_dictionaries(
        {
            "scales": st.just("group"),
            "group_size": st.sampled_from(sizes),
            "column_major": st.booleans(),
            "ue8m0": st.booleans(),
        }
    )
    return st.one_of(st.just({"scales": "token"}), group)


class NormFP8Examples(NormExamples):
    """The norms' examples; ``scale``, the last parameter, drawn (static: :func:`draw_scale`) or left to the call
    to write (dynamic: -1 throughout) and counted by the scales."""

    def cases(self) -> Any:
        def with_scales(case: Any) -> Any:
            extra = scale_kwargs(case.args[0])
            return extra.map(lambda kwargs: dataclasses.replace(case, kwargs={**case.kwargs, **kwargs}))

        # static scales (the cases as they were before the dynamic ones), or per token, or per group
        return st.one_of(super().cases(), super().cases().flatmap(with_scales))

    def draw_other(self, config: NormFP8Config, param: Param, tokens: int, draw: Any, geometry: Any) -> Any:
        if config.scales == "static":
            return draw_scale(draw, config, tokens, geometry)
        return written_scale(config.quant, tokens, draw.device)

    def other_bytes(self, config: NormFP8Config, param: Param, tokens: int) -> int:
        count = 1
        for size in scale_shape(config.quant, tokens):
            count *= size
        return 4 * count


examples = NormFP8Examples(spec)
