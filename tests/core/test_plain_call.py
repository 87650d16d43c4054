"""The plain-call fast path (``_engine.plain_layout``, ``_engine.plain_call``): a kernel recognises the call
engines make on every step in a few reads and skips the full checks. The predicate must never accept what the
full checks refuse, nor a call the launch cannot take as it is; and it must accept the engine call, or the fast
path is dead code. Drawn calls, with one defect at a time, go through both."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lazyops._errors import KernelInputError  # noqa: E402
from lazyops.specs import _checks as checks  # noqa: E402
from lazyops.specs import _engine as engine  # noqa: E402
from lazyops.specs import kernel_names  # noqa: E402
from lazyops.specs import spec as kernel_spec  # noqa: E402
from lazyops.specs._checks import overlap  # noqa: E402
from lazyops.specs._engine import kernel_of  # noqa: E402
from lazyops.testing._compare import Inputs  # noqa: E402
from lazyops.testing.cases import examples  # noqa: E402

#: the factory arguments of a small configuration, where the first positional one is not the width
SMALL = {
    "matmul_tl": (8, 16),
    "matmul_fp8_tl": (8, 16),
    "kv_cache_write_tl": (2, 8),
    "paged_attention_tl": (4, 2, 8),
    "fused_moe_tl": (16, 8, 4, 2),
    "moe_route_tl": (8, 2),
    "moe_align_tl": (8, 2, 4),
}
#: kernels whose factory takes no dtype (the MoE alignment: int32 ids in and out)
NO_DTYPE = {"moe_align_tl"}
#: the keyword arguments a small configuration needs (the paged cache's block size)
SMALL_OPTIONS = {"kv_cache_write_tl": {"block_size": 4}, "paged_attention_tl": {"block_size": 4}}


def small_config(spec: Any, dtype: Any) -> Any:
    """The spec's configuration at a small width (the defects do not depend on the size)."""
    if spec.name in NO_DTYPE:
        return spec.bind(*SMALL[spec.name])
    return spec.bind(*SMALL.get(spec.name, (16,)), dtype, **SMALL_OPTIONS.get(spec.name, {}))


def predicate(spec: Any, config: Any) -> Any:
    """The spec's fast-path predicate for a launch that takes dense rows only (the strictest)."""
    return engine.plain_predicate(spec, config, strided_rows=False, device_type=None)


#: every spec with a fast path: all the built-in ones
PLAIN = {
    name: spec
    for name in kernel_names()
    if predicate(spec := kernel_spec(name), small_config(spec, torch.float32)) is not None
}

DEFECTS = (
    None,
    "dtype",
    "width",
    "leading dimension",
    "transposed",
    "strided rows",
    "no tokens",
    "tokens differ",
    "meta device",
    "not a tensor",
    "one argument short",
    "one argument more",
    "written shares another input",
    "written overlaps another input",
    "requires grad",
)


#: the geometry of a small rope call: a cache in the rows' dtype, so the written rows' overlap with it is checked
GEOMETRY = {
    "rope_tl": {
        "rotary_dim": 8,
        "query_heads": 2,
        "key_heads": 1,
        "cache_rows": 32,
        "cache_dtype": "dtype",
        "positions_dtype": torch.int64,
    }
}


def engine_call(spec: Any, config: Any, tokens: int, seed: int) -> list[Any]:
    return list(examples(spec).example_inputs(config, tokens, Inputs(seed, "cpu"), GEOMETRY.get(spec.name, {})))


def partner(spec: Any, args: list[Any]) -> int | None:
    """The token-indexed input, other than the first written one, that has its dtype (add_rmsnorm's x, rope's key);
    None where there is none (a float16 router writes float32 weights and int32 ids)."""
    written = spec.inputs.index(spec.mutates[0])
    return next(
        (
            spec.inputs.index(name)
            for name in spec.row_inputs
            if spec.inputs.index(name) != written and args[spec.inputs.index(name)].dtype is args[written].dtype
        ),
        None,
    )


