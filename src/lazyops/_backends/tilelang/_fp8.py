"""What the TileLang fp8 programs share: a block's scale from its absolute maximum, and the one-pass dynamic store of
the fp8 norms (:func:`dynamic_store`)."""

# No ``from __future__ import annotations``: TileLang evaluates the annotations of its macros.

from typing import Any

import tilelang.language as T

from lazyops._backends.tilelang._rows import next_power_of_two
from lazyops._backends.tilelang._runtime import F32, FP8, INDEX
from lazyops.specs.quant_fp8 import FP8_MAX, MIN_AMAX


def block_scale(amax: Any, ue8m0: bool) -> Any:
    """The scale of a block whose NaN-free absolute maximum is ``amax``: floored at ``MIN_AMAX``, over 448, and with
    ``ue8m0`` rounded up to a power of two by carrying any mantissa bit into the exponent (scales are positive and
    normal, so the carry is exact)."""
    scale = T.max(amax, T.float32(MIN_AMAX)) / T.float32(FP8_MAX)
    if not ue8m0:
        return scale
    bits = T.reinterpret(scale, "uint32")
    return T.reinterpret((bits + T.uint32(0x7FFFFF)) & T.uint32(0x7F800000), F32)


def scale_tensor(M: Any, groups: int) -> Any:
    """The dynamic scale's annotation ``[M, groups]`` with run-time strides: row- and column-major take one
    program (``M`` is the program's token count)."""
    scale_row, scale_group = T.dynamic("scale_row, scale_group", INDEX)
    return T.StridedTensor((M, groups), (scale_row, scale_group), F32)


def dynamic_store(M: Any, rows: int, cols: int, n: int, group_size: int, offset: float, ue8m0: bool) -> Any:
    """The macro ``store(values, factor, weight, scale, y, block)`` ending a resident row program's pass with dynamic
    float8 scales (per token: ``group_size == n``; per group): each row's norm ``values * factor * (weight +
    offset)``, the float32 expression the program stores otherwise (so the values are the float32 norm's, bit for
    bit), staged in shared memory and re-read as ``[rows * groups, group_size]`` segments; each segment's NaN-free
    maximum by a block reduction, its scale written, and ``norm / scale`` stored with the hardware's saturating
    conversion, as ``quant_fp8_tl``'s program on the float32 norm does: fused and unfused in float32 agree bit for
    bit. One pass: 8 bytes an element fewer than the norm through a float32 buffer then the quantizing launch."""
    groups = n // group_size
    segments = rows * groups
    # the segments' fragment padded to powers of two (TileLang finds no register layout for most other shapes)
    padded, width = next_power_of_two(segments), next_power_of_two(group_size)

    @T.macro
    def store(values: T.Tensor, factor: T.Tensor, weight: T.Tensor, scale: T.Tensor, y: T.Tensor, block: Any):
        normed = T.alloc_shared((rows, cols), F32)
        segment = T.alloc_fragment((padded, width), F32)
        magnitude = T.alloc_fragment((padded, width), F32)
        amax = T.alloc_fragment((padded,), F32)
        for i, j in T.Parallel(rows, cols):
            normed[i, j] = T.if_then_else(
                j < n, values[i, j] * factor[i] * (T.cast(weight[j], F32) + offset), T.float32(0)
            )
        for s, j in T.Parallel(padded, width):
            segment[s, j] = T.if_then_else(
                s < segments and j < group_size, normed[s // groups, (s % groups) * group_size + j], T.float32(0)
            )
        for s, j in T.Parallel(padded, width):
            magnitude[s, j] = T.if_then_else(T.isnan(segment[s, j]), T.float32(0), T.abs(segment[s, j]))
        T.reduce_max(magnitude, amax, dim=1)
        for s in T.Parallel(padded):
            amax[s] = block_scale(amax[s], ue8m0)
            if s < segments and block * rows + s // groups < M:
                scale[block * rows + s // groups, s % groups] = amax[s]
        for s, j in T.Parallel(padded, width):
            row = block * rows + s // groups
            if s < segments and j < group_size and row < M:
                y[row, (s % groups) * group_size + j] = T.cast(segment[s, j] / amax[s], FP8)

    return store
