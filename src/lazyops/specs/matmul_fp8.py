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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs import _checks as checks
from lazyops.specs._params import Fixed, Other, Out, Rows
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


def scale_shapes(config: MatmulFP8Config, rows: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``scale_a`` and ``scale_b`` for ``rows`` rows of ``a``."""
    if config.scales == "tensor":
        return (1,), (1,)
    if config.scales == "rowwise":
        return (rows, 1), (config.n, 1)
    return (rows, config.k_blocks), (config.n_blocks, config.k_blocks)


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
        Other("scale_a"),
        Other("scale_b"),
        Other("bias", keyword=True),
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
        n = arguments.positive_int(name, "n", n)
        k = arguments.positive_int(name, "k", k)
        dtype = arguments.canonical_dtype(name, dtype)
        if dtype not in DTYPES:
            raise KernelInputError(f"{name}: dtype (the output's) must be bfloat16, float16 or float32, got {dtype}")
        if scales not in SCALES:
            raise KernelInputError(f"{name}: scales must be one of {', '.join(SCALES)}, got {scales!r}")
        return MatmulFP8Config(n, k, dtype, scales, arguments.describe(name, n=n, k=k, dtype=dtype, scales=scales))

    def tolerance(self, config: MatmulFP8Config) -> float:
        """The output dtype's tolerance plus float32 accumulation over ``k`` (see the module's docstring)."""
        return TOLERANCE[config.dtype] + ACCUMULATION * math.sqrt(config.k)

    def check(self, config: MatmulFP8Config, *args: Any) -> None:
        label = config.label
        if len(args) != len(self.params):
            raise KernelInputError(f"{label}: takes {len(self.params)} tensors ({', '.join(self.inputs)})")
        a, b, scale_a, scale_b, bias = args
        checks.check_rows(label, "a", a, width=config.k, dtype=FP8_DTYPE, device=None)
        checks.check_tensor(label, "b", b, shape=(config.n, config.k), dtype=FP8_DTYPE, device=a.device)
        rows = a.numel() // config.k
        for name, scale, shape in zip(
            ("scale_a", "scale_b"), (scale_a, scale_b), scale_shapes(config, rows), strict=True
        ):
            if not isinstance(scale, torch.Tensor) or tuple(scale.shape) != shape or scale.dtype != torch.float32:
                got = f"{tuple(scale.shape)} {scale.dtype}" if isinstance(scale, torch.Tensor) else type(scale).__name__
                raise KernelInputError(
                    f"{label}: {name} must be a float32 tensor of shape {shape} (scales={config.scales!r}), got {got}"
                )
            if scale.device != a.device:
                raise KernelInputError(f"{label}: {name} is on {scale.device}, a on {a.device}")
            transposed = name == "scale_a" and config.scales == "block" and scale.t().is_contiguous()
            if not (scale.is_contiguous() or transposed):
                layout = "dense, row-major or column-major" if name == "scale_a" else "dense"
                raise KernelInputError(f"{label}: {name} must be {layout}; its strides are {scale.stride()}")
        if bias is not None:  # an empty tensor stands for None inside lazyops (the custom operator's Tensor?)
            shape = (config.n,) if bias.numel() else (0,)
            checks.check_tensor(label, "bias", bias, shape=shape, dtype=config.dtype, device=a.device)

    def check_out(self, config: MatmulFP8Config, out: Any, *args: Any) -> None:
        """The declared checks, a left-out ``bias`` (None) taken as the empty tensor it stands for."""
        super().check_out(config, out, *(arg if arg is not None else args[0].new_empty(0) for arg in args))

    def plain_predicate(
        self, config: MatmulFP8Config, *, strided_rows: bool, device_type: str | None
    ) -> Callable[[tuple[Any, ...]], bool]:
        """The engine call, recognised in one frame: dense ``a[M, k]`` with tokens, ``b[n, k]`` dense, the scales of
        their exact shapes (dense; ``scale_a`` row- or column-major for block scales), ``bias`` absent, empty or
        ``[n]`` dense, one device (the current one for CUDA), nothing requiring grad in grad mode."""
        return plain_matmul_fp8(config, device_type)

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


def plain_matmul_fp8(config: MatmulFP8Config, device_type: str | None) -> Callable[[tuple[Any, ...]], bool]:
    """:meth:`MatmulFP8Spec.plain_predicate`'s predicate."""
    tensor, float32, fp8, dtype = torch.Tensor, torch.float32, FP8_DTYPE, config.dtype
    is_grad_enabled, current_device = torch.is_grad_enabled, torch.cuda.current_device
    n, k, per_tensor, block = config.n, config.k, config.scales == "tensor", config.scales == "block"
    b_shape, scale_b_shape = (n, k), scale_shapes(config, 1)[1]
    a_scales = 1 if config.scales == "rowwise" else config.k_blocks
    on_cuda = device_type == "cuda"
    other_kind = device_type if device_type not in (None, "cuda") else None

    def accepts(args: tuple[Any, ...]) -> bool:
        if len(args) != 5:
            return False
        a, b, scale_a, scale_b, bias = args
        if type(a) is not tensor or a.dtype is not fp8 or type(b) is not tensor or b.dtype is not fp8:
            return False
        if type(scale_a) is not tensor or scale_a.dtype is not float32:
            return False
        if type(scale_b) is not tensor or scale_b.dtype is not float32:
            return False
        sizes = a.shape
        if len(sizes) != 2 or sizes[1] != k or not sizes[0] or not a.is_contiguous():
            return False
        if b.shape != b_shape or not b.is_contiguous() or scale_b.shape != scale_b_shape:
            return False
        if not scale_b.is_contiguous():
            return False
        if per_tensor:
            if scale_a.shape != (1,):
                return False
        elif scale_a.shape != (sizes[0], a_scales) or not (
            scale_a.is_contiguous() or (block and scale_a.t().is_contiguous())
        ):
            return False
        device = a.device
        if on_cuda:
            if not a.is_cuda or a.get_device() != current_device():
                return False
        elif other_kind is not None and device.type != other_kind:
            return False
        if b.device != device or scale_a.device != device or scale_b.device != device:
            return False
        grad = is_grad_enabled()
        if bias is not None:
            if type(bias) is not tensor or bias.dtype is not dtype or bias.device != device:
                return False
            if bias.numel() and (bias.shape != (n,) or not bias.is_contiguous()):
                return False
            if bias.shape not in ((n,), (0,)):
                return False
            if grad and bias.requires_grad:
                return False
        return not (grad and (a.requires_grad or b.requires_grad or scale_a.requires_grad or scale_b.requires_grad))

    return accepts


spec = MatmulFP8Spec()
