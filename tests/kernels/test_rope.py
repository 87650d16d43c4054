"""rope_tl against the float64 reference, in every backend that runs here."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lazyops._backends.torch.rope import rope_reference
from lazyops._errors import KernelInputError

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])


@st.composite
def geometries(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """``(head_dim, r, query heads, key heads)``: r even, from 2 up to the whole head."""
    head_dim = draw(st.sampled_from([2, 6, 64, 80, 128, 256]) | st.integers(2, 160))
    whole, quarter = head_dim - head_dim % 2, head_dim // 4 * 2 or 2
    rotary = draw(st.sampled_from([whole, quarter]) | st.integers(1, head_dim // 2).map(lambda pairs: 2 * pairs))
    query_heads = draw(st.integers(1, 32))
    key_heads = draw(st.integers(1, query_heads))
    return head_dim, rotary, query_heads, key_heads


def reference(positions, x, cache, head_dim, is_neox) -> torch.Tensor:
    """The float64 reference; with no tokens, nothing to rotate (the reference cannot reshape an empty x)."""
    if x.shape[0] == 0:
        return x.double()
    return rope_reference(positions, x.double(), cache.double(), head_dim, is_neox)


def heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x.reshape(x.shape[0], x.shape[1] // head_dim, head_dim)


def run_and_check(kernels, kernel, positions, query, key, cache, head_dim, is_neox, dtype, what="output"):
    """Call ``kernel``; check that it returns its arguments, rotated in place, the rest of each head untouched."""
    rotary = cache.shape[1]
    query_ref, key_ref = (reference(positions, x, cache, head_dim, is_neox) for x in (query, key))
    tails = [heads(t, head_dim)[..., rotary:].clone() for t in (query, key)]
    out_query, out_key = kernel(positions, query, key, cache)
    assert out_query is query and out_key is key, "rope must return its query and key, rotated in place"
    for name, out, ref, tail in (("query", query, query_ref, tails[0]), ("key", key, key_ref, tails[1])):
        kernels.check(out, ref, dtype, what=f"{what}: {name}")
        kernels.check_each(out, ref, dtype, what=f"{what}: {name}")
        assert torch.equal(heads(out, head_dim)[..., rotary:], tail), f"{what}: {name} changed past feature r"


def test_rope_matches_reference(kernels):
    @kernels.settings()
    @given(
        seed=st.integers(0, 2**32 - 1),
        m=st.integers(1, 300),
        geometry=geometries(),
        is_neox=st.booleans(),
        dtype=DTYPES,
        cache_is_float32=st.booleans(),
        positions_dtype=st.sampled_from([torch.int32, torch.int64]),
        cache_rows=st.integers(1, 4096),
    )
    def check(seed, m, geometry, is_neox, dtype, cache_is_float32, positions_dtype, cache_rows) -> None:
        head_dim, rotary, query_heads, key_heads = geometry
        generator = kernels.generator(seed)
        m = kernels.rows(m, (query_heads + key_heads) * head_dim)
        if kernels.interpreted:  # one program a token, each some 40 numpy calls: the interpreter's cost is M
            m = min(m, 96)
        positions = torch.randint(0, cache_rows, (m,), generator=generator, dtype=positions_dtype).to(kernels.device)
        query = kernels.randn(generator, m, query_heads * head_dim, dtype=dtype)
        key = kernels.randn(generator, m, key_heads * head_dim, dtype=dtype)
        cache = kernels.randn(generator, cache_rows, rotary, dtype=torch.float32 if cache_is_float32 else dtype)
        kernel = kernels.factory("rope_tl")(head_dim, dtype, is_neox=is_neox)
        run_and_check(kernels, kernel, positions, query, key, cache, head_dim, is_neox, dtype)

    check()


def test_rope_token_count_varies(kernels):
    head_dim, dtype = 128, torch.bfloat16
    kernel = kernels.factory("rope_tl")(head_dim, dtype, is_neox=False)
    generator = kernels.generator(0)
    cache = kernels.randn(generator, 512, 64, dtype=torch.float32)
    for m in (1, 17, 0, 64, 3):
        positions = torch.randint(0, 512, (m,), generator=generator).to(kernels.device)
        query = kernels.randn(generator, m, 8 * head_dim, dtype=dtype)
        key = kernels.randn(generator, m, 2 * head_dim, dtype=dtype)
        run_and_check(kernels, kernel, positions, query, key, cache, head_dim, False, dtype, what=f"M={m}")


def test_rope_rejects_bad_inputs(kernels):
    make = kernels.factory("rope_tl")
    for static in ({"head_dim": 0, "dtype": torch.float16}, {"head_dim": 64, "dtype": torch.float64}):
        with pytest.raises(KernelInputError):
            make(**static)
    head_dim = 64
    kernel = make(head_dim, torch.float16)
    generator = kernels.generator(0)
    positions = torch.arange(8, device=kernels.device)
    query = kernels.randn(generator, 8, 4 * head_dim, dtype=torch.float16)
    key = kernels.randn(generator, 8, 2 * head_dim, dtype=torch.float16)
    cache = kernels.randn(generator, 16, head_dim, dtype=torch.float32)
    before = query.clone(), key.clone()
    for what, args in {
        "positions dtype": (positions.float(), query, key, cache),
        "positions rank": (positions[None, :], query, key, cache),
        "query not whole heads": (positions, query[:, :100].contiguous(), key, cache),
        "key not whole heads": (positions, query, key[:, :70].contiguous(), cache),
        "token counts": (positions[:4].contiguous(), query, key, cache),
        "query dtype": (positions, query.bfloat16(), key, cache),
        "cache dtype": (positions, query, key, cache.double()),
        "odd rotary dimension": (positions, query, key, cache[:, :63].contiguous()),
        "rotary dimension past the head": (positions, query, key, torch.cat([cache, cache], 1)),
        "query layout": (positions, kernels.strided(query), key, cache),
        "key layout": (positions, query, kernels.strided(key), cache),
    }.items():
        with pytest.raises(KernelInputError):
            kernel(*args)
            pytest.fail(f"bad {what} accepted")
    assert torch.equal(query, before[0]) and torch.equal(key, before[1]), "a refused call rotated query or key"


def test_rope_rejects_positions_outside_the_cache_on_the_host(kernels):
    if kernels.device != "cpu":
        pytest.skip("GPU kernels do not range-check positions (it would synchronise every call)")
    kernel = kernels.factory("rope_tl")(64, torch.float16)
    generator = kernels.generator(0)
    query = kernels.randn(generator, 2, 64, dtype=torch.float16)
    key = kernels.randn(generator, 2, 64, dtype=torch.float16)
    cache = kernels.randn(generator, 16, 64, dtype=torch.float32)
    for bad in ([0, 16], [-1, 3]):
        with pytest.raises(KernelInputError):
            kernel(torch.tensor(bad, device=kernels.device), query, key, cache)


def test_rope_refuses_wrong_device(kernels):
    if kernels.backend == "torch":
        pytest.skip("the reference runs on any device")
    kernel = kernels.factory("rope_tl")(64, torch.float16)
    device = kernels.wrong_device
    with pytest.raises(KernelInputError):
        kernel(
            torch.zeros(2, dtype=torch.int64, device=device),
            torch.zeros(2, 64, dtype=torch.float16, device=device),
            torch.zeros(2, 64, dtype=torch.float16, device=device),
            torch.zeros(16, 64, dtype=torch.float32, device=device),
        )


def test_rope_factory_signature_is_the_reference(kernels):
    name = "rope_tl"
    assert inspect.signature(kernels.factory(name)) == inspect.signature(kernels.reference_factory(name))
