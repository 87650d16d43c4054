"""Matrix product in plain PyTorch (the spec: ``lazyops.specs.matmul``)."""

from __future__ import annotations

from typing import Callable

import torch

from lazyops.specs.matmul import MatmulConfig, spec


@spec.implementation
def matmul_tl(config: MatmulConfig) -> Callable[..., torch.Tensor]:
    dtype = config.dtype

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.float() @ b.float()).to(dtype)

    return matmul
