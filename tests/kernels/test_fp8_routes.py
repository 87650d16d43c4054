"""The torch backend's float8 norms off the CPU: ``F.rms_norm``'s fused kernel, the scale folded into a float32
weight, and for 16-bit inputs the users' composition (the norm rounded to 16 bits before float8).

The route is chosen by ``x.is_cpu``; ``tests/off_the_cpu.py`` runs it on this machine. Each result is held to the
spec's tolerance, and its error to within 1 % of the CPU route's (which rounds once): the 16-bit rounding is far
below float8's. Measured at ``[1024, 4096]``: bfloat16 2.650e-2 against 2.645e-2 (rmsnorm_fp8), 2.658e-2 against
2.648e-2 (add_rmsnorm_fp8); float16 and float32 within 1e-6 of each other.
"""

from __future__ import annotations

import pytest
import torch

from lazyops._backends.torch.add_rmsnorm_fp8 import add_rmsnorm_fp8_tl
from lazyops._backends.torch.rmsnorm_fp8 import rmsnorm_fp8_tl
from lazyops.specs.add_rmsnorm_fp8 import spec as add_spec
from lazyops.specs.rmsnorm_fp8 import spec as norm_spec
from lazyops.testing import TOLERANCE
from off_the_cpu import off_the_cpu, plain  # tests/off_the_cpu.py

N = 4096
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected).norm() / expected.norm())


def inputs(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(256, N, generator=generator).to(dtype)
    residual = torch.randn(256, N, generator=generator).to(dtype)
    weight = (torch.rand(N, generator=generator) + 0.5).to(dtype)
    scale = torch.tensor([0.05])
    return x, residual, weight, scale


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_fp8_off_the_cpu(dtype: torch.dtype, offset: float) -> None:
    x, _, weight, scale = inputs(dtype, 1)
    if offset:
        weight = weight - 0.75  # Gemma's weight is stored less 1
    config = norm_spec.bind(N, dtype, weight_offset=offset)
    expected, _ = norm_spec.reference(config, x.double(), weight.double(), scale.double())  # (y, scale as it was)
    kernel = rmsnorm_fp8_tl(N, dtype, weight_offset=offset)
    on_cpu = relative(kernel(x, weight, scale), expected)
    elsewhere = relative(plain(kernel(*off_the_cpu(x, weight, scale))), expected)
    assert elsewhere <= TOLERANCE[torch.float8_e4m3fn]
    assert elsewhere <= on_cpu * 1.01


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rmsnorm_fp8_off_the_cpu(dtype: torch.dtype) -> None:
    x, residual, weight, scale = inputs(dtype, 2)
    config = add_spec.bind(N, dtype)
    expected, expected_residual, _ = add_spec.reference(
        config, x.double(), residual.double(), weight.double(), scale.double()
    )
    kernel = add_rmsnorm_fp8_tl(N, dtype)
    cpu_residual, device_residual = residual.clone(), residual.clone()
    on_cpu = relative(kernel(x, cpu_residual, weight, scale), expected)
    moved = off_the_cpu(x, device_residual, weight, scale)
    elsewhere = relative(plain(kernel(*moved)), expected)
    assert elsewhere <= TOLERANCE[torch.float8_e4m3fn]
    assert elsewhere <= on_cpu * 1.01
    # the stored sum is the rounded sum on either route, and the caller's residual holds it
    assert torch.equal(moved[1].as_subclass(torch.Tensor), cpu_residual)
    assert relative(cpu_residual, expected_residual) <= TOLERANCE[dtype]
