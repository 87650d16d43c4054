"""``layernorm_tl``'s examples: rows off zero mean, as a residual stream is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from lazyops.specs._spec import Example
from lazyops.specs.layernorm import LayerNormConfig, spec
from lazyops.testing import strategies
from lazyops.testing.cases._base import Draw, Examples

#: How far off zero the examples' rows are centred, in standard deviations: far enough that a variance taken as
#: ``mean(x**2) - mean(x)**2`` in float32 loses about four bits (a relative error near 6e-6 at n = 40000, against
#: float32's tolerance of 1e-5; 4e-7 when centred first), so the examples see a kernel that takes that shortcut.
#: Each row is centred at this many of *its own* standard deviations: a narrow row's spread can be far below the
#: distribution's (two draws 0.0015 apart at n = 2), and shifted by the distribution's 8 it would be centred off
#: zero by thousands of its own, where float32's rounding of the mean alone errs by 6e-4 relative to the spread:
#: an input no float32 kernel computes within 1e-5 (torch's ``layer_norm`` erred by 3.7e-5 on one), not a defect.
MEAN_SHIFT = 8.0


def off_centre_rows(draw: Any, config: LayerNormConfig, tokens: int, geometry: Any) -> torch.Tensor:
    """Activations off zero mean (as a residual stream is): the variance must survive the centring. Each row
    centred at :data:`MEAN_SHIFT` of its own spread, so every row is as hard as the next and none harder."""
    x = draw.randn(tokens, config.n, dtype=torch.float32)
    if tokens:  # (no rows, nothing to centre: std() over none warns that its degrees of freedom are <= 0)
        spread = x.std(dim=-1, correction=0, keepdim=True)
        x = x - x.mean(dim=-1, keepdim=True) + MEAN_SHIFT * spread
    rows: torch.Tensor = x.to(config.dtype)
    return rows


class LayerNormExamples(Examples):
    draws: ClassVar[Mapping[str, Draw]] = {"x": off_centre_rows}

    def cases(self) -> Any:
        weight_dtypes = strategies.norm_options()["weight_dtype"]
        return strategies.row_cases(self.spec.name, strategies.epsilons(), weight_dtype=weight_dtypes)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))


examples = LayerNormExamples(spec)
