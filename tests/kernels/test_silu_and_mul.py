"""silu_and_mul_tl against the float64 reference, in every backend that runs here."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lazyops._backends.torch.silu_and_mul import silu_and_mul_reference
from lazyops._errors import KernelInputError

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
#: Output widths: powers of two and their neighbours, odd sizes, and more than one column block (4096 in Triton).
WIDTHS = st.sampled_from([1, 3, 64, 100, 128, 1000, 1024, 4096, 5000, 8192, 14336]) | st.integers(1, 600)


def test_silu_and_mul_matches_reference(kernels):
    @kernels.settings()
    @given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), n=WIDTHS, dtype=DTYPES)
    def check(seed: int, m: int, n: int, dtype: torch.dtype) -> None:
        generator = kernels.generator(seed)
        m = kernels.rows(m, 2 * n)
        x = kernels.randn(generator, m, 2 * n, dtype=dtype, scale=3.0)
        kernel = kernels.factory("silu_and_mul_tl")(n, dtype)
        kernels.poison((m, n), dtype)
        kernels.check(kernel(x), silu_and_mul_reference(x.double()), dtype)

    check()


def test_silu_and_mul_token_count_varies(kernels):
    n, dtype = 1000, torch.bfloat16
    kernel = kernels.factory("silu_and_mul_tl")(n, dtype)
    generator = kernels.generator(0)
    for m in (1, 17, 0, 64, 3):
        x = kernels.randn(generator, m, 2 * n, dtype=dtype, scale=3.0)
        kernels.check(kernel(x), silu_and_mul_reference(x.double()), dtype, what=f"M={m}")


def test_silu_and_mul_rejects_bad_inputs(kernels):
    make = kernels.factory("silu_and_mul_tl")
    for static in (
        {"n": 0, "dtype": torch.float16},
        {"n": 64.0, "dtype": torch.float16},
        {"n": 64, "dtype": "float64"},
    ):
        with pytest.raises(KernelInputError):
            make(**static)
    kernel = make(64, torch.float16)
    x = kernels.randn(kernels.generator(0), 8, 128, dtype=torch.float16)
    for what, bad in {
        "width n, not 2n": x[:, :64].contiguous(),
        "rank": x.reshape(-1),
        "dtype": x.bfloat16(),
        "layout": kernels.strided(x),
    }.items():
        with pytest.raises(KernelInputError):
            kernel(bad)
            pytest.fail(f"bad {what} accepted")


def test_silu_and_mul_refuses_wrong_device(kernels):
    if kernels.backend == "torch":
        pytest.skip("the reference runs on any device")
    kernel = kernels.factory("silu_and_mul_tl")(64, torch.float16)
    with pytest.raises(KernelInputError):
        kernel(torch.zeros(8, 128, dtype=torch.float16, device=kernels.wrong_device))


def test_silu_and_mul_factory_signature_is_the_reference(kernels):
    name = "silu_and_mul_tl"
    assert inspect.signature(kernels.factory(name)) == inspect.signature(kernels.reference_factory(name))
