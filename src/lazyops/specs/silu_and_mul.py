"""SiLU-and-mul, the gate of SwiGLU MLPs: ``y = silu(x[:, :n]) * x[:, n:]``, math in float32."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops.specs._gated import GatedFamily
from lazyops.specs._params import RowConfig as SiluAndMulConfig
from lazyops.specs._params import row_config
from lazyops.specs._spec import KernelSpec


class SiluAndMulKernel(Protocol):
    """What ``silu_and_mul_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``y[M, n] = silu(x[:, :n]) * x[:, n:]`` for ``x[..., 2n]``, in the factory's dtype;
        written into ``out`` when given."""


class SiluAndMulSpec(GatedFamily, KernelSpec):
    name = "silu_and_mul_tl"
    kernel_type = SiluAndMulKernel

    def bind(self, n: int, dtype: torch.dtype | str) -> SiluAndMulConfig:
        """The gate of a SwiGLU MLP: ``x[..., 2n]`` holds the gate then the up projection.

        Returns ``kernel(x[..., 2n], *, out=None) -> y[..., n] = silu(x[..., :n]) * x[..., n:]`` in ``dtype``; the
        math runs in float32.
        """
        return row_config(self.name, n, dtype)

    def activation(self, config: SiluAndMulConfig, gate: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(gate)


spec = SiluAndMulSpec()
