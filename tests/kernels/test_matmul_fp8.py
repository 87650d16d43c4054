"""``matmul_fp8_tl`` in every backend that runs here, one case per scale kind pinned down (the conformance kit draws
the rest): M from 1 and not a tile multiple, per-tensor, rowwise and 128-block scales, column-major activation
scales, the bias, both output dtypes; and the kit's GEMM judge itself (its tolerance grows with k, and still refuses
an accumulation of the whole of k at Hopper's fp8 precision)."""

from __future__ import annotations

import math

import pytest
import torch

from lazyops.specs.matmul_fp8 import ACCUMULATION, spec
from lazyops.testing import Case, ConformanceError, check_case
from lazyops.testing._compare import TOLERANCE, check_close

F8 = torch.float8_e4m3fn


@pytest.mark.parametrize("scales", ["tensor", "rowwise", "block"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_each_scale_kind_matches_the_dequantised_float64_product(kernels, scales, dtype):
    geometry = {"bias": True, "zero_row": True, "saturated": True, "column_major": scales == "block"}
    case = Case("matmul_fp8_tl", (144, 272, dtype), {"scales": scales}, (1, 129, 0, 17), seed=3, geometry=geometry)
    check_case(kernels.factory("matmul_fp8_tl"), case, device=kernels.device, max_elements=kernels.max_elements)


def test_block_scales_apply_to_their_own_blocks(kernels):
    """Each 128x128 weight block and each 1x128 activation group multiplies only its own products: ones in ``a``
    and ``b`` make ``c[i, j]`` the sum over the k blocks of ``scale_a[i, g] * scale_b[j // 128, g]`` times the
    block's width (128, then the 16 left over)."""
    n, k, m = 130, 144, 3
    device = kernels.device
    a, b = torch.ones(m, k, device=device).to(F8), torch.ones(n, k, device=device).to(F8)
    scale_a = torch.tensor([[1.0, 2.0], [0.5, 0.25], [4.0, 0.0]], device=device)
    scale_b = torch.tensor([[1.0, 8.0], [2.0, 0.5]], device=device)
    c = kernels.factory("matmul_fp8_tl")(n, k, torch.bfloat16, "block")(a, b, scale_a, scale_b)
    widths = torch.tensor([128.0, 16.0])
    for j, row in ((0, 0), (127, 0), (128, 1), (129, 1)):
        want = (scale_a.cpu() * scale_b.cpu()[row] * widths).sum(-1)
        assert torch.equal(c[:, j].float().cpu(), want.to(torch.bfloat16).float()), j


def test_leading_dimensions_strided_rows_and_out(kernels):
    n, k = 32, 64
    device = kernels.device
    packed = (torch.randn(2, 3, 2 * k, generator=torch.Generator().manual_seed(0)) * 50).to(F8).to(device)
    a = packed[..., :k]  # strided rows, as a slice of a packed buffer
    b = (torch.randn(n, k, generator=torch.Generator().manual_seed(1)) * 50).to(F8).to(device)
    scale_a, scale_b = torch.full((6, 1), 0.01, device=device), torch.full((n, 1), 0.02, device=device)
    bias = torch.arange(n, dtype=torch.bfloat16, device=device)
    out = torch.empty(2, 3, n, dtype=torch.bfloat16, device=device)
    kernel = kernels.factory("matmul_fp8_tl")(n, k, torch.bfloat16, "rowwise")
    assert kernel(a, b, scale_a, scale_b, bias=bias, out=out) is out
    (want,) = spec.reference(
        spec.bind(n, k, torch.bfloat16, "rowwise"), *(t.double() for t in (a, b, scale_a, scale_b, bias))
    )
    check_close(out, want, torch.bfloat16)


def test_wrong_scale_shapes_and_dtypes_are_refused(kernels):
    from lazyops._errors import KernelInputError

    device = kernels.device
    kernel = kernels.factory("matmul_fp8_tl")(16, 256, "bfloat16", "block")
    a, b = torch.zeros(4, 256, device=device).to(F8), torch.zeros(16, 256, device=device).to(F8)
    good_a, good_b = torch.ones(4, 2, device=device), torch.ones(1, 2, device=device)
    with pytest.raises(KernelInputError, match="scale_a must be a float32 tensor of shape \\(4, 2\\)"):
        kernel(a, b, torch.ones(4, 1, device=device), good_b)
    with pytest.raises(KernelInputError, match="scale_b"):
        kernel(a, b, good_a, good_b.double())
    with pytest.raises(KernelInputError, match="b"):
        kernel(a, b.float(), good_a, good_b)
    with pytest.raises(KernelInputError, match="bias"):
        kernel(a, b, good_a, good_b, bias=torch.zeros(17, dtype=torch.bfloat16, device=device))
    with pytest.raises(KernelInputError, match="dtype"):
        kernels.factory("matmul_fp8_tl")(16, 256, torch.int8)


def test_the_gemm_judge_grows_with_k_and_refuses_imprecise_accumulation():
    """The tolerance is the output dtype's plus float32 accumulation over ``k``; an output off by what Hopper's fp8
    accumulator (~14 bits, never promoted) errs over k = 4096 fails it in float16."""
    small, large = (spec.tolerance(spec.bind(4096, k, torch.float16)) for k in (16, 16384))
    assert small == pytest.approx(TOLERANCE[torch.float16] + 4 * ACCUMULATION)
    assert small < large < 1.3 * TOLERANCE[torch.float16]
    ref = torch.randn(64, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    imprecise = ref * (1 + 2.0**-14 * math.sqrt(4096) * torch.randn(ref.shape, dtype=torch.float64))
    with pytest.raises(ConformanceError):
        check_close(imprecise.half(), ref, torch.float16, tolerance=spec.tolerance(spec.bind(256, 4096, "float16")))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the torch backend's torch._scaled_mm route runs on CUDA")
@pytest.mark.parametrize("scales", ["tensor", "rowwise", "block"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(4096, 4096), (272, 144)], ids=["Llama", "not a multiple of 16"])
def test_the_torch_backends_cuda_routes_conform(scales, dtype, shape):
    """On CUDA the torch backend takes ``torch._scaled_mm`` for per-tensor and rowwise scales (16-multiple shapes),
    the dequantising route otherwise: each judged by the kit, M from 1 to past a tile, with a bias."""
    from lazyops import _api

    geometry = {"bias": True, "zero_row": True, "saturated": True, "column_major": scales == "block"}
    case = Case("matmul_fp8_tl", (*shape, dtype), {"scales": scales}, (1, 129, 1000), seed=5, geometry=geometry)
    check_case(_api.kernel_factory("torch", "matmul_fp8_tl"), case, device="cuda", max_elements=10**9)
