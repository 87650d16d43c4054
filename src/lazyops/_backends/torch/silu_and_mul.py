"""SiLU-and-mul in plain PyTorch (the spec: ``lazyops.specs.silu_and_mul``).

Two native ops in the input dtype, the product written into the SiLU's result rather than a third tensor. For
float16 and bfloat16 this rounds twice (after the SiLU and after the product) where the spec's float32 math
rounds once; the README gives the measured difference, well inside the conformance tolerance.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.silu_and_mul import SiluAndMulConfig, spec


@spec.implementation(strided_rows=True)
def silu_and_mul_tl(config: SiluAndMulConfig) -> Callable[..., torch.Tensor]:
    n = config.n
    silu = torch.nn.functional.silu

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        return silu(x[:, :n]).mul_(x[:, n:])

    return silu_and_mul
