"""matmul_tl against the float64 reference, in every backend that runs here."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lazyops._backends.torch.matmul import matmul_reference
from lazyops._errors import KernelInputError

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
#: Sizes below, at and past the tile sides (16 to 128), odd ones, and k not a multiple of any tile.
SIZES = st.sampled_from([1, 15, 16, 17, 64, 100, 128, 129, 256, 1000]) | st.integers(1, 300)

def test_matmul_matches_reference(kernels):
    # The interpreter's cost follows m*n*k (the tiles are multiplied in numpy): rows are cut to fit that.
    max_products = 3_000_000 if kernels.interpreted else 300_000_000

    @kernels.settings()
    @given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), n=SIZES, k=SIZES, dtype=DTYPES)
    def check(seed: int, m: int, n: int, k: int, dtype: torch.dtype) -> None:
        generator = kernels.generator(seed)
        m = max(1, min(m, max_products // (n * k)))
        a = kernels.randn(generator, m, k, dtype=dtype)
        b = kernels.randn(generator, k, n, dtype=dtype)
        kernel = kernels.factory("matmul_tl")(n, k, dtype)
        kernels.poison((m, n), dtype)
        kernels.check(kernel(a, b), matmul_reference(a.double(), b.double()), dtype)

    check()


def test_matmul_token_count_varies(kernels):
    # Token counts in each of Triton's tile buckets (up to 16, up to 256, more), and back.
    n, k, dtype = 96, 200, torch.bfloat16
    kernel = kernels.factory("matmul_tl")(n, k, dtype)
    generator = kernels.generator(0)
    b = kernels.randn(generator, k, n, dtype=dtype)
    for m in (1, 40, 0, 300, 16, 3):
        a = kernels.randn(generator, m, k, dtype=dtype)
        kernels.check(kernel(a, b), matmul_reference(a.double(), b.double()), dtype, what=f"M={m}")


def test_matmul_rejects_bad_inputs(kernels):
    make = kernels.factory("matmul_tl")
    for static in ({"n": 0, "k": 8, "dtype": torch.float16}, {"n": 8, "k": False, "dtype": torch.float16}):
        with pytest.raises(KernelInputError):
            make(**static)
    kernel = make(32, 48, torch.float16)
    generator = kernels.generator(0)
    a = kernels.randn(generator, 8, 48, dtype=torch.float16)
    b = kernels.randn(generator, 48, 32, dtype=torch.float16)
    for what, args in {
        "a width": (a[:, :32].contiguous(), b),
        "b shape": (a, b.t().contiguous()),
        "b rows": (a, b[:16].contiguous()),
        "a dtype": (a.float(), b),
        "b dtype": (a, b.bfloat16()),
        "a layout": (kernels.strided(a), b),
        "b layout": (a, kernels.strided(b)),
    }.items():
        with pytest.raises(KernelInputError):
            kernel(*args)
            pytest.fail(f"bad {what} accepted")


def test_matmul_refuses_wrong_device(kernels):
    if kernels.backend == "torch":
        pytest.skip("the reference runs on any device")
    kernel = kernels.factory("matmul_tl")(32, 48, torch.float16)
    with pytest.raises(KernelInputError):
        kernel(
            torch.zeros(8, 48, dtype=torch.float16, device=kernels.wrong_device),
            torch.zeros(48, 32, dtype=torch.float16, device=kernels.wrong_device),
        )


def test_matmul_factory_signature_is_the_reference(kernels):
    name = "matmul_tl"
    assert inspect.signature(kernels.factory(name)) == inspect.signature(kernels.reference_factory(name))
