"""``apply_penalties_tl``'s examples: counts of 0 (most tokens), 1 and a few, a prompt mask, each penalty off for a
quarter of the requests, and by the geometry a logit bias (padded, an id repeated) and an allowed-token bitmask."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from hypothesis import strategies as st

from lazyops.specs._params import Param, RowConfig
from lazyops.specs._spec import Example, Traffic
from lazyops.specs.apply_penalties import spec
from lazyops.testing import strategies
from lazyops.testing.cases._base import Draw, Examples


def draw_counts(draw: Any, config: RowConfig, tokens: int, geometry: Any) -> torch.Tensor:
    """Counts of 0 (most tokens), 1 and a few: a request's generated tokens so far."""
    counts = draw.randint(8, tokens, config.n, dtype=torch.int32, device="cpu")
    counts = torch.where(counts > 4, counts - 4, torch.zeros_like(counts))
    return counts.to(draw.device)


def draw_prompt_mask(draw: Any, config: RowConfig, tokens: int, geometry: Any) -> torch.Tensor:
    return (draw.randint(4, tokens, config.n, dtype=torch.int32, device="cpu") == 0).to(draw.device)  # type: ignore[no-any-return]


def column(low: float, high: float) -> Draw:
    """A request's penalty drawn from ``[low, high)``, or off (1.0 for a repetition penalty, else 0.0) for a
    quarter of the requests: a ``[B, 1]`` column."""

    def draw_column(draw: Any, config: RowConfig, tokens: int, geometry: Any) -> torch.Tensor:
        values = torch.rand(tokens, 1, generator=draw.generator) * (high - low) + low
        off = torch.rand(tokens, 1, generator=draw.generator) < 0.25  # a quarter of the requests leave it off
        values = torch.where(off, torch.full_like(values, 1.0 if low >= 1 else 0.0), values)
        return values.to(draw.device)

    return draw_column


def draw_bias(draw: Any, config: RowConfig, tokens: int, geometry: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
    """``K`` bias entries a request, a few of them padding (-1) and a repeated id, values of a few units; empty
    (left out) unless ``geometry["bias"]``."""
    count = int(geometry.get("bias", 0))
    if not count:
        empty = torch.empty(0, dtype=torch.int32, device=draw.device)
        return empty, torch.empty(0, dtype=torch.float32, device=draw.device)
    g = draw.generator
    ids = torch.randint(-1, config.n, (tokens, count), generator=g, dtype=torch.int32)
    if count > 1:
        ids[:, -1] = ids[:, 0]  # a repeated id: the values add
    values = torch.randn(tokens, count, generator=g) * 4
    return ids.to(draw.device), values.to(draw.device)


def draw_allowed(draw: Any, config: RowConfig, tokens: int, geometry: Mapping[str, Any]) -> torch.Tensor:
    """A bitmask allowing about ``geometry["mask"]`` of the tokens, one row with every bit set (no mask); empty
    (left out) unless it is given."""
    share = float(geometry.get("mask", 0.0))
    if not share:
        return torch.empty(0, dtype=torch.int32, device=draw.device)
    words = -(-config.n // 32)
    bits = torch.rand(tokens, words * 32, generator=draw.generator) < share
    bits[:1] = True  # a request without a mask: every bit set
    weights = torch.tensor([1 << i for i in range(32)], dtype=torch.int64)
    packed = (bits.view(tokens, words, 32).long() * weights).sum(dim=-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32).to(draw.device)


class ApplyPenaltiesExamples(Examples):
    """The geometry beyond the configuration: ``bias`` (``K``, the bias entries a request; 0: left out) and
    ``mask`` (the share of tokens the bitmask allows; 0.0: left out)."""

    draws: ClassVar[Mapping[str, Draw]] = {
        "output_counts": draw_counts,
        "prompt_mask": draw_prompt_mask,
        "repetition": column(1.0, 2.0),
        "frequency": column(-0.5, 1.0),
        "presence": column(-0.5, 1.0),
    }

    def cases(self) -> Any:
        geometry = st.fixed_dictionaries(
            {"bias": st.sampled_from([0, 0, 1, 5]), "mask": st.sampled_from([0.0, 0.0, 0.5, 0.02])}
        )
        return strategies.row_cases(self.spec.name, geometry=geometry)

    def draw_other(self, config: RowConfig, param: Param, tokens: int, draw: Any, geometry: Mapping[str, Any]) -> Any:
        if param.name == "allowed":
            return draw_allowed(draw, config, tokens, geometry)
        return draw_bias(draw, config, tokens, geometry)[0 if param.name == "bias_ids" else 1]

    def other_bytes(self, config: RowConfig, param: Param, tokens: int) -> int:
        return 0  # counted by traffic(), which knows the geometry

    def traffic(self, config: RowConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        """The derived bytes, plus ``K`` bias entries (8 bytes each) and the bitmask a row where the geometry asks
        for them."""
        moved = super().traffic(config, tokens, geometry).bytes
        moved += tokens * 8 * int(geometry.get("bias", 0))
        moved += tokens * 4 * -(-config.n // 32) if geometry.get("mask") else 0
        return Traffic(bytes=moved)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((128256, dtype))


examples = ApplyPenaltiesExamples(spec)
