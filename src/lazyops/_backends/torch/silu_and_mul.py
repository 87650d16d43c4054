"""SiLU-and-mul in plain PyTorch (the spec: ``lazyops.specs.silu_and_mul``)."""

from __future__ import annotations

from typing import Callable

import torch

from lazyops.specs.silu_and_mul import SiluAndMulConfig, spec


@spec.implementation
def silu_and_mul_tl(config: SiluAndMulConfig) -> Callable[..., torch.Tensor]:
    n, dtype = config.n, config.dtype

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate = x[:, :n].float()
        return (torch.nn.functional.silu(gate) * x[:, n:].float()).to(dtype)

    return silu_and_mul
