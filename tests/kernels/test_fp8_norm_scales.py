"""``rmsnorm_fp8_tl`` and ``add_rmsnorm_fp8_tl`` with dynamic scales (issue 35's fused producers), in every backend
that runs here: bit for bit the unfused pair (the norm in float32, then ``quant_fp8_tl`` in float32), scale and
output; the static call as it was; TileLang declines what its program cannot store (the rest goes on to Triton)."""

from __future__ import annotations

import pytest
import torch

from lazyops._errors import KernelInputError
from lazyops.specs.quant_fp8 import FP8_MAX, MIN_AMAX

#: a zero row's scale: float32 1e-10 divided by 448 and rounded once, as every backend computes it (a Python
#: ``1e-10 / 448`` rounds the double quotient, which can differ by one float32 ulp)
ZERO_ROW_SCALE = float(torch.tensor([MIN_AMAX]) / torch.tensor([FP8_MAX]))

#: (scales, the factory's other scale arguments, the scale's shape for 7 rows of 64): each layout the norms write
DYNAMIC = [
    ("token", {}, (7, 1)),
    ("group", {"group_size": 16}, (7, 4)),
    ("group", {"group_size": 16, "column_major": True}, (4, 7)),
    ("group", {"group_size": 32, "ue8m0": True}, (7, 2)),
]


def buffer(shape: tuple[int, ...], column_major: bool, device: str) -> torch.Tensor:
    written = torch.full(shape, -1.0, device=device)
    return written.t() if column_major else written


@pytest.mark.parametrize(("scales", "options", "shape"), DYNAMIC)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rmsnorm_fp8_is_the_unfused_pair_in_float32_bit_for_bit(kernels, scales, options, shape, dtype):
    n, device = 64, kernels.device
    x = (torch.randn(7, n) * 3).to(device, dtype)
    x[2] = 0.0  # a zero row: the scale 1e-10 / 448, exact zeros
    x[4, 5] = 1e4  # an outlier: its row's (or group's) other values fall to float8's subnormals
    weight = (torch.rand(n) + 0.5).to(device, dtype)
    column_major = options.get("column_major", False)
    fused_scale, unfused_scale = buffer(shape, column_major, device), buffer(shape, column_major, device)
    factory = kernels.factory("rmsnorm_fp8_tl")(n, dtype, 1e-6, scales=scales, **options)
    fused = factory(x, weight, fused_scale)
    normed = kernels.factory("rmsnorm_tl")(n, torch.float32, 1e-6, weight_dtype=dtype)(x.float(), weight)
    unfused = kernels.factory("quant_fp8_tl")(n, torch.float32, scales, **options)(normed, unfused_scale)
    assert torch.equal(fused.view(torch.uint8), unfused.view(torch.uint8))
    assert torch.equal(fused_scale, unfused_scale)
    zero_row = ZERO_ROW_SCALE if not options.get("ue8m0") else 2.0**-42  # rounded up to a power of two
    assert torch.equal(fused_scale[2], torch.full_like(fused_scale[2], zero_row))
    assert (fused[2].float() == 0).all()


@pytest.mark.parametrize(("scales", "options", "shape"), DYNAMIC[:3])
def test_add_rmsnorm_fp8_is_the_unfused_pair_in_float32_bit_for_bit(kernels, scales, options, shape):
    """The norm of the float32 sum (the residual receives it rounded to bfloat16, as with a static scale), with
    Gemma's ``1 + weight``."""
    n, device, dtype = 64, kernels.device, torch.bfloat16
    x, residual = torch.randn(7, n).to(device, dtype), (torch.randn(7, n) * 4).to(device, dtype)
    total = x.float() + residual.float()
    weight = (torch.rand(n) + 0.5).to(device, dtype)
    column_major = options.get("column_major", False)
    fused_scale, unfused_scale = buffer(shape, column_major, device), buffer(shape, column_major, device)
    factory = kernels.factory("add_rmsnorm_fp8_tl")(n, dtype, 1e-6, weight_offset=1.0, scales=scales, **options)
    fused = factory(x, residual, weight, fused_scale)
    # (the residual is the conformance kit's to judge: Triton's interpreter truncates float32 to bfloat16)
    norm = kernels.factory("rmsnorm_tl")(n, torch.float32, 1e-6, weight_dtype=dtype, weight_offset=1.0)
    unfused = kernels.factory("quant_fp8_tl")(n, torch.float32, scales, **options)(norm(total, weight), unfused_scale)
    assert torch.equal(fused.view(torch.uint8), unfused.view(torch.uint8))
    assert torch.equal(fused_scale, unfused_scale)


def test_the_static_call_keeps_its_form_and_its_label(kernels):
    n, device = 32, kernels.device
    factory = kernels.factory("rmsnorm_fp8_tl")
    scale = torch.full((1,), 0.02, device=device)
    x, weight = torch.randn(3, n, device=device), torch.ones(n, device=device)
    default, explicit = factory(n, torch.float32)(x, weight, scale), factory(n, torch.float32, scales="static")
    assert torch.equal(default.view(torch.uint8), explicit(x, weight, scale).view(torch.uint8))
    assert float(scale) == pytest.approx(0.02)  # read, never written
    assert float(default.float().abs().max()) <= FP8_MAX


def test_the_scale_is_refused_in_the_wrong_shape_and_per_tensor_dynamic_is_not_a_norm_scale(kernels):
    factory = kernels.factory("rmsnorm_fp8_tl")
    x, weight = torch.randn(3, 32, device=kernels.device), torch.ones(32, device=kernels.device)
    with pytest.raises(KernelInputError, match=r"scale must be a float32 tensor of shape \(3, 1\)"):
        factory(32, torch.float32, scales="token")(x, weight, torch.empty(1, device=kernels.device))
    with pytest.raises(KernelInputError, match="scale must be column-major"):
        factory(32, torch.float32, scales="group", group_size=8, column_major=True)(
            x, weight, torch.empty(3, 4, device=kernels.device)
        )
    with pytest.raises(KernelInputError, match="scales must be one of static, token, group"):
        factory(32, torch.float32, scales="tensor")
    with pytest.raises(KernelInputError, match="column_major and ue8m0 are options of scales='group'"):
        factory(32, torch.float32, ue8m0=True)


@pytest.mark.parametrize("name", ["rmsnorm_fp8_tl", "add_rmsnorm_fp8_tl"])
def test_tilelang_declines_dynamic_scales_and_keeps_the_static_one(name):
    pytest.importorskip("tilelang")
    from lazyops._backends import tilelang

    supports = getattr(tilelang, name).lazyops_supports
    from lazyops.specs import spec

    bound = spec(name).bind
    assert supports(bound(4096, torch.bfloat16)) is None
    assert "static scale only" in supports(bound(4096, torch.bfloat16, scales="token"))
    assert "static scale only" in supports(bound(4096, torch.bfloat16, scales="group", column_major=True))
