"""gelu_and_mul_tl on negative gates, element by element, in every backend.

``0.5 * g * (1 + erf(g / sqrt 2))``, as ``F.gelu`` computes it in float32, cancels for negative gates (relative
error 1.2e-5 at g = -3.3, past float32's 1e-5): a conformance draw of a one-feature row found it. The backends
compute ``erfc(-z)`` and ``g * sigmoid(2u)`` in float32 instead (``lazyops.specs.gelu_and_mul``), and this holds each output
element, not just the row's norm, to the dtype's tolerance across the gate's range.

TileLang's kernel computes ``max(g, 0) - |g| erfc(|g| / sqrt 2) / 2`` (no select on the sign, which would stop
its loop's vectorization) and the same sigmoid; it runs here only on a GPU (``pytest -m gpu``).
"""

from __future__ import annotations

import math

import pytest
import torch

from lazyops.specs.gelu_and_mul import ERFC_COEFFICIENTS, erfc_of_nonnegative, spec
from lazyops.testing import TOLERANCE
from off_the_cpu import off_the_cpu, plain  # tests/off_the_cpu.py

#: Gates down to -5 and, for float16, down to -3.5, past which GELU's value falls below float16's smallest normal
#: number.
LOWEST = {torch.float32: -5.0, torch.bfloat16: -5.0, torch.float16: -3.5}
#: The torch backend keeps torch's native ops in 16-bit (their cancellation stays under the dtype's rounding to
#: g = -4: see its module), so its 16-bit rows are checked from there.
TORCH_16_BIT_LOWEST = -4.0


def test_the_erfc_approximation_is_within_its_stated_error() -> None:
    assert len(ERFC_COEFFICIENTS) == 10
    worst = max(abs(erfc_of_nonnegative(a / 100) / math.erfc(a / 100) - 1) for a in range(0, 1000))
    assert worst < 1.2e-7


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_every_element_is_within_tolerance_on_negative_gates(kernels, approximate, dtype):
    lowest = LOWEST[dtype]
    if kernels.backend == "torch" and dtype != torch.float32:
        lowest = max(lowest, TORCH_16_BIT_LOWEST)
    gates = torch.linspace(lowest, 5.0, 401, dtype=torch.float64)
    gates = gates[gates.abs() > 1e-3]
    x = torch.stack([gates, torch.full_like(gates, 1.5)], dim=-1).to(dtype)  # 400 rows of one feature
    kernel = kernels.factory("gelu_and_mul_tl")(1, dtype, approximate=approximate)
    got = kernel(x.to(kernels.device)).double().cpu()
    config = spec.bind(1, dtype, approximate=approximate)
    (expected,) = spec.reference(config, x.double())  # the definition, in its cancellation-free float64 forms
    relative = ((got - expected).abs() / expected.abs()).flatten()
    worst = int(relative.argmax())
    assert relative[worst] <= TOLERANCE[dtype], (
        f"gate {float(x[worst, 0]):.4f}: relative error {float(relative[worst]):.2e} > {TOLERANCE[dtype]:.0e}"
    )


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_the_torch_float32_route_for_other_devices_computes_the_same(approximate):
    """A CUDA addcmul refuses the CPU scalars the CPU route adds to; other devices take plain ops."""
    from lazyops._backends.torch.gelu_and_mul import gelu_and_mul_tl

    gates = torch.linspace(-5.0, 5.0, 401, dtype=torch.float64)
    x = torch.stack([gates, torch.full_like(gates, 1.5)], dim=-1)
    (expected,) = spec.reference(spec.bind(1, torch.float32, approximate=approximate), x)
    kernel = gelu_and_mul_tl(1, torch.float32, approximate=approximate)
    for got in (kernel(x.float()), plain(kernel(*off_the_cpu(x.float())))):
        relative = ((got.double() - expected).abs() / expected.abs()).max()
        assert relative <= TOLERANCE[torch.float32]
