"""GELU-and-mul, the gate of GeGLU MLPs: ``gelu(x[:, :n]) * x[:, n:]``, exact (erf) or tanh-approximated.

The gate's factor is computed without cancellation for negative gates (``lazyops.specs.gelu_and_mul``): the erf
form as ``0.5 * g * erfc(-g / sqrt 2)`` with ``erfc`` from its rational approximation (Triton has no ``erfc``;
fractional error 1.2e-7), the tanh form as ``g * sigmoid(2u)``.
"""

from __future__ import annotations

from collections.abc import Callable

import triton
import triton.language as tl

from lazyops._backends.triton._common import gated_launch, launch_device, program_rows
from lazyops.specs import gelu_and_mul as gelu_spec
from lazyops.specs.gelu_and_mul import GeluAndMulConfig, spec

# Triton kernels read module globals only when they are constexpr.
SQRT_HALF = tl.constexpr(gelu_spec.SQRT_HALF)
TANH_LINEAR = tl.constexpr(gelu_spec.TANH_LINEAR)
TANH_CUBIC = tl.constexpr(gelu_spec.TANH_CUBIC)
E0, E1, E2, E3, E4, E5, E6, E7, E8, E9 = (tl.constexpr(c) for c in gelu_spec.ERFC_COEFFICIENTS)
#: ``exp`` of more than this would overflow float32 (e**88.7); the factor is ~0 there anyway.
EXP_CAP = tl.constexpr(80.0)


@triton.jit
def _erfc_of_nonnegative(a):
    # gelu_spec.erfc_of_nonnegative, Horner's scheme written out
    t = 1.0 / (1.0 + 0.5 * a)
    p = E9 * t + E8
    p = p * t + E7
    p = p * t + E6
    p = p * t + E5
    p = p * t + E4
    p = p * t + E3
    p = p * t + E2
    p = p * t + E1
    p = p * t + E0
    return t * tl.exp(p - a * a)


@triton.jit(do_not_specialize=["M"])
def _gelu_and_mul_kernel(
    x_ptr,
    y_ptr,
    M,
    x_row_stride,
    y_row_stride,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    TANH: tl.constexpr,
):
    first, count = program_rows(M, ROWS)
    lanes = tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    keep = (lanes < count)[:, None] & (cols < N)
    x_ptr += first * x_row_stride
    y_ptr += first * y_row_stride
    rows = lanes.to(tl.int64)[:, None]
    gate = tl.load(x_ptr + rows * x_row_stride + cols, mask=keep, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + rows * x_row_stride + N + cols, mask=keep, other=0.0).to(tl.float32)
    if TANH:
        # 0.5 * g * (1 + tanh(u)) = g * sigmoid(2u) = g / (1 + exp(-2u))
        twice_inner = gate * (TANH_LINEAR + TANH_CUBIC * gate * gate)
        gelu = gate / (1.0 + tl.exp(tl.minimum(-twice_inner, EXP_CAP)))
    else:
        # 0.5 * g * (1 + erf(g / sqrt 2)) = 0.5 * g * erfc(z), z = -g / sqrt 2; erfc(z) = 2 - erfc(-z) for z < 0
        z = -gate * SQRT_HALF
        tail = _erfc_of_nonnegative(tl.abs(z))
        gelu = 0.5 * gate * tl.where(z >= 0.0, tail, 2.0 - tail)
    tl.store(y_ptr + rows * y_row_stride + cols, (gelu * up).to(y_ptr.dtype.element_ty), mask=keep)


@spec.implementation(device_type=launch_device(_gelu_and_mul_kernel), strided_rows=True, writes_out=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., None]:
    return gated_launch(_gelu_and_mul_kernel, config, TANH=config.approximate == "tanh")
