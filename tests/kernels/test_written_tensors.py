"""What a kernel writes, it writes whole or not at all (issue 27, items 13 and 17).

- A buffer made under ``torch.inference_mode()`` and written outside it (a model loaded in inference mode, called
  under ``no_grad``): torch refuses in-place writes to such a tensor there, so a kernel that writes two tensors
  (``add_rmsnorm``'s residual and ``out``, rope's query and key) must not write the first and then fail on the
  second; lazyops runs such a call in inference mode, and a retry never applies a residual or a rotation twice.
- An in-place input may not share memory with another input, whatever its dtype (a ``view(dtype)`` of it).
- A factory refuses a non-finite ``eps`` or ``weight_offset``.
"""

from __future__ import annotations

import math

import pytest
import torch

import lazyops
from lazyops import KernelInputError, testing


def test_add_rmsnorm_writes_an_inference_out_outside_inference_mode(kernels):
    kernel = kernels.factory("add_rmsnorm_tl")(64, torch.float32)
    generator = torch.Generator().manual_seed(0)
    x, residual, weight = (
        torch.randn(*shape, generator=generator).to(kernels.device) for shape in ((3, 64), (3, 64), (64,))
    )
    with torch.inference_mode():
        out = torch.empty(3, 64, device=kernels.device)
    expected_residual = x + residual
    expected = testing.reference("add_rmsnorm_tl")(x, residual, weight, n=64, dtype=torch.float32)[0]
    with torch.no_grad():
        returned = kernel(x, residual, weight, out=out)
    assert returned is out
    torch.testing.assert_close(residual, expected_residual)  # applied once
    testing.check_close(out, expected, torch.float32)


def test_add_rmsnorm_updates_an_inference_residual_outside_inference_mode(kernels):
    kernel = kernels.factory("add_rmsnorm_tl")(64, torch.float32)
    generator = torch.Generator().manual_seed(1)
    x, weight = (
        torch.randn(3, 64, generator=generator).to(kernels.device),
        torch.randn(64, generator=generator).to(kernels.device),
    )
    with torch.inference_mode():
        residual = torch.randn(3, 64, generator=generator).to(kernels.device)
    expected_residual = x + residual
    with torch.no_grad():
        kernel(x, residual, weight)
    torch.testing.assert_close(residual, expected_residual)


def test_rope_rotates_an_inference_key_outside_inference_mode(kernels):
    kernel = kernels.factory("rope_tl")(16, torch.float32)
    generator = torch.Generator().manual_seed(2)
    positions = torch.randint(0, 8, (3,), generator=generator).to(kernels.device)
    query = torch.randn(3, 32, generator=generator).to(kernels.device)
    cache = torch.randn(8, 16, generator=generator).to(kernels.device)
    with torch.inference_mode():
        key = torch.randn(3, 16, generator=generator).to(kernels.device)
    expected = testing.reference("rope_tl")(positions, query, key, cache, head_dim=16, dtype=torch.float32)
    with torch.no_grad():
        kernel(positions, query, key, cache)
    testing.check_each(query, expected[0], torch.float32, "query")  # rotated once, not twice
    testing.check_each(key, expected[1], torch.float32, "key")


def test_an_in_place_input_sharing_memory_through_another_dtype_is_refused(kernels):
    kernel = kernels.factory("add_rmsnorm_tl")(8, torch.bfloat16, weight_dtype=torch.float32)
    residual = torch.randn(2, 8, dtype=torch.bfloat16).to(kernels.device)
    weight = residual.view(torch.float32).view(-1)  # the residual's 32 bytes seen as 8 float32 values
    x = torch.randn(2, 8, dtype=torch.bfloat16).to(kernels.device)
    before = residual.clone()
    with pytest.raises(KernelInputError, match="residual overlaps weight"):
        kernel(x, residual, weight)
    assert torch.equal(residual, before), "nothing is written before the refusal"


@pytest.mark.parametrize("name", ["rmsnorm_tl", "add_rmsnorm_tl", "rmsnorm_fp8_tl", "add_rmsnorm_fp8_tl"])
@pytest.mark.parametrize("option", ["eps", "weight_offset"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_norm_factory_refuses_a_non_finite_option(name, option, value):
    factory = getattr(lazyops, name)
    with pytest.raises(KernelInputError, match=f"{option} must be a .*finite float"):
        factory(64, torch.float32, **{option: value})


@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0, 0.0])
def test_layernorm_refuses_an_eps_that_is_not_a_positive_finite_float(value):
    with pytest.raises(KernelInputError, match="eps must be a positive finite float"):
        lazyops.layernorm_tl(64, torch.float32, eps=value)
