"""GELU-and-mul in plain PyTorch (the spec: ``lazyops.specs.gelu_and_mul``)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.gelu_and_mul import GeluAndMulConfig, spec


@spec.implementation(strided_rows=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., torch.Tensor]:
    dtype, approximate = config.dtype, config.approximate
    gelu = torch.nn.functional.gelu

    def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, -1)  # the checks made x [M, 2n]: two [M, n] views, as in silu_and_mul
        return (gelu(gate.float(), approximate=approximate) * up.float()).type(dtype)  # see rmsnorm.normalizer

    return gelu_and_mul
