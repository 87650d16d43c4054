"""RMSNorm in plain PyTorch (the spec: ``lazyops.specs.rmsnorm``).

On CUDA (and any device but the CPU) ``F.rms_norm`` is one fused kernel that accumulates in float32 and rounds
once. On the CPU it is a composite of about a dozen ops (it upcasts, squares into a new tensor, takes the mean,
adds, takes the root, multiplies twice into new tensors, casts back), so the CPU takes a shorter route with the
same math and the same single rounding: the norm of each row as one reduction (no squared copy), its inverse
RMS in two ops on the ``[M, 1]`` column, then two scalings of one float32 tensor. At one token, where each op
costs its dispatch and not its pass over memory, that is 29 µs against the composite's 44 in float32 and on a
par in 16-bit (``benchmarks/results/torch_backend_cpu.md``); with more rows it saves passes.

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
    """RMSNorm of ``x[M, n]`` in float32, rounded once to ``x``'s dtype; the CPU route."""
    # For float32 input ``.float()`` is ``x`` itself, so the scaling must not be in place there.
    upcast = x.float()
    inverse_rms = inverse_root_mean_square(upcast, n, eps)
    if upcast is x:
        return torch.mul(x, inverse_rms).mul_(weight)
    return upcast.mul_(inverse_rms).mul_(weight).to(x.dtype)


def inverse_root_mean_square(upcast: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """``1 / sqrt(mean(upcast**2) + eps)`` of each row of the float32 ``upcast[M, n]``, as a new ``[M, 1]`` column:
    the row's norm in one reduction (no squared copy), then the rest on the column."""
    norm: torch.Tensor = torch.linalg.vector_norm(upcast, dim=-1, keepdim=True)
    if upcast.is_cpu:  # eps + norm**2 / n in one op: on the CPU each op costs its dispatch, about 5 µs
        return torch.addcmul(epsilon(eps), norm, norm, value=1.0 / n).rsqrt_()
    return norm.square_().mul_(1.0 / n).add_(eps).rsqrt_()


def epsilon(eps: float) -> torch.Tensor:
    """``eps`` as a float32 CPU scalar tensor (never written), made once per value."""
    tensor = _epsilons.get(eps)
    if tensor is None:  # two threads may both make it: either tensor serves
        tensor = _epsilons[eps] = torch.tensor(eps, dtype=torch.float32)
    return tensor


_epsilons: dict[float, torch.Tensor] = {}


@spec.implementation(strided_rows=True)
def rmsnorm_tl(config: RMSNormConfig) -> Callable[..., torch.Tensor]:
    n, eps, offset = config.n, config.eps, config.weight_offset

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, norm_weight(weight, offset), n, eps)

    return rmsnorm
