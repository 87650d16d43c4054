"""RMSNorm in plain PyTorch (the spec: ``lazyops.specs.rmsnorm``).

On CUDA (and any device but the CPU) ``F.rms_norm`` is one fused kernel that accumulates in float32 and rounds
once. On the CPU it is a composite of about ten passes (it upcasts, squares into a new tensor, takes the mean,
multiplies twice into new tensors, casts back), so large inputs take a shorter route with the same math and the
same single rounding: the norm of each row as one reduction (no squared copy), then two in-place scalings
of one float32 tensor. Small inputs, where only the number of calls counts, keep the one native call.

Rows may be strided (views of packed buffers) and leading dimensions are flattened by the spec's wrapper: every op
here takes a row-strided ``[M, n]`` view as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.rmsnorm import RMSNormConfig, spec

#: Below this many elements a CPU call costs its host overhead, not its passes over memory: one native call wins.
CPU_NATIVE_BELOW = 32 * 1024


def norm_weight(weight: torch.Tensor, offset: float) -> torch.Tensor:
    """The scale the norm multiplies by: ``weight``, or ``offset + weight`` computed in float32 (Gemma)."""
    # Not ``.float().add_()``: for a float32 weight ``.float()`` is the weight itself, which must stay as it was.
    return torch.add(weight.float(), offset) if offset else weight


def rms_norm(x: torch.Tensor, weight: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """RMSNorm of ``x[M, n]`` (rows may be strided) in float32, rounded once to ``x``'s dtype, on any device.

    A weight of another dtype than ``x`` (float32 under 16-bit activations, or Gemma's float32 ``1 + weight``)
    takes the float32 route: torch's fused kernels want one dtype and would otherwise fall back with a warning.
    """
    if x.is_cpu:
        return cpu_rms_norm(x, weight, n, eps)
    if weight.dtype != x.dtype:
        return torch.rms_norm(x.float(), (n,), weight.float(), eps).to(x.dtype)
    return torch.rms_norm(x, (n,), weight, eps)


def cpu_rms_norm(x: torch.Tensor, weight: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """RMSNorm of ``x[M, n]`` in float32, rounded once to ``x``'s dtype; the CPU route for large inputs."""
    if x.numel() < CPU_NATIVE_BELOW and weight.dtype == x.dtype:
        return torch.rms_norm(x, (n,), weight, eps)
    # For float32 input ``.float()`` is ``x`` itself, so the scaling must not be in place there.
    upcast = x.float()
    inverse_rms = torch.linalg.vector_norm(upcast, dim=-1, keepdim=True).square_().mul_(1.0 / n).add_(eps).rsqrt_()
    if upcast is x:
        return torch.mul(x, inverse_rms).mul_(weight)
    return upcast.mul_(inverse_rms).mul_(weight).to(x.dtype)


@spec.implementation(strided_rows=True)
def rmsnorm_tl(config: RMSNormConfig) -> Callable[..., torch.Tensor]:
    n, eps, offset = config.n, config.eps, config.weight_offset

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, norm_weight(weight, offset), n, eps)

    return rmsnorm
