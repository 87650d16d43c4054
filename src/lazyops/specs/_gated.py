"""What every gated activation of an MLP shares: ``x[M, 2n]`` holds the gate then the up projection, and the
kernel returns ``y[M, n] = act(x[:, :n]) * x[:, n:]``. A member names its activation and its factory's arguments;
the parameters, output, reference, examples and traffic are these."""

from __future__ import annotations

from typing import Any

import torch

from lazyops.specs._params import Out, Rows
from lazyops.specs._spec import KernelSpec


class GatedSpec(KernelSpec):
    """A gated activation's contract; subclasses give ``bind`` (with ``n`` and ``dtype``) and ``activation``."""

    # gate values spread over [-9, 9]: the activations' tails are where a port's math cancels
    params = (Rows("x", width=lambda config: 2 * config.n, scale=3.0),)
    out = Out(width="n")

    def activation(self, config: Any, gate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reference(self, config: Any, x: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        n = config.n
        return (self.activation(config, x[..., :n]) * x[..., n:],)
