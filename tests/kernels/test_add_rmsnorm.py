"""add_rmsnorm_tl against the float64 reference, in every backend that runs here."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lazyops._backends.torch.add_rmsnorm import add_rmsnorm_reference
from lazyops._errors import KernelInputError

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
#: Powers of two and their neighbours, odd sizes, and rows wider than one block (Triton loops past 16384).
WIDTHS = st.sampled_from([1, 3, 64, 100, 128, 1000, 1024, 4096, 5000, 8192, 16384, 20000]) | st.integers(1, 600)
EPSILONS = st.sampled_from([1e-6, 1e-5, 0.5])


def run_and_check(kernels, kernel, x, residual, weight, eps, dtype, what="output"):
    """Call ``kernel`` and check both results: ``y``, and ``residual`` overwritten with ``x + residual``."""
    y_ref, total = add_rmsnorm_reference(x.double(), residual.double(), weight.double(), eps)
    kernels.poison(tuple(x.shape), dtype)
    y = kernel(x, residual, weight)
    kernels.check(y, y_ref, dtype, what=what)
    kernels.check_each(residual, total, dtype, what=f"{what}: residual")


def test_add_rmsnorm_matches_reference(kernels):
    @kernels.settings()
    @given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), n=WIDTHS, dtype=DTYPES, eps=EPSILONS)
    def check(seed: int, m: int, n: int, dtype: torch.dtype, eps: float) -> None:
        generator = kernels.generator(seed)
        m = kernels.rows(m, n)
        x = kernels.randn(generator, m, n, dtype=dtype)
        residual = kernels.randn(generator, m, n, dtype=dtype, scale=4.0)
        weight = kernels.randn(generator, n, dtype=dtype)
        run_and_check(kernels, kernels.factory("add_rmsnorm_tl")(n, dtype, eps=eps), x, residual, weight, eps, dtype)

    check()


def test_add_rmsnorm_token_count_varies(kernels):
    n, dtype = 1000, torch.float16
    kernel = kernels.factory("add_rmsnorm_tl")(n, dtype)
    generator = kernels.generator(0)
    weight = kernels.randn(generator, n, dtype=dtype)
    for m in (1, 17, 0, 64, 3):
        x = kernels.randn(generator, m, n, dtype=dtype)
        residual = kernels.randn(generator, m, n, dtype=dtype)
        run_and_check(kernels, kernel, x, residual, weight, 1e-6, dtype, what=f"M={m}")


def test_add_rmsnorm_rejects_bad_inputs(kernels):
    make = kernels.factory("add_rmsnorm_tl")
    for static in (
        {"n": -4, "dtype": torch.float16},
        {"n": 64, "dtype": None},
        {"n": 64, "dtype": "fp16", "eps": "1e-6"},
    ):
        with pytest.raises(KernelInputError):
            make(**static)
    kernel = make(64, torch.float16)
    generator = kernels.generator(0)
    x = kernels.randn(generator, 8, 64, dtype=torch.float16)
    residual = kernels.randn(generator, 8, 64, dtype=torch.float16)
    weight = kernels.randn(generator, 64, dtype=torch.float16)
    before = residual.clone()
    for what, args in {
        "x width": (x[:, :32].contiguous(), residual, weight),
        "residual width": (x, residual[:, :32].contiguous(), weight),
        "weight size": (x, residual, weight[:32].contiguous()),
        "token counts": (x[:4].contiguous(), residual, weight),
        "residual dtype": (x, residual.float(), weight),
        "weight dtype": (x, residual, weight.bfloat16()),
        "x layout": (kernels.strided(x), residual, weight),
        "residual layout": (x, kernels.strided(residual), weight),
    }.items():
        with pytest.raises(KernelInputError):
            kernel(*args)
            pytest.fail(f"bad {what} accepted")
    assert torch.equal(residual, before), "a refused call wrote the residual"


def test_add_rmsnorm_refuses_wrong_device(kernels):
    if kernels.backend == "torch":
        pytest.skip("the reference runs on any device")
    kernel = kernels.factory("add_rmsnorm_tl")(64, torch.float16)
    x, residual = (torch.zeros(8, 64, dtype=torch.float16, device=kernels.wrong_device) for _ in range(2))
    with pytest.raises(KernelInputError):
        kernel(x, residual, torch.zeros(64, dtype=torch.float16, device=kernels.wrong_device))


def test_add_rmsnorm_factory_signature_is_the_reference(kernels):
    name = "add_rmsnorm_tl"
    assert inspect.signature(kernels.factory(name)) == inspect.signature(kernels.reference_factory(name))
