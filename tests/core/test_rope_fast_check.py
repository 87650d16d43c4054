"""Rope's fast path, derived from its declarations (a ``"*T"`` tensor, rows of any number of heads, a cache whose
rotary dimension is a range), accepts the engine call on a few reads; it must never accept what the full checks
refuse. Drawn calls, valid and not, go through both."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lazyops._errors import KernelInputError  # noqa: E402
from lazyops.specs import _checks as checks  # noqa: E402
from lazyops.specs import _engine as engine  # noqa: E402
from lazyops.specs import rope  # noqa: E402

HEAD_DIM = 8


DEFECTS = (
    None,
    "positions float",
    "positions 2-D",
    "positions strided",
    "position past the cache",
    "position negative",
    "no tokens",
    "rows differ",
    "width not heads",
    "rows overlap",
    "features strided",
    "query dtype",
    "key dtype",
    "cache dtype",
    "cache odd",
    "cache wider than a head",
    "cache 1-D",
    "cache transposed",
)


@st.composite
def calls(draw: st.DrawFn) -> tuple:
    """A valid engine call (packed or separate query and key) with at most one defect, drawn from ``DEFECTS``."""
    defect = draw(st.sampled_from(DEFECTS))
    tokens = 0 if defect == "no tokens" else draw(st.integers(2, 4))
    dtype = torch.float32
    positions = (
        torch.zeros(2 * tokens, dtype=torch.int64)[::2] if defect == "positions strided" else torch.zeros(tokens)
    )
    positions = positions.to(
        torch.float32 if defect == "positions float" else draw(st.sampled_from([torch.int32, torch.int64]))
    )
    if defect == "positions 2-D":
        positions = positions.reshape(1, tokens)
    if defect in ("position past the cache", "position negative") and tokens:
        positions = positions.clone()
        positions[-1] = 16 if defect == "position past the cache" else -1  # the cache below has 16 rows
    heads_q, heads_k = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    width_q = heads_q * HEAD_DIM + (3 if defect == "width not heads" else 0)
    width_k = heads_k * HEAD_DIM
    pad = draw(st.integers(0, 5))
    qkv = torch.zeros(tokens + (1 if defect == "rows differ" else 0), width_q + 2 * width_k + pad, dtype=dtype)
    query, key = qkv[:, :width_q], qkv[:, width_q : width_q + width_k]
    if draw(st.booleans()):
        query, key = query.contiguous(), key.contiguous()
    if defect == "rows overlap":
        query = qkv.as_strided((tokens, width_q), (1, 1)) if tokens else query
    if defect == "features strided":
        query = query.t().contiguous().t()
    if defect == "query dtype":
        query = query.half()
    if defect == "key dtype":
        key = key.half()
    rotary = {"cache odd": HEAD_DIM - 1, "cache wider than a head": 2 * HEAD_DIM}.get(
        defect, draw(st.sampled_from([HEAD_DIM, HEAD_DIM // 2]))
    )
    cache = torch.zeros(16, rotary, dtype=torch.float16 if defect == "cache dtype" else dtype)
    if defect == "cache 1-D":
        cache = cache.reshape(-1)
    if defect == "cache transposed":
        cache = cache.t().contiguous().t()
    return defect, (positions, query, key, cache)


@settings(max_examples=500, deadline=None)
@given(calls())
def test_the_fast_accept_never_accepts_a_refused_call(drawn: tuple) -> None:
    defect, call = drawn
    config = rope.spec.bind(HEAD_DIM, torch.float32)
    fast = engine.plain_predicate(rope.spec, config, strided_rows=True, device_type=None)(call)
    try:
        checks.check_call(rope.spec, config, *call)
        checks.check_aliasing(rope.spec, config, *call)
        refused = False
    except KernelInputError:
        refused = True
    assert not (fast and refused), (defect, [(tuple(t.shape), t.stride(), t.dtype) for t in call])
    if defect is None:
        assert fast and not refused  # the drawn engine call itself takes the fast path


def test_the_engine_call_takes_the_fast_accept() -> None:
    config = rope.spec.bind(128, torch.bfloat16)
    qkv = torch.zeros(4, 48 * 128, dtype=torch.bfloat16)
    call = (torch.arange(4), qkv[:, : 32 * 128], qkv[:, 32 * 128 : 40 * 128], torch.zeros(64, 128))
    assert engine.plain_predicate(rope.spec, config, strided_rows=True, device_type=None)(call)
    checks.check_call(rope.spec, config, *call)
