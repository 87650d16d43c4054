"""SiLU-and-mul in plain PyTorch (the spec: ``lazyops.specs.silu_and_mul``).

Two native ops in the input dtype, as torch users write it: ``F.silu(x[:, :n]) * x[:, n:]``. For float16 and
bfloat16 this rounds twice (after the SiLU and after the product) where the spec's float32 math rounds once; the
README gives the measured difference, well inside the conformance tolerance.

The product is a new tensor, not written into the SiLU's result: on an H200 the in-place ``mul_`` ran at 0.95×
the out-of-place product at 32768 tokens (``benchmarks/results/torch_backend_cuda.md`` before and after).
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
        return silu(x[:, :n]) * x[:, n:]

    return silu_and_mul
