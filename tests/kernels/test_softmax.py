"""softmax_tl against the float64 reference, in every backend that runs here."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lazyops._backends.torch.softmax import softmax_reference
from lazyops._errors import KernelInputError

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
#: Powers of two and their neighbours, odd sizes, and rows wider than one block (Triton loops past 16384).
WIDTHS = st.sampled_from([1, 3, 64, 100, 128, 1000, 1024, 4096, 5000, 8192, 16384, 20000]) | st.integers(1, 600)


def test_softmax_matches_reference(kernels):
    @kernels.settings()
    @given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), n=WIDTHS, dtype=DTYPES)
    def check(seed: int, m: int, n: int, dtype: torch.dtype) -> None:
        generator = kernels.generator(seed)
        m = kernels.rows(m, n)
        x = kernels.randn(generator, m, n, dtype=dtype, scale=3.0)
        kernel = kernels.factory("softmax_tl")(n, dtype)
        kernels.poison((m, n), dtype)
        kernels.check(kernel(x), softmax_reference(x.double()), dtype)

    check()


def test_softmax_token_count_varies(kernels):
    n, dtype = 1000, torch.float16
    kernel = kernels.factory("softmax_tl")(n, dtype)
    generator = kernels.generator(0)
    for m in (1, 17, 0, 64, 3):
        x = kernels.randn(generator, m, n, dtype=dtype, scale=3.0)
        kernels.check(kernel(x), softmax_reference(x.double()), dtype, what=f"M={m}")


def test_softmax_rejects_bad_inputs(kernels):
    make = kernels.factory("softmax_tl")
    for static in (
        {"n": 0, "dtype": torch.float16},
        {"n": True, "dtype": torch.float16},
        {"n": 64, "dtype": torch.int32},
    ):
        with pytest.raises(KernelInputError):
            make(**static)
    kernel = make(64, torch.float16)
    x = kernels.randn(kernels.generator(0), 8, 64, dtype=torch.float16)
    for what, bad in {
        "width": x[:, :32].contiguous(),
        "rank": x.reshape(-1),
        "dtype": x.float(),
        "layout": kernels.strided(x),
        "type": x.tolist(),
    }.items():
        with pytest.raises(KernelInputError):
            kernel(bad)
            pytest.fail(f"bad {what} accepted")


def test_softmax_refuses_wrong_device(kernels):
    if kernels.backend == "torch":
        pytest.skip("the reference runs on any device")
    kernel = kernels.factory("softmax_tl")(64, torch.float16)
    with pytest.raises(KernelInputError):
        kernel(torch.zeros(8, 64, dtype=torch.float16, device=kernels.wrong_device))


def test_softmax_factory_signature_is_the_reference(kernels):
    name = "softmax_tl"
    assert inspect.signature(kernels.factory(name)) == inspect.signature(kernels.reference_factory(name))
