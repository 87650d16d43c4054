"""What every gated activation of an MLP shares: ``x[M, 2n]`` holds the gate then the up projection, and the
kernel returns ``y[M, n] = act(x[:, :n]) * x[:, n:]``. A spec names its activation; the shapes, checks, inputs,
examples and traffic are these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lazyops.specs import _checks as checks
from lazyops.specs._spec import Example, KernelSpec, Traffic


class GatedSpec(KernelSpec):
    """A gated activation's contract; subclasses give ``configure`` (with ``n`` and ``dtype``) and ``activation``."""

    inputs = ("x",)
    row_inputs = ("x",)

    def activation(self, config: Any, gate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def check(self, config: Any, x: Any) -> None:
        checks.check_rows(config.label, "x", x, width=2 * config.n, dtype=config.dtype)

    def plain_layout(self, config: Any) -> tuple[checks.PlainInput, ...]:
        return (checks.rows_input(2 * config.n, config.dtype),)

    def out_width(self, config: Any) -> int:
        return int(config.n)

    def reference(self, config: Any, x: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        n = config.n
        return (self.activation(config, x[..., :n]) * x[..., n:],)

    def example_inputs(self, config: Any, tokens: int, draw: Any, geometry: Mapping[str, Any]) -> tuple[Any, ...]:
        return (draw.randn(tokens, 2 * config.n, dtype=config.dtype, scale=3.0),)

    def token_elements(self, config: Any, geometry: Mapping[str, Any]) -> int:
        return int(2 * config.n)

    def traffic(self, config: Any, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        # the gate and the up projection read, the product written
        return Traffic(bytes=3 * tokens * config.n * config.dtype.itemsize)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((4096, dtype))
