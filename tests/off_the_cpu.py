"""A CPU tensor that says it is not on the CPU, to run the torch backend's route for other devices here.

Some torch-backend kernels take one route on the CPU and another elsewhere (``if x.is_cpu``), where a CUDA op
refuses what the CPU route does (a CPU scalar added to by ``addcmul``) or torch has a fused kernel only there
(``F.rms_norm``). This machine has no GPU; the subclass's ``is_cpu`` is False while every op still runs on the CPU
(ops on a subclass return the subclass, so the kernel sees it at every step), so the other route's numbers are
checked here and its speed on the H200 (``benchmarks/bench_kernels.py``, its ``lazyops torch`` rows).
"""

from __future__ import annotations

import torch


class OffTheCpu(torch.Tensor):
    @property
    def is_cpu(self) -> bool:
        return False


def off_the_cpu(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.as_subclass(OffTheCpu) for t in tensors)


def plain(tensor: torch.Tensor) -> torch.Tensor:
    assert type(tensor) is OffTheCpu, "the result did not come through the route off the CPU"
    return tensor.as_subclass(torch.Tensor)
