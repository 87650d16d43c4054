"""LayerNorm in plain PyTorch (the spec: ``lazyops.specs.layernorm``).

``F.layer_norm`` is one native kernel on the CPU and on CUDA; for 16-bit input both take the mean and the
variance in float32 (Welford on CUDA), keep them in float32 (torch's ``acc_type``) and compute
``(x - mean) * rstd * weight + bias`` in float32 before the one rounding at the store: the spec's math as it
stands. (On the CPU, checked against the float64 definition rounded once: it differs in as few last bits as the
explicit float32 route does; CUDA's is read from torch's ``layer_norm_kernel.cu`` and held to the same
tolerance by the GPU conformance run.) Its native kernels want weight and
bias in ``x``'s dtype (CUDA refuses a mixed call; the CPU accepts it only for 16-bit input), so a float32 weight
under 16-bit activations takes the float32 route: upcast, the float32 kernel, one rounding.

So does a row of one feature (``n = 1``), where the result is ``bias`` whatever ``x`` is: the CPU's native float16
kernel returns ``bias`` plus up to 5e-4 there (rows of |x| ≈ 7–9; relative error 1.35e-3 and 3.5e-3 over 256
such rows, against the kit's 1e-3), where the float32 route returns ``bias`` exactly. Widths from 2 up agree with
the float32 route to the last bit (checked at n = 2, 3, 4, 16 and 4096, rows centred at 0 and at 8).

Rows may be strided (views of packed buffers) and leading dimensions are flattened by the spec's wrapper;
``F.layer_norm`` takes a row-strided ``[M, n]`` view (it makes the copy it needs itself).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.layernorm import LayerNormConfig, spec


@spec.implementation(strided_rows=True)
def layernorm_tl(config: LayerNormConfig) -> Callable[..., torch.Tensor]:
    shape, eps, dtype = (config.n,), config.eps, config.dtype
    # ``torch.layer_norm``, the native op ``F.layer_norm`` calls after its Python checks: 0.5 µs less a call
    layer_norm = torch.layer_norm

    if config.weight_dtype == dtype and config.n > 1:

        def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            return layer_norm(x, shape, weight, bias, eps)

        return layernorm

    def upcast_layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return layer_norm(x.float(), shape, weight.float(), bias.float(), eps).type(dtype)

    return upcast_layernorm
