"""Softmax in plain PyTorch (the spec: ``lazyops.specs.softmax``)."""

from __future__ import annotations

from typing import Callable

import torch

from lazyops.specs.softmax import SoftmaxConfig, spec


@spec.implementation
def softmax_tl(config: SoftmaxConfig) -> Callable[..., torch.Tensor]:
    dtype = config.dtype

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float(), dim=-1).to(dtype)

    return softmax
