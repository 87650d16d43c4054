"""Activations quantized to float8 (``lazyops.specs.quant_fp8``): one program per row segment (a whole row, or one
group of ``group_size`` columns), which finds its absolute maximum, writes its scale and stores ``x / scale``
saturated and converted once (``_fp8.to_fp8``). A per-tensor dynamic scale is a reduction across the grid: a first
launch takes each row's maximum into a one-element float32 buffer by ``atomic_max`` (non-negative floats order as
their bits), the second quantizes with it; no host read, so the pair is captured in a CUDA graph as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import interpreting, launch_device, next_power_of_2, warps_for
from lazyops._backends.triton._fp8 import FP8_MAX, to_fp8
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.quant_fp8 import MIN_AMAX as SPEC_MIN_AMAX
from lazyops.specs.quant_fp8 import QuantFP8Config, spec

#: the smallest maximum a scale is taken from (the spec's), as the compiler reads a global: a constexpr
MIN_AMAX = tl.constexpr(SPEC_MIN_AMAX)
#: what a program's scale comes from: given, the whole tensor's maximum (``amax_ptr``), its own segment's; and the
#: first launch of a per-tensor scale, which only reduces
STATIC, TENSOR, SEGMENT, REDUCE = 0, 1, 2, 3
#: the widest piece of a segment a program holds at once
MAX_BLOCK = 4096


@triton.jit
def _value(x_ptr, cols, W: tl.constexpr, UP: tl.constexpr):
    """The float32 value quantized at ``cols`` of a segment: ``x``, or with ``UP`` (the gate's width, a gated input)
    ``silu(g) * u`` computed as ``silu_and_mul_tl`` does, so that fused and unfused agree bit for bit."""
    x = tl.load(x_ptr + cols, mask=cols < W, other=0.0).to(tl.float32)
    if UP:
        up = tl.load(x_ptr + UP + cols, mask=cols < W, other=0.0).to(tl.float32)
        x = x / (1.0 + tl.exp(-x)) * up
    return x


@triton.jit
def _segment_amax(x_ptr, W: tl.constexpr, BLOCK: tl.constexpr, UP: tl.constexpr):
    """``|x|``'s maximum over ``W`` elements from ``x_ptr``, NaN skipped (as CUDA's ``fmaxf``)."""
    amax = tl.zeros([BLOCK], tl.float32)
    for start in range(0, W, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = _value(x_ptr, cols, W, UP)
        amax = tl.maximum(amax, tl.where(x == x, tl.abs(x), 0.0))  # noqa: PLR0124 - x == x: not NaN
    return tl.max(amax, axis=0)


@triton.jit
def _quant_fp8_kernel(
    x_ptr,
    scale_ptr,
    ub_ptr,
    amax_ptr,
    y_ptr,
    x_row_stride,
    y_row_stride,
    scale_row_stride,
    scale_group_stride,
    W: tl.constexpr,
    BLOCK: tl.constexpr,
    MODE: tl.constexpr,
    HAS_UB: tl.constexpr,
    UE8M0: tl.constexpr,
    UP: tl.constexpr,
    EXACT_ROUNDING: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    x_ptr += row * x_row_stride + group * W
    if MODE == 3:
        tl.atomic_max(amax_ptr, _segment_amax(x_ptr, W, BLOCK, UP))
        return
    if MODE == 0:
        scale = tl.load(scale_ptr)
    else:
        if MODE == 1:  # noqa: SIM108 - a compile-time branch: only one side is compiled
            amax = tl.load(amax_ptr)
        else:
            amax = _segment_amax(x_ptr, W, BLOCK, UP)
        if HAS_UB:
            amax = tl.minimum(amax, tl.load(ub_ptr))
        # div_rn: ``/`` on float32 compiles to an approximate division (div.full.f32), the scale must be rounded once
        scale = tl.div_rn(tl.maximum(amax, MIN_AMAX), FP8_MAX)
        if UE8M0:  # up to a power of two: carry any mantissa bit into the exponent (scales are positive, normal)
            scale = ((scale.to(tl.uint32, bitcast=True) + 0x7FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)
        if MODE == 1:
            if row == 0:
                tl.store(scale_ptr, scale)
        else:
            tl.store(scale_ptr + row * scale_row_stride + group * scale_group_stride, scale)
    y_ptr += row * y_row_stride + group * W
    for start in range(0, W, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = _value(x_ptr, cols, W, UP)
        # divided, as the torch backend and the peers do (x * (1 / scale) rounds twice), and correctly rounded
        tl.store(y_ptr + cols, to_fp8(tl.div_rn(x, scale), 1.0, EXACT_ROUNDING), mask=cols < W)


@spec.implementation(device_type=launch_device(_quant_fp8_kernel), strided_rows=True, writes_out=True)
def quant_fp8_tl(config: QuantFP8Config) -> Callable[..., None]:
    return quant_launch(config)


def quant_launch(config: QuantFP8Config) -> Callable[..., None]:
    """The launch of ``quant_fp8_tl``, and of ``silu_and_mul_fp8_tl`` (``config.gated``)."""
    groups = config.groups
    width = config.n // groups
    block = min(next_power_of_2(width), MAX_BLOCK)
    mode = {"static": STATIC, "tensor": TENSOR}.get(config.scales, SEGMENT)
    constexprs = {
        "W": width,
        "BLOCK": block,
        "UE8M0": config.ue8m0,
        "UP": config.n if config.gated else 0,
        "EXACT_ROUNDING": interpreting(_quant_fp8_kernel),
    }
    warps = warps_for(block)
    launch = Launcher(_quant_fp8_kernel, {**constexprs, "MODE": mode, "HAS_UB": False}, num_warps=warps)
    bounded = Launcher(_quant_fp8_kernel, {**constexprs, "MODE": mode, "HAS_UB": True}, num_warps=warps)
    reduce = Launcher(_quant_fp8_kernel, {**constexprs, "MODE": REDUCE, "HAS_UB": False}, num_warps=warps)
    per_tensor = mode != SEGMENT

    def quant_fp8(x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None, out: torch.Tensor) -> None:
        m = x.shape[0]
        if not m:
            return
        grid = (m, groups)
        strides = (x.stride(0), out.stride(0), 0, 0) if per_tensor else (x.stride(0), out.stride(0), *scale.stride())
        amax = scale
        if mode == TENSOR:
            amax = torch.zeros(1, dtype=torch.float32, device=x.device)
            reduce(grid, x, scale, scale, amax, out, *strides)
        if scale_ub is not None and scale_ub.numel():
            bounded(grid, x, scale, scale_ub, amax, out, *strides)
        else:
            launch(grid, x, scale, scale, amax, out, *strides)

    return quant_fp8


def quantize_after(config: QuantFP8Config, produce: Callable[..., None]) -> Callable[..., None]:
    """A producer's float32 result quantized by ``quant_fp8_tl``'s launch for ``config`` (the fp8 norms' dynamic
    scales): ``launch(*inputs, scale, out)`` runs ``produce(*inputs, rows)`` into a float32 ``[M, n]`` buffer, then
    quantizes it into ``out``, writing ``scale``. Two launches and a float32 round trip through memory, so the result
    is the unfused pair's bit for bit; a one-pass kernel is left to be measured against it."""
    quantize = quant_launch(config)
    n = config.n

    def launch(*args: torch.Tensor) -> None:
        *inputs, scale, out = args
        rows = torch.empty((inputs[0].shape[0], n), dtype=torch.float32, device=out.device)
        produce(*inputs, rows)
        quantize(rows, scale, None, out)

    return launch