def with_defect(spec: Any, config: Any, args: list[Any], defect: str | None, index: int) -> list[Any]:
    """``args`` with ``defect`` applied to input ``index`` (or where the defect applies)."""
    rows = [spec.inputs.index(name) for name in spec.row_inputs]
    written = [spec.inputs.index(name) for name in spec.mutates]
    arg = args[index]
    if defect == "dtype":
        args[index] = arg.to(torch.float64 if arg.dtype is not torch.float64 else torch.float32)
    elif defect == "width":
        args[index] = torch.zeros(*arg.shape[:-1], arg.shape[-1] + 1, dtype=arg.dtype)
    elif defect == "leading dimension":
        args[index] = arg.unsqueeze(0)
    elif defect == "transposed" and arg.dim() == 2:
        args[index] = torch.zeros(arg.shape[1], arg.shape[0], dtype=arg.dtype).t()
    elif defect == "strided rows" and arg.dim() == 2:
        args[index] = torch.zeros(arg.shape[0], arg.shape[1] + 3, dtype=arg.dtype)[:, : arg.shape[1]]
    elif defect == "no tokens":
        args = [a[:0] if position in rows else a for position, a in enumerate(args)]
    elif defect == "tokens differ" and len(rows) > 1:
        last = args[rows[-1]]
        args[rows[-1]] = torch.zeros(last.shape[0] + 1, last.shape[1], dtype=last.dtype)
    elif defect == "meta device":
        args[index] = arg.to("meta")
    elif defect == "not a tensor":
        args[index] = arg.tolist() if arg.numel() < 64 else 1.0
    elif defect == "one argument short":
        args = args[:-1]
    elif defect == "one argument more":
        args = [*args, args[-1]]
    elif defect == "requires grad" and arg.is_floating_point():
        args[index] = arg.detach().clone().requires_grad_(True)
    elif defect == "written shares another input" and written and (other := partner(spec, args)) is not None:
        args[written[0]] = args[other]
    elif defect == "written overlaps another input" and written and (other := partner(spec, args)) is not None:
        buffer = torch.zeros(args[other].shape[0] + 1, *args[other].shape[1:], dtype=args[other].dtype)
        args[other], args[written[0]] = buffer[:-1], buffer[1:]
    return args


def is_plain(spec: Any, args: list[Any]) -> bool:
    """What the fast path's launch assumes: every token-indexed input of the rank the launch takes (2-D: rows; rope's
    positions 1-D), dense, with tokens; no written input sharing an element with another input."""
    for position, rank in engine.flat_ranks(spec):
        arg = args[position]
        if arg.dim() != rank or not arg.is_contiguous() or arg.shape[0] == 0:
            return False
    for name in spec.mutates:
        written = args[spec.inputs.index(name)]
        if any(other is not written and overlap(written, other) for other in args):
            return False
        if sum(other is written for other in args) > 1:
            return False
    return True


@pytest.mark.parametrize("name", sorted(PLAIN))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_engine_call_is_plain(name: str, dtype: Any) -> None:
    spec = PLAIN[name]
    config = small_config(spec, dtype)
    accepts = predicate(spec, config)
    for tokens in (1, 5):
        assert accepts(tuple(engine_call(spec, config, tokens, seed=tokens)))


