"""What every gated activation of an MLP shares: ``x[M, 2n]`` holds the gate then the up projection, and the
kernel returns ``y[M, n] = act(x[:, :n]) * x[:, n:]``. A member (``class SiluAndMulSpec(GatedFamily,
KernelSpec)``) names its activation and its factory's arguments; the parameters, output, reference, examples and
traffic are these."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from lazyops.specs._params import Out, Param, Rows


class GatedFamily:
    """A gated activation's contract, a mixin beside ``KernelSpec``; a member gives ``bind`` (with ``n`` and
    ``dtype``) and ``activation``."""

    # gate values spread over [-9, 9]: the activations' tails are where a port's math cancels
    params: ClassVar[tuple[Param, ...]] = (Rows("x", width=lambda config: 2 * config.n, scale=3.0),)
    out: ClassVar[Out | None] = Out(width="n")

    def activation(self, config: Any, gate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reference(self, config: Any, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        (x,), n = args, config.n
        return (self.activation(config, x[..., :n]) * x[..., n:],)
