"""GELU-and-mul in plain PyTorch (the spec: ``lazyops.specs.gelu_and_mul``).

Not ``F.gelu(x[:, :n]) * x[:, n:]``, which is what torch users write: ``F.gelu`` computes
``0.5 * g * (1 + erf(g / sqrt(2)))`` (or ``1 + tanh(...)``) in float32, and for a negative gate the sum cancels:
at ``g = -3.3`` its relative error is 1.2e-5, past the float32 tolerance of 1e-5, and at ``g = -5`` about 4 %,
past every dtype's (a conformance draw of a one-feature row found it). So the gate's factor is computed where it
has no cancellation, in float32:

- ``"none"``: ``g * Phi(g)`` with ``Phi(g) = erfc(-g / sqrt 2) / 2`` (``torch.special.ndtr`` has the same
  cancellation: 1.8e-5 at ``g = -3.3``), then the products with ``g`` and ``up``;
- ``"tanh"``: ``1 + tanh(u) = 2 * sigmoid(2u)``, so ``g * sigmoid(2u)`` with ``2u = 2 sqrt(2/pi) (g + 0.044715
  g^3)``.

On CUDA (and ROCm) that math is one kernel, compiled by torch's jiterator (``_jiterated``): each element read
once, float32 inside, one rounding, in every dtype. On the CPU the erf form costs ops more than the native GELU,
the tanh form fewer passes than ``F.gelu``'s tanh. For float16 and
bfloat16 on the CPU the native ops are kept: their error from the cancellation stays below the dtypes' rounding
down to g = -4, and doing the float32 route in 16-bit (two upcast copies, a cast back) cost 2-3x the users'
composition; they round twice (after the GELU and after the product) where the spec's float32 math rounds once,
as ``silu_and_mul`` does (the README gives the difference). Other devices take the same ops as the CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops._backends.torch._jiterated import gated, literal
from lazyops.specs.gelu_and_mul import SQRT_HALF, TANH_CUBIC, TANH_LINEAR, GeluAndMulConfig, spec

#: The factor of ``u`` per form, over float32 ``g``: ``0.5 g erfc(-g / sqrt 2)`` and ``g sigmoid(2u)``.
FUSED_GELU = {
    "none": f"0.5f * g * erfcf({literal(-SQRT_HALF)} * g) * u",
    "tanh": f"g / (1.0f + expf(-g * ({literal(TANH_LINEAR)} + {literal(TANH_CUBIC)} * g * g))) * u",
}


@spec.implementation(strided_rows=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., torch.Tensor]:
    approximate = config.approximate
    fused = gated(f"lazyops_gelu_{approximate}_and_mul", FUSED_GELU[approximate])
    if config.dtype != torch.float32:
        # 16-bit: the users' two native ops (float32 inside F.gelu, rounded after it and after the product). The
        # cancellation stays under these dtypes' rounding down to g = -4 (1e-3 there; past it GELU is < 1e-4).
        gelu = torch.nn.functional.gelu

        def gelu_and_mul_16(x: torch.Tensor) -> torch.Tensor:
            gate, up = x.chunk(2, -1)  # the checks made x [M, 2n]: two [M, n] views
            if x.is_cuda:
                return fused(gate, up)
            return gelu(gate, approximate=approximate) * up

        return gelu_and_mul_16

    erfc = torch.special.erfc
    sigmoid_ = torch.sigmoid_
    addcmul = torch.addcmul
    # CPU scalars (never written) that addcmul adds to its product: fewer ops at one token on the CPU. A CUDA
    # addcmul refuses a CPU scalar as the tensor it adds to, so other devices take the same math in plain ops.
    zero = torch.zeros((), dtype=torch.float32, device="cpu")
    linear = torch.full((), TANH_LINEAR, dtype=torch.float32, device="cpu")
    if approximate == "none":

        def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
            gate, up = x.chunk(2, -1)
            if x.is_cuda:
                return fused(gate, up)
            factor: torch.Tensor = erfc(gate.mul(-SQRT_HALF))  # 2 Phi(g), a new tensor
            if x.is_cpu:
                return addcmul(zero, gate, up, value=0.5).mul_(factor)
            return torch.mul(gate, up).mul_(factor.mul_(0.5))

        return gelu_and_mul

    def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, -1)
        if x.is_cuda:
            return fused(gate, up)
        if x.is_cpu:
            twice_inner = addcmul(linear, gate, gate, value=TANH_CUBIC)
        else:
            twice_inner = torch.mul(gate, gate).mul_(TANH_CUBIC).add_(TANH_LINEAR)
        return torch.mul(gate, up).mul_(sigmoid_(twice_inner.mul_(gate)))

    return gelu_tanh_and_mul
