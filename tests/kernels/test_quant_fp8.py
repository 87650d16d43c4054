"""``quant_fp8_tl`` on the values that break quantizers, in every backend that runs here (the conformance kit draws
them too; these pin each one down): a zero row's scale, NaN, saturation, UE8M0 scales, column-major scales, the
per-tensor reduction across programs, ``scale_ub``, strided rows; and the kit's float8 judge itself."""

from __future__ import annotations

import pytest
import torch

from lazyops.specs.quant_fp8 import FP8_MAX, MIN_AMAX
from lazyops.testing import ConformanceError
from lazyops.testing._compare import check_fp8_rounding

#: a zero row's scale: float32 1e-10 divided by 448 and rounded once, as every backend computes it (a Python
#: ``1e-10 / 448`` rounds the double quotient, which can differ by one float32 ulp)
ZERO_ROW_SCALE = float(torch.tensor([MIN_AMAX]) / torch.tensor([FP8_MAX]))

F8 = torch.float8_e4m3fn


def test_a_zero_row_gets_a_finite_positive_scale_and_exact_zeros(kernels):
    x = torch.zeros(3, 256, device=kernels.device)
    x[1] = torch.linspace(-3, 3, 256)
    scale = torch.empty(3, 2, device=kernels.device)
    y = kernels.factory("quant_fp8_tl")(256, torch.float32, "group")(x, scale)
    assert torch.equal(scale[0], torch.full((2,), ZERO_ROW_SCALE, device=kernels.device))
    assert torch.isfinite(1 / scale).all()
    assert (y[0].float() == 0).all() and (y[2].float() == 0).all()
    assert float(y[1].float().abs().max()) == FP8_MAX  # each group's maximum lands on ±448


def test_nan_stays_nan_and_leaves_its_neighbours_scaled(kernels):
    x = torch.tensor([[1.0, float("nan"), -2.0, 0.5]], device=kernels.device)
    scale = torch.empty(1, 1, device=kernels.device)
    y = kernels.factory("quant_fp8_tl")(4, torch.float32, "token")(x, scale).float()
    assert float(scale) == pytest.approx(2.0 / FP8_MAX)
    assert torch.isnan(y[0, 1]) and float(y[0, 2]) == -FP8_MAX and float(y[0, 0]) == 224.0


def test_a_static_scale_saturates_and_is_left_as_it_was(kernels):
    x = torch.tensor([[448.0, 449.0, -1e4, 1e-3, 2.0**-9]], device=kernels.device)
    scale = torch.ones(1, device=kernels.device)
    y = kernels.factory("quant_fp8_tl")(5, torch.float32, "static")(x, scale).float()
    assert y.tolist() == [[448.0, 448.0, -448.0, 2.0**-9, 2.0**-9]]  # 1e-3 is 0.51 of the subnormals' step
    assert float(scale) == 1.0


def test_ue8m0_scales_are_powers_of_two_and_column_major_is_written_in_place(kernels):
    x = torch.randn(5, 64, device=kernels.device) * 3
    buffer = torch.full((4, 5), -1.0, device=kernels.device)
    factory = kernels.factory("quant_fp8_tl")(64, torch.float32, "group", group_size=16, column_major=True, ue8m0=True)
    factory(x, buffer.t())
    exponent = torch.log2(buffer)
    assert torch.equal(exponent, exponent.round())
    amax = x.reshape(5, 4, 16).abs().amax(-1).t()
    assert (buffer * FP8_MAX >= amax).all() and (buffer * FP8_MAX < 2 * amax).all()


def test_a_per_tensor_scale_spans_every_program_and_scale_ub_bounds_tokens(kernels):
    x = torch.randn(9, 40, device=kernels.device)
    x[7, 3] = 100.0  # in a row of its own program
    scale = torch.empty(1, device=kernels.device)
    kernels.factory("quant_fp8_tl")(40, torch.float32, "tensor")(x, scale)
    assert float(scale) == pytest.approx(100.0 / FP8_MAX)
    per_token = torch.empty(9, 1, device=kernels.device)
    y = kernels.factory("quant_fp8_tl")(40, torch.float32, "token")(
        x, per_token, scale_ub=torch.tensor([10.0], device=kernels.device)
    )
    assert float(per_token[7]) == pytest.approx(10.0 / FP8_MAX) and float(y[7, 3].float()) == FP8_MAX


def test_strided_rows_are_read_in_place(kernels):
    packed = torch.randn(6, 96, device=kernels.device)
    x = packed[:, 16:80]
    scale, dense_scale = torch.empty(6, 1, device=kernels.device), torch.empty(6, 1, device=kernels.device)
    kernel = kernels.factory("quant_fp8_tl")(64, torch.float32, "token")
    assert torch.equal(kernel(x, scale).view(torch.uint8), kernel(x.contiguous(), dense_scale).view(torch.uint8))
    assert torch.equal(scale, dense_scale)


def test_the_float8_judge_wants_round_to_nearest_off_ties():
    ref = torch.tensor([1.0, 1.06, 1.07, 1.0625, 300.0, -0.0041], dtype=torch.float64)  # 1.0625: a tie
    check_fp8_rounding(ref.to(F8), ref, "nearest")
    check_fp8_rounding(torch.tensor([1.0, 1.0, 1.125, 1.125, 288.0, -0.00390625]).to(F8), ref, "tie either way")
    with pytest.raises(ConformanceError, match="rounded to nearest"):
        check_fp8_rounding(torch.tensor([1.0, 1.0, 1.0, 1.0, 288.0, -0.00390625]).to(F8), ref, "truncated")


@pytest.mark.parametrize("scales", ["static", "tensor", "token", "group"])
def test_silu_and_mul_fp8_is_the_unfused_pair_in_float32_bit_for_bit(kernels, scales):
    """``silu_and_mul_fp8_tl`` against ``silu_and_mul_tl`` in float32 then ``quant_fp8_tl``: the same float32 product,
    the same scale, the same conversion (16-bit inputs upcast first: the unfused pair in float32)."""
    n, device = 64, kernels.device
    x = (torch.randn(7, 2 * n) * 4).to(device, torch.bfloat16)
    kwargs = {"group_size": 16} if scales == "group" else {}
    shape = (1,) if scales in ("static", "tensor") else (7, 4 if scales == "group" else 1)
    fused_scale, unfused_scale = torch.full(shape, 0.05, device=device), torch.full(shape, 0.05, device=device)
    fused = kernels.factory("silu_and_mul_fp8_tl")(n, torch.bfloat16, scales, **kwargs)(x, fused_scale)
    product = kernels.factory("silu_and_mul_tl")(n, torch.float32)(x.float())
    unfused = kernels.factory("quant_fp8_tl")(n, torch.float32, scales, **kwargs)(product, unfused_scale)
    assert torch.equal(fused.view(torch.uint8), unfused.view(torch.uint8))
    assert torch.equal(fused_scale, unfused_scale)
