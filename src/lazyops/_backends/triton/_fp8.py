"""The float8 store the fp8 kernels share: divide by the per-tensor scale, saturate, convert once.

The norms have one kernel each for both outputs: :func:`to_output` is where a norm's result becomes its output
dtype, float8 when the kernel is compiled with ``QUANTIZE``. Private to this backend (the stub does not list it),
imported by the kernel modules only.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: ``torch.finfo(torch.float8_e4m3fn).max``: values beyond it saturate rather than turn into NaN.
FP8_MAX: tl.constexpr = tl.constexpr(448.0)


@triton.jit
def to_fp8(value, inverse_scale, EXACT_ROUNDING: tl.constexpr):
    """``value * inverse_scale`` (float32) clamped to ±448 and converted to float8 e4m3, NaN kept as NaN.

    ``EXACT_ROUNDING`` is for Triton's interpreter only: its float-to-fp8 conversion (``_convert_float`` in
    ``triton/runtime/interpreter.py``, Triton 3.x) rounds up by adding one to the mantissa without carrying into
    the exponent, so a value that rounds up to the next power of two with an odd exponent comes out halved (1.97
    gives 1.0, 31.9 gives 16). There the value is first rounded to nearest-even on e4m3's grid in float32 (the bit
    trick bfloat16 conversions use, 20 dropped mantissa bits; a fixed 2**-9 grid below 2**-6, e4m3's subnormals),
    which the conversion then only truncates, exactly. The same conversion turns NaN into 384, so NaN's bits are
    set afterwards. A GPU converts natively (``cvt.rn.satfinite``) and takes none of this.
    """
    scaled = tl.clamp(value * inverse_scale, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    if not EXACT_ROUNDING:
        return scaled.to(tl.float8e4nv)
    bits = scaled.to(tl.uint32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
    # adding 1.5 * 2**14 leaves a float32 spacing of 2**-9: the sum rounds to e4m3's subnormal grid (the magnitude
    # is rounded, so that a small negative value keeps its sign as -0.0)
    magnitude = (tl.abs(scaled) + 24576.0) - 24576.0
    subnormal = tl.where(scaled < 0, -magnitude, magnitude)
    converted = tl.where(tl.abs(scaled) < 0.015625, subnormal, normal).to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    converted = tl.where(tl.abs(scaled) <= FP8_MAX, converted, converted | 0x7F)  # only NaN fails the clamp's bound
    return converted.to(tl.float8e4nv, bitcast=True)


@triton.jit
def to_output(value, out_ptr, inverse_scale, QUANTIZE: tl.constexpr, EXACT_ROUNDING: tl.constexpr):
    """A norm's float32 result as its output stores it: quantized to float8 (:func:`to_fp8`) or rounded once to
    ``out_ptr``'s dtype."""
    if QUANTIZE:
        return to_fp8(value, inverse_scale, EXACT_ROUNDING)
    return value.to(out_ptr.dtype.element_ty)
