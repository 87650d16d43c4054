"""Softmax over the last dimension, as ``torch.softmax`` computes it on every input, ``-inf`` included."""

from __future__ import annotations

from typing import Protocol

import torch

from lazyops.specs._params import Out, RowConfig, Rows, row_config
from lazyops.specs._spec import KernelSpec


class SoftmaxKernel(Protocol):
    """What ``softmax_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(self, x: torch.Tensor, /, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``y[..., n] = softmax(x[..., n])`` over the last dimension, in the factory's dtype; written into ``out``
        when given (``out`` may be ``x`` itself)."""
        ...


#: The configuration of ``softmax_tl``: the row width ``n`` and the dtype.
SoftmaxConfig = RowConfig


class SoftmaxSpec(KernelSpec):
    name = "softmax_tl"
    kernel_type = SoftmaxKernel
    params = (Rows("x"),)
    out = Out(like="x", may_alias="x")

    def bind(self, n: int, dtype: torch.dtype | str) -> RowConfig:
        """Softmax over the last dimension of ``x[M, n]``.

        Returns ``kernel(x[..., n], *, out=None) -> y[..., n]`` in ``dtype``; the math runs in float32. ``-inf``
        logits get 0, and a row that is all ``-inf`` gives NaN, as ``torch.softmax`` does. ``x`` may have any
        leading dimensions and strided rows; ``out`` may be ``x`` itself.
        """
        return row_config(self.name, n, dtype)

    def reference(self, config: SoftmaxConfig, x: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (torch.softmax(x, dim=-1),)


spec = SoftmaxSpec()
