"""GELU-and-mul in plain PyTorch (the spec: ``lazyops.specs.gelu_and_mul``).

As ``silu_and_mul``: two native ops in the input dtype, as torch users write it (``F.gelu(x[:, :n]) * x[:, n:]``,
the halves cut by one ``chunk``). For float16 and bfloat16 this rounds twice (after the GELU and after the
product) where the spec's float32 math rounds once; the README gives the measured difference, well inside the
conformance tolerance. The float32 route it replaced (two upcast copies, the product, a cast back) ran at 0.71-0.77x
the users' composition in 16-bit on the CPU (``benchmarks/results/torch_backend_cpu.md`` history).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.gelu_and_mul import GeluAndMulConfig, spec


@spec.implementation(strided_rows=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., torch.Tensor]:
    approximate = config.approximate
    gelu = torch.nn.functional.gelu

    def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, -1)  # the checks made x [M, 2n]: two [M, n] views
        return gelu(gate, approximate=approximate) * up

    return gelu_and_mul