@pytest.mark.parametrize("name", sorted(PLAIN))
@pytest.mark.parametrize("writes_out", [False, True])
def test_a_plain_call_skips_the_full_checks(name: str, writes_out: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarded kernel launches a plain call without running ``check_call`` (a launch that writes ``out`` gets a
    dense one of the spec's shape and dtype; an in-place kernel returns its written inputs); any other call runs
    it."""
    spec = PLAIN[name]
    returns_out = spec.returns == "out"
    config = small_config(spec, torch.float32)
    checked: list[int] = []
    monkeypatch.setattr(checks, "check_call", lambda spec, config, *args: checked.append(len(args)))
    launched: list[int] = []

    def launch(*args: Any) -> Any:
        launched.append(len(args))
        if not returns_out:
            return None
        if writes_out:
            *inputs, out = args
            assert tuple(out.shape) == spec.out_shape(config, *inputs)
            assert out.dtype == spec.out_dtype(config) and out.is_contiguous()
            return None
        return checks.empty_output(spec, config, *args)

    kernel = kernel_of(spec, config, launch, "test", None, strided_rows=False, writes_out=writes_out)
    args = engine_call(spec, config, 3, seed=0)
    returned = kernel(*args)
    assert (checked, launched) == ([], [len(args) + (writes_out and returns_out)])
    if not returns_out:
        assert all(got is args[spec.inputs.index(name)] for got, name in zip(returned, spec.returns, strict=True))
    # the same call with one more leading (token) dimension on every token-indexed input: valid, not plain
    rows = {spec.inputs.index(name) for name in spec.row_inputs}
    kernel(*[arg.unsqueeze(0) if position in rows else arg for position, arg in enumerate(args)])
    assert checked == [len(args)]


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(sorted(PLAIN)),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    tokens=st.integers(1, 4),
    defect=st.sampled_from(DEFECTS),
    index=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_the_predicate_never_accepts_what_the_checks_refuse(
    name: str, dtype: Any, tokens: int, defect: str | None, index: int, seed: int
) -> None:
    spec = PLAIN[name]
    config = small_config(spec, dtype)
    accepts = predicate(spec, config)
    args = engine_call(spec, config, tokens, seed)
    args = with_defect(spec, config, args, defect, index % len(args))
    try:
        accepted = accepts(tuple(args))
    except (AttributeError, TypeError):  # what the kernel catches: a non-tensor, a wrong count
        accepted = False
    if defect is None:
        assert accepted, "the engine call must take the fast path"
    if not accepted:
        return
    assert len(args) == len(spec.inputs)
    try:
        checks.check_call(spec, config, *args)
        if spec.mutates:
            checks.check_aliasing(spec, config, *args)
    except KernelInputError as error:
        pytest.fail(f"the predicate accepted a call the checks refuse ({defect} at {index}): {error}")
    assert not any(arg.requires_grad for arg in args), "the kernel refuses inputs that require grad in grad mode"
    assert is_plain(spec, args), f"the predicate accepted a call the launch cannot take as it is ({defect})"


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_parameters_that_require_grad_are_plain_without_grad_mode(name: str) -> None:
    """Engines keep weights as parameters (``requires_grad=True``) and run under ``inference_mode`` or
    ``no_grad``: that call is plain (every floating input requires grad here); in grad mode the same call takes the checks, which refuse it."""
    spec = PLAIN[name]
    config = small_config(spec, torch.float32)
    accepts = predicate(spec, config)
    args = tuple(
        arg.requires_grad_(True) if arg.is_floating_point() else arg for arg in engine_call(spec, config, 2, seed=1)
    )
    if not any(arg.requires_grad for arg in args):
        pytest.skip(f"{name} takes no floating input: none can require grad")
    assert not accepts(args)
    with torch.no_grad():
        assert accepts(args)
    with torch.inference_mode():
        assert accepts(args)


@pytest.mark.parametrize("strided_rows", [False, True])
def test_rope_takes_a_packed_qkv_on_the_fast_path_only_where_the_launch_takes_strided_rows(strided_rows: bool) -> None:
    """Engines rotate the query and key slices of one packed ``qkv[M, (Hq + 2 Hk) * head_dim]`` buffer: row-strided
    views that share no element. A launch that indexes rows by stride takes them as they are; for one that does
    not, the predicate refuses them and the full path copies."""
    spec = kernel_spec("rope_tl")
    config = small_config(spec, torch.bfloat16)
    positions, query, key, cache = engine_call(spec, config, 3, seed=2)
    packed = torch.zeros(3, query.shape[1] + 2 * key.shape[1], dtype=query.dtype)
    q, k = packed[:, : query.shape[1]], packed[:, query.shape[1] : query.shape[1] + key.shape[1]]
    assert not q.is_contiguous() and not k.is_contiguous()
    accepts = engine.plain_predicate(spec, config, strided_rows=strided_rows, device_type=None)
    assert accepts((positions, q, k, cache)) is strided_rows
    assert accepts((positions, query, key, cache))
    assert not accepts((positions, q, q, cache)), "query and key the same elements"


def test_a_layout_without_token_indexed_inputs_is_refused_with_the_way_out() -> None:
    from lazyops.specs._engine import fixed_input, plain_call

    with pytest.raises(ValueError, match=r"no token-indexed input.*Rows.*return None"):
        plain_call((fixed_input((4,), torch.float32),))


# -- declared tensors (``Tensor``): caches, index tensors, keyword scales, token-indexed positions ----------------
#: the kernels whose parameters are declared tensors besides rows, and the factory options drawn for each (an fp8
#: cache, whose scales are required keyword tensors; without it they must be left out)
DECLARED = {
    "paged_attention_tl": ({}, {"cache_dtype": torch.float8_e4m3fn}),
    "kv_cache_write_tl": ({}, {"cache_dtype": torch.float8_e4m3fn}),
    "rope_tl": ({},),
}

TENSOR_DEFECTS = (
    None,
    "first size grown",
    "last size grown",
    "index value large",
    "index value negative",
    "keyword flipped",
    "dtype",
    "last dimension strided",
    "rows strided",
    "meta device",
    "requires grad",
    "written is another input",
    "not a tensor",
)


def with_tensor_defect(spec: Any, args: list[Any], defect: str | None, index: int) -> list[Any]:
    """``args`` with ``defect`` applied to declared input ``index`` (or where the defect applies)."""
    from lazyops.specs import Tensor

    args = list(args)
    arg = args[index]
    declared = spec.params[index]
    if defect == "keyword flipped" and getattr(declared, "keyword", False):
        args[index] = torch.ones(1) if arg is None or not arg.numel() else None
        return args
    if arg is None:
        return args
    if defect == "first size grown" and arg.dim():
        args[index] = torch.zeros(arg.shape[0] + 1, *arg.shape[1:], dtype=arg.dtype)
    elif defect == "last size grown" and arg.dim():
        args[index] = torch.zeros(*arg.shape[:-1], arg.shape[-1] + 1, dtype=arg.dtype)
    elif defect in ("index value large", "index value negative") and not arg.is_floating_point() and arg.numel():
        args[index] = arg.clone()
        args[index].view(-1)[0 if defect.endswith("large") else -1] = 1 << 20 if defect.endswith("large") else -1
    elif defect == "dtype":
        args[index] = arg.to(torch.float16 if arg.dtype is not torch.float16 else torch.float32)
    elif defect == "last dimension strided" and arg.dim() and arg.shape[-1] > 1:
        holder = torch.zeros(*arg.shape[:-1], 2 * arg.shape[-1], dtype=arg.dtype)
        holder[..., ::2] = arg
        args[index] = holder[..., ::2]
    elif defect == "rows strided" and arg.dim() >= 2:
        holder = torch.zeros(*arg.shape[:-1], arg.shape[-1] + 3, dtype=arg.dtype)
        holder[..., : arg.shape[-1]] = arg
        args[index] = holder[..., : arg.shape[-1]]
    elif defect == "meta device":
        args[index] = arg.to("meta")
    elif defect == "requires grad" and arg.is_floating_point():
        args[index] = arg.detach().clone().requires_grad_(True)
    elif defect == "written is another input" and spec.mutates:
        written = spec.inputs.index(spec.mutates[0])
        same = [
            i
            for i, other in enumerate(args)
            if i != written and other is not None and other.dtype is args[written].dtype
        ]
        if same and isinstance(spec.params[written], Tensor):
            args[same[0]] = args[written]
    elif defect == "not a tensor":
        args[index] = arg.tolist() if arg.numel() < 64 else 1.0
    return args


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(sorted(DECLARED)),
    variant=st.integers(0, 1),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    tokens=st.integers(1, 4),
    defect=st.sampled_from(TENSOR_DEFECTS),
    index=st.integers(0, 7),
    strided_rows=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_predicate_never_accepts_what_the_checks_refuse_of_declared_tensors(
    name: str, variant: int, dtype: Any, tokens: int, defect: str | None, index: int, strided_rows: bool, seed: int
) -> None:
    """One defect at a time on a declared tensor (a size a symbol binds, an index value, a keyword scale given where
    it must be left out or left out where it is needed, a layout), drawn against the full checks: the fast path may
    refuse what they accept, never accept what they refuse."""
    spec = kernel_spec(name)
    options = DECLARED[name][variant % len(DECLARED[name])]
    config = spec.bind(*SMALL.get(name, (16,)), dtype, **SMALL_OPTIONS.get(name, {}), **options)
    args = list(examples(spec).example_inputs(config, tokens, Inputs(seed, "cpu"), GEOMETRY.get(name, {})))
    args = with_tensor_defect(spec, args, defect, index % len(args))
    accepted = engine.plain_predicate(spec, config, strided_rows=strided_rows, device_type=None)(tuple(args))
    if defect is None:
        assert accepted, "the engine call must take the fast path"
    if not accepted:
        return
    try:
        checks.check_call(spec, config, *args)
        checks.check_aliasing(spec, config, *args)
    except KernelInputError as error:
        pytest.fail(f"the predicate accepted a call the checks refuse ({defect} at {index}): {error}")
    assert not any(arg is not None and arg.requires_grad for arg in args)


@pytest.mark.parametrize("name", ["paged_attention_tl", "kv_cache_write_tl"])
@pytest.mark.parametrize("strided_rows", [False, True])
def test_the_paged_kernels_take_a_packed_qkv_on_the_fast_path_only_where_the_launch_takes_strided_rows(
    name: str, strided_rows: bool
) -> None:
    """An engine's query, key and value are row-strided slices of one packed ``qkv``: a launch that indexes rows by
    stride takes them as they are; for one that does not, the predicate refuses them and the full path copies."""
    spec = kernel_spec(name)
    config = small_config(spec, torch.bfloat16)
    args = engine_call(spec, config, 3, seed=2)
    rows = [spec.inputs.index(each) for each in spec.row_inputs]
    packed = torch.zeros(3, sum(args[i].shape[1] for i in rows) + 8, dtype=torch.bfloat16)
    start = 0
    for i in rows:
        width = args[i].shape[1]
        args[i] = packed[:, start : start + width]
        start += width
    assert not any(args[i].is_contiguous() for i in rows)
    assert (
        engine.plain_predicate(spec, config, strided_rows=strided_rows, device_type=None)(tuple(args)) is strided_rows
    )
    checks.check_call(spec, config, *args)
