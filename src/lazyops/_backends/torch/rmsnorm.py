"""RMSNorm in plain PyTorch (the spec: ``lazyops.specs.rmsnorm``).

On CUDA (and any device but the CPU) ``F.rms_norm`` is one fused kernel that accumulates in float32 and rounds
once. On the CPU it is a composite of about a dozen ops (it upcasts, squares into a new tensor, takes the mean,
adds, takes the root, multiplies twice into new tensors, casts back), so the CPU takes a shorter route with the
same math and the same single rounding: the norm of each row as one reduction (no squared copy), its inverse
RMS in two ops on the ``[M, 1]`` column, then two scalings of one float32 tensor. At one token, where each op
costs its dispatch and not its pass over memory, the whole kernel (checks included) takes 10.7 µs against the
composite's 12.2 in float32 and 15.4 against 16.6 in bfloat16 on this project's CPU
(docs/decisions/008-torch-backend-routes.md); with more rows it saves passes.

Rows may be strided (views of packed buffers) and leading dimensions are flattened by the spec's wrapper: every op
here takes a row-strided ``[M, n]`` view as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.rmsnorm import RMSNormConfig, spec


def norm_weight(weight: torch.Tensor, offset: float) -> torch.Tensor:
    """The scale the norm multiplies by: ``weight``, or ``offset + weight`` computed in float32 (Gemma)."""
    # Not ``.float().add_()``: for a float32 weight ``.float()`` is the weight itself, which must stay as it was.
    return torch.add(weight.float(), offset) if offset else weight


def normalizer(
    n: int, eps: float, offset: float, dtype: torch.dtype
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``normalize(x, weight)``: RMSNorm of ``x[M, n]`` (rows may be strided, ``dtype`` as the checks made it) in
    float32, rounded once to ``dtype``, on any device; ``offset + weight`` when ``offset`` is set (Gemma).

    Built once per configuration, and two Python calls deep (this closure and the inverse RMS): at one token the
    CPU route's seven ops take about 13 µs here, and every Python frame between them is paid on every step.

    A weight of another dtype than ``x`` (float32 under 16-bit activations, or Gemma's float32 ``1 + weight``)
    takes the float32 route on a GPU: torch's fused kernels want one dtype and would otherwise fall back with a
    warning.
    """
    inverse = inverse_rms(n, eps)
    fused = torch.rms_norm
    shape = (n,)

    def normalize(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if offset:
            weight = norm_weight(weight, offset)
        if x.is_cpu:
            # For float32 input ``.float()`` is ``x`` itself, so the scaling must not be in place there.
            upcast = x.float()
            if upcast is x:
                return torch.mul(x, inverse(upcast)).mul_(weight)
            # ``type(dtype)`` converts as ``to(dtype)`` does without ``to``'s parsing of its overloads: 2.1 µs
            # against 2.9 for a [1, 4096] row on this project's CPU
            return upcast.mul_(inverse(upcast)).mul_(weight).type(dtype)
        if weight.dtype != x.dtype:
            return fused(x.float(), shape, weight.float(), eps).type(dtype)
        return fused(x, shape, weight, eps)

    return normalize


def inverse_rms(n: int, eps: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """``inverse(upcast)``: ``1 / sqrt(mean(upcast**2) + eps)`` of each row of the float32 ``upcast[M, n]``, as a
    new ``[M, 1]`` column: the row's norm in one reduction (no squared copy), then the rest on the column."""
    vector_norm = torch.linalg.vector_norm
    addcmul = torch.addcmul
    scale = 1.0 / n
    epsilon = torch.tensor(eps, dtype=torch.float32, device="cpu")  # never written; the CPU route's only

    def inverse(upcast: torch.Tensor) -> torch.Tensor:
        norm: torch.Tensor = vector_norm(upcast, dim=-1, keepdim=True)
        if upcast.is_cpu:  # eps + norm**2 / n in one op: on the CPU each op costs its dispatch
            return addcmul(epsilon, norm, norm, value=scale).rsqrt_()
        return norm.square_().mul_(scale).add_(eps).rsqrt_()

    return inverse


@spec.implementation(strided_rows=True)
def rmsnorm_tl(config: RMSNormConfig) -> Callable[..., torch.Tensor]:
    return normalizer(config.n, config.eps, config.weight_offset, config.dtype)
