"""Softmax in plain PyTorch (the spec: ``lazyops.specs.softmax``).

``torch.softmax`` in the input dtype already computes in float32 and rounds once, on the CPU and on CUDA, so the
kernel is that one call: no float32 copy in, none out.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.softmax import SoftmaxConfig, spec


@spec.implementation(strided_rows=True)
def softmax_tl(config: SoftmaxConfig) -> Callable[..., torch.Tensor]:
    native = torch.softmax

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return native(x, -1)

    return softmax
