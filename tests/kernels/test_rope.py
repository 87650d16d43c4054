"""rope_tl beyond the conformance examples: positions outside the cache, refused where checking them is free."""

from __future__ import annotations

import pytest
import torch

from lazyops._errors import KernelInputError


def test_positions_outside_the_cache_are_refused_on_the_host(kernels):
    if kernels.device != "cpu":
        pytest.skip("GPU kernels do not range-check positions (it would synchronise every call)")
    kernel = kernels.factory("rope_tl")(64, torch.float16)
    query = torch.randn(2, 64, dtype=torch.float16)
    key = torch.randn(2, 64, dtype=torch.float16)
    cache = torch.randn(16, 64, dtype=torch.float32)
    before = query.clone(), key.clone()
    for bad in ([0, 16], [-1, 3]):
        with pytest.raises(KernelInputError, match="outside the cache"):
            kernel(torch.tensor(bad), query, key, cache)
    assert torch.equal(query, before[0]) and torch.equal(key, before[1]), "a refused call rotated query or key"


def test_meta_tensors_trace_without_reading_positions(kernels):
    """Shape-only tracing (meta tensors) must not read position values, which do not exist there."""
    if kernels.backend != "torch":
        pytest.skip("only the torch backend runs on meta tensors")
    kernel = kernels.factory("rope_tl")(64, torch.float16)
    device = "meta"
    query = torch.empty(3, 128, dtype=torch.float16, device=device)
    key = torch.empty(3, 64, dtype=torch.float16, device=device)
    out = kernel(torch.empty(3, dtype=torch.int64, device=device), query, key, torch.empty(8, 64, device=device))
    assert out[0] is query and out[1] is key


def test_positions_outside_the_cache_leave_their_tokens_alone_on_a_gpu(kernels):
    """On a GPU the kernels do not range-check positions (that would synchronise every call); a token whose
    position is outside the cache is left unrotated, and the others are rotated as the reference says."""
    if kernels.device == "cpu":
        pytest.skip("on the host positions are checked and refused (the test above)")
    from lazyops.specs.rope import rope_reference
    from lazyops.testing import check_close

    kernel = kernels.factory("rope_tl")(128, torch.bfloat16)
    device = kernels.device
    cache = torch.randn(16, 128, dtype=torch.float32, device=device)
    positions = torch.tensor([3, 16, -1, 5], device=device)
    query = torch.randn(4, 256, dtype=torch.bfloat16, device=device)
    key = torch.randn(4, 128, dtype=torch.bfloat16, device=device)
    before_query, before_key = query.clone(), key.clone()
    kernel(positions, query, key, cache)
    assert torch.equal(query[1:3], before_query[1:3]) and torch.equal(key[1:3], before_key[1:3]), "rotated anyway"
    inside = [0, 3]
    expected = rope_reference(positions[inside], before_query[inside].double(), cache.double(), 128, True)
    check_close(query[inside], expected, torch.bfloat16, what="the tokens inside the cache")


@pytest.mark.parametrize("is_neox", [True, False])
def test_the_cpu_rotates_in_blocks_of_tokens_as_in_one(monkeypatch, is_neox):
    """Large CPU calls rotate a block of tokens at a time (``CPU_BLOCK_ELEMENTS``); blocks, a partial last one
    included, must give what one pass gives, for packed views too."""
    from lazyops._backends.torch import rope as torch_rope
    from lazyops.specs.rope import rope_reference

    kernel = torch_rope.rope_tl(32, torch.bfloat16, is_neox)
    tokens, query_heads, key_heads = 11, 3, 1
    qkv = torch.randn(tokens, (query_heads + 2 * key_heads) * 32 + 8, dtype=torch.bfloat16)
    query, key = qkv[:, : query_heads * 32], qkv[:, query_heads * 32 : (query_heads + key_heads) * 32]
    positions = torch.randint(0, 64, (tokens,))
    cache = torch.randn(64, 16, dtype=torch.float32)
    expected = [rope_reference(positions, x.double(), cache.double(), 32, is_neox) for x in (query, key)]
    untouched = qkv[:, (query_heads + key_heads) * 32 :].clone()
    monkeypatch.setattr(torch_rope, "CPU_BLOCK_ELEMENTS", 4 * query_heads * 16)  # 4 tokens a block: 4 + 4 + 3
    kernel(positions, query, key, cache)
    for got, want in zip((query, key), expected, strict=True):
        assert torch.allclose(got.double(), want, rtol=8e-3, atol=8e-3)
    assert torch.equal(qkv[:, (query_heads + key_heads) * 32 :], untouched)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_neox", [True, False])
def test_the_torch_backends_complex_rotation_is_the_float32_rotation(dtype, is_neox):
    """The GPU's rotation (pairs as complex64, one multiplication) computes what the CPU's float32 rotation
    computes, to float32 rounding: checked here on the host, where both functions run as they do on a GPU. A
    token outside the cache (``cos + i sin = 1``) keeps its features exactly."""
    from lazyops._backends.torch.rope import rotate_all, turn_all
    from lazyops.testing._compare import check_each

    generator = torch.Generator().manual_seed(7)
    heads = torch.randn(6, 4, 128, generator=generator).to(dtype)[..., :96]  # a partial rotary: 96 of 128
    shape = (2, 48) if is_neox else (48, 2)
    pair_dim = -2 if is_neox else -1
    angle = torch.rand(6, 1, 48, generator=generator) * 6.3
    cos, sin = angle.cos(), angle.sin()
    cos[0], sin[0] = 1.0, 0.0  # the first token: outside the cache
    expected, got = heads.clone().unflatten(-1, shape), heads.clone().unflatten(-1, shape)
    rotate_all((expected,), cos.unsqueeze(pair_dim), sin, pair_dim)
    turn_all((got,), torch.complex(cos, sin), pair_dim)
    check_each(got, expected.double(), dtype, "complex rotation")
    assert torch.equal(got[0], heads[0].unflatten(-1, shape)), "a token outside the cache changed"
