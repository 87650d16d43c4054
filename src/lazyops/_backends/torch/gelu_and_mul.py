"""GELU-and-mul in plain PyTorch (the spec: ``lazyops.specs.gelu_and_mul``)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.gelu_and_mul import GeluAndMulConfig, spec


@spec.implementation(strided_rows=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., torch.Tensor]:
    n, dtype, approximate = config.n, config.dtype, config.approximate

    def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate = torch.nn.functional.gelu(x[:, :n].float(), approximate=approximate)
        return (gate * x[:, n:].float()).to(dtype)

    return gelu_and_mul
