"""Scaled float8 GEMM ``c = (a * scale_a) @ (b * scale_b).T + bias`` for fp8 checkpoints: vLLM's
``cutlass_scaled_mm`` and ``w8a8_block_fp8_matmul``, sgl-kernel's ``fp8_scaled_mm`` and ``fp8_blockwise_scaled_mm``.

``a[M, k]`` and the weight ``b[n, k]`` (the layout engines store: K contiguous) are ``torch.float8_e4m3fn``; the
scales are float32 and say how to dequantise each operand:

- ``scales="tensor"``: ``scale_a[1]``, ``scale_b[1]``;
- ``scales="rowwise"``: ``scale_a[M, 1]`` (per token, ``quant_fp8_tl(..., "token")``'s) and ``scale_b[n, 1]``
  (per output channel);
- ``scales="block"``: ``scale_a[M, ceil(k / 128)]`` (1x128 groups, ``quant_fp8_tl(..., "group")``'s, row- or
  column-major) and ``scale_b[ceil(n / 128), ceil(k / 128)]`` (128x128 blocks: DeepSeek-V3's).

The result is in the factory's dtype (bfloat16 or float16; float32 too), ``bias[n]`` in that dtype added in the
epilogue.

How it is judged: against float64 products of the dequantised operands, within the output dtype's tolerance plus
:data:`ACCUMULATION` times ``sqrt(k)`` (:meth:`MatmulFP8Spec.tolerance`). Two float8 values multiply exactly in
float32 (4 x 4 significant bits), so what a correct kernel adds to the output's rounding is float32 accumulation:
a random walk of ``k`` roundings, ``sqrt(k)`` units of float32 roundoff normwise; with a margin of 16 that is
``2.4e-4`` of the result at k = 16384, beside bfloat16's ``8e-3`` and float16's ``1e-3``. A kernel that lets
Hopper's fp8 tensor cores accumulate the whole of ``k`` in their ~14-bit accumulator (no promotion to float32
every block: the imprecision DeepSeek-V3's report names) errs by ``~2**-14 * sqrt(k)``, 4e-3 at k = 4096, and
fails in float16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import TOKENS, Fixed, Out, Rows, Tensor
from lazyops.specs._spec import KernelSpec
from lazyops.specs._tolerance import TOLERANCE
from lazyops.specs.rmsnorm_fp8 import FP8_DTYPE

#: the scale kinds
SCALES = ("tensor", "rowwise", "block")
#: the block side of ``scales="block"``: 1x128 activation groups, 128x128 weight blocks
BLOCK = 128
#: the output dtypes: bfloat16 and float16 (what the peers write), float32 (torch._scaled_mm's too)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: float32 accumulation's share of the tolerance, per ``sqrt(k)``: 16 units of float32 roundoff (see the docstring)
ACCUMULATION = 16 * torch.finfo(torch.float32).eps


class MatmulFP8Kernel(Protocol):
    """What ``matmul_fp8_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        /,
        *,
        bias: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``c[..., n] = (a[..., k] * scale_a) @ (b[n, k] * scale_b).T + bias`` in the factory's dtype, ``a`` and
        ``b`` in ``torch.float8_e4m3fn``, the scales float32; written into ``out`` when given."""
        ...


@dataclass(frozen=True)
class MatmulFP8Config:
    n: int
    k: int
    dtype: torch.dtype
    scales: str
    label: str

    @property
    def k_blocks(self) -> int:
        return -(-self.k // BLOCK)

    @property
    def n_blocks(self) -> int:
        return -(-self.n // BLOCK)


def scale_shapes(config: MatmulFP8Config, rows: Any) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """The shapes of ``scale_a`` and ``scale_b`` for ``rows`` rows of ``a`` (``"T"``: the call's, as declared)."""
    if config.scales == "tensor":
        return (1,), (1,)
    if config.scales == "rowwise":
        return (rows, 1), (config.n, 1)
    return (rows, config.k_blocks), (config.n_blocks, config.k_blocks)


def scale_a_layout(config: MatmulFP8Config) -> str | tuple[str, ...]:
    """``scale_a``'s layout: dense, or for block scales column-major too (``quant_fp8_tl(..., column_major=True)``)."""
    return ("dense", "columns") if config.scales == "block" else "dense"


def dequantised(
    config: MatmulFP8Config, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a * scale_a, b * scale_b)`` in ``dtype`` (float64 for the reference, float32 for the torch backend's CPU
    route) for ``a[M, k]``: each scale broadcast over its block."""
    dtype = scale_a.dtype if scale_a.dtype == torch.float64 else torch.float32
    a, b = a.to(dtype), b.to(dtype)
    scale_a, scale_b = scale_a.to(dtype), scale_b.to(dtype)
    if config.scales == "block":
        k, n = config.k, config.n
        scale_a = scale_a.repeat_interleave(BLOCK, dim=1)[:, :k]
        scale_b = scale_b.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:n, :k]
    return a * scale_a, b * scale_b


class MatmulFP8Spec(KernelSpec):
    name = "matmul_fp8_tl"
    kernel_type = MatmulFP8Kernel
    params = (
        Rows("a", width="k", dtype=FP8_DTYPE),
        Fixed("b", shape=("n", "k"), dtype=FP8_DTYPE),
        # scale_a: [1], [T, 1] or [T, ceil(k / 128)] (row- or column-major: quant_fp8_tl's groups); scale_b: [1],
        # [n, 1] or [ceil(n / 128), ceil(k / 128)]
        Tensor("scale_a", lambda config: scale_shapes(config, TOKENS)[0], torch.float32, layout=scale_a_layout),
        Tensor("scale_b", lambda config: scale_shapes(config, TOKENS)[1], torch.float32),
        Tensor("bias", ("n",), keyword=True),
    )
    out = Out(width="n")
    #: the conformance tests widen no ``bias``: a left-out one is the empty tensor, one wider is a valid bias at n = 1
    #: (tests/kernels/test_matmul_fp8.py refuses a wrong width)
    free_widths = ("bias",)

    def bind(self, n: int, k: int, dtype: torch.dtype | str, scales: str = "tensor") -> MatmulFP8Config:
        """A float8 e4m3 GEMM with the weight's shape fixed: ``(a[M, k] * scale_a) @ (b[n, k] * scale_b).T``.

        Returns ``kernel(a[..., k], b[n, k], scale_a, scale_b, *, bias=None, out=None) -> c[..., n]`` in ``dtype``
        (bfloat16, float16 or float32); ``a`` and ``b`` in ``torch.float8_e4m3fn``, ``b`` as engines store it (K
        contiguous), the scales float32: ``scales="tensor"`` (``scale_a[1]``, ``scale_b[1]``), ``"rowwise"``
        (``scale_a[M, 1]`` per token, ``scale_b[n, 1]`` per channel) or ``"block"`` (``scale_a[M, ceil(k/128)]``
        1x128 groups, row- or column-major; ``scale_b[ceil(n/128), ceil(k/128)]`` 128x128 blocks). ``bias[n]``
        in ``dtype``. Products accumulate in float32. Replaces vLLM's ``cutlass_scaled_mm`` and
        ``w8a8_block_fp8_matmul``, sgl-kernel's ``fp8_scaled_mm`` and ``fp8_blockwise_scaled_mm``.
        """
        name = self.name
        n = _params.positive_int(name, "n", n)
        k = _params.positive_int(name, "k", k)
        dtype = _params.canonical_dtype(name, dtype)
        if dtype not in DTYPES:
            raise KernelInputError(f"{name}: dtype (the output's) must be bfloat16, float16 or float32, got {dtype}")
        if scales not in SCALES:
            raise KernelInputError(f"{name}: scales must be one of {', '.join(SCALES)}, got {scales!r}")
        return MatmulFP8Config(n, k, dtype, scales, _params.describe(name, n=n, k=k, dtype=dtype, scales=scales))

    def tolerance(self, config: MatmulFP8Config) -> float:
        """The output dtype's tolerance plus float32 accumulation over ``k`` (see the module's docstring)."""
        return TOLERANCE[config.dtype] + ACCUMULATION * math.sqrt(config.k)

    def reference(  # type: ignore[override]
        self,
        config: MatmulFP8Config,
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor]:
        """The float64 product of the dequantised operands, plus ``bias``."""
        rows = a.reshape(-1, config.k)
        a_values, b_values = dequantised(config, rows, b, scale_a, scale_b)
        c = a_values @ b_values.T
        if bias is not None and bias.numel():
            c = c + bias
        return (c.reshape(*a.shape[:-1], config.n),)


spec = MatmulFP8Spec()
