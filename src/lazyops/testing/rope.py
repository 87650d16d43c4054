"""``rope_tl`` against the float64 reference: cases, the reference, the comparison."""

from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from lazyops._backends.torch.rope import rope_reference
from lazyops._backends.torch.rope import rope_tl as reference_factory  # noqa: F401  (the signature to share)
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import Inputs, check_close, check_each, rows

KERNEL = "rope_tl"


def reference(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(query, key)`` rotated, in float64 (new tensors; the inputs are left alone)."""

    def rotated(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:  # nothing to rotate, and the reference cannot reshape an empty x
            return x.double()
        return rope_reference(positions, x.double(), cos_sin_cache.double(), head_dim, is_neox)

    return rotated(query), rotated(key)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    head_dim = draw(st.sampled_from([2, 6, 64, 80, 128, 256]) | st.integers(2, 160))
    # r even, from 2 up to the whole head: partial rotary (r < head_dim) is where a port forgets the tail.
    whole, quarter = head_dim - head_dim % 2, head_dim // 4 * 2 or 2
    rotary = draw(st.sampled_from([whole, quarter]) | st.integers(1, head_dim // 2).map(lambda h: 2 * h))
    query_heads = draw(st.integers(1, 32))
    geometry = {
        "rotary_dim": rotary,
        "query_heads": query_heads,
        "key_heads": draw(st.integers(1, query_heads)),
        "cache_rows": draw(st.integers(1, 4096)),
        "cache_dtype": draw(st.sampled_from(["float32", "dtype"])),
        "positions_dtype": draw(st.sampled_from([torch.int32, torch.int64])),
    }
    args = (head_dim, draw(strategies.dtypes()))
    kwargs = {"is_neox": draw(st.booleans())}
    return Case(KERNEL, args, kwargs, draw(strategies.token_sequences()), draw(strategies.seeds()), geometry)


def heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x.reshape(x.shape[0], x.shape[1] // head_dim, head_dim)


def check(factory: Callable[..., Any], case: Case, *, device: str, max_elements: int) -> float:
    head_dim, dtype = case.args
    is_neox = case.kwargs["is_neox"]
    g = case.geometry
    rotary = g["rotary_dim"]
    kernel = case.build(factory)
    inputs = Inputs(case.seed, device)
    cache_dtype = torch.float32 if g["cache_dtype"] == "float32" else dtype
    cache = inputs.randn(g["cache_rows"], rotary, dtype=cache_dtype)
    worst = 0.0
    for m in case.tokens:
        m = rows(m, (g["query_heads"] + g["key_heads"]) * head_dim, max_elements)
        positions = inputs.randint(g["cache_rows"], m, dtype=g["positions_dtype"])
        query = inputs.randn(m, g["query_heads"] * head_dim, dtype=dtype)
        key = inputs.randn(m, g["key_heads"] * head_dim, dtype=dtype)
        expected = reference(positions, query, key, cache, head_dim, is_neox)
        tails = [heads(t, head_dim)[..., rotary:].clone() for t in (query, key)]
        out = kernel(positions, query, key, cache)
        assert isinstance(out, tuple) and len(out) == 2 and out[0] is query and out[1] is key, (
            f"M={m}: rope must return its (query, key) arguments, rotated in place"
        )
        for name, tensor, ref, tail in zip(("query", "key"), (query, key), expected, tails):
            # Query and key are the caller's tensors, rotated in place: every element is checked, and the features
            # past the rotary dimension must be exactly as they were.
            worst = max(worst, check_close(tensor, ref, dtype, what=f"M={m}: {name}"))
            check_each(tensor, ref, dtype, what=f"M={m}: {name}")
            assert torch.equal(heads(tensor, head_dim)[..., rotary:], tail), (
                f"M={m}: {name} changed past the first {rotary} (rotary) features of a head"
            )
    return worst
