"""rmsnorm_tl against the float64 reference, in every backend that runs here."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lazyops._backends.torch.rmsnorm import rmsnorm_reference
from lazyops._errors import KernelInputError

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
#: Powers of two and their neighbours, odd sizes, and rows wider than one block (Triton loops past 16384).
WIDTHS = st.sampled_from([1, 3, 64, 100, 128, 1000, 1024, 4096, 5000, 8192, 16384, 20000]) | st.integers(1, 600)
EPSILONS = st.sampled_from([1e-6, 1e-5, 0.5])


def test_rmsnorm_matches_reference(kernels):
    @kernels.settings()
    @given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), n=WIDTHS, dtype=DTYPES, eps=EPSILONS)
    def check(seed: int, m: int, n: int, dtype: torch.dtype, eps: float) -> None:
        generator = kernels.generator(seed)
        m = kernels.rows(m, n)
        x = kernels.randn(generator, m, n, dtype=dtype)
        weight = kernels.randn(generator, n, dtype=dtype)
        kernel = kernels.factory("rmsnorm_tl")(n, dtype, eps=eps)
        kernels.poison((m, n), dtype)
        kernels.check(kernel(x, weight), rmsnorm_reference(x.double(), weight.double(), eps), dtype)

    check()


def test_rmsnorm_token_count_varies(kernels):
    n, dtype = 1000, torch.bfloat16
    kernel = kernels.factory("rmsnorm_tl")(n, dtype)
    generator = kernels.generator(0)
    weight = kernels.randn(generator, n, dtype=dtype)
    for m in (1, 17, 0, 64, 3):
        x = kernels.randn(generator, m, n, dtype=dtype)
        kernels.check(kernel(x, weight), rmsnorm_reference(x.double(), weight.double(), 1e-6), dtype, what=f"M={m}")


def test_rmsnorm_rejects_bad_inputs(kernels):
    make = kernels.factory("rmsnorm_tl")
    for static in (
        {"n": 0, "dtype": torch.float16},
        {"n": 64, "dtype": "int8"},
        {"n": 64, "dtype": torch.float16, "eps": 0.0},
        {"n": 64, "dtype": torch.float16, "eps": -1e-6},
    ):
        with pytest.raises(KernelInputError):
            make(**static)
    kernel = make(64, torch.float16)
    generator = kernels.generator(0)
    x = kernels.randn(generator, 8, 64, dtype=torch.float16)
    weight = kernels.randn(generator, 64, dtype=torch.float16)
    for what, args in {
        "x width": (x[:, :32].contiguous(), weight),
        "weight size": (x, weight[:32].contiguous()),
        "weight rank": (x, weight[None, :]),
        "x dtype": (x.float(), weight),
        "weight dtype": (x, weight.float()),
        "x layout": (kernels.strided(x), weight),
        "weight layout": (x, kernels.strided(weight)),
    }.items():
        with pytest.raises(KernelInputError):
            kernel(*args)
            pytest.fail(f"bad {what} accepted")


def test_rmsnorm_refuses_wrong_device(kernels):
    if kernels.backend == "torch":
        pytest.skip("the reference runs on any device")
    kernel = kernels.factory("rmsnorm_tl")(64, torch.float16)
    x = torch.zeros(8, 64, dtype=torch.float16, device=kernels.wrong_device)
    with pytest.raises(KernelInputError):
        kernel(x, torch.zeros(64, dtype=torch.float16, device=kernels.wrong_device))


def test_rmsnorm_factory_signature_is_the_reference(kernels):
    name = "rmsnorm_tl"
    assert inspect.signature(kernels.factory(name)) == inspect.signature(kernels.reference_factory(name))
