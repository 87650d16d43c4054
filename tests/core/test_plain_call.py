"""The plain-call fast path (``KernelSpec.plain_layout``, ``_checks.plain_call``): a kernel recognises the call
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
from lazyops.specs import kernel_names  # noqa: E402
from lazyops.specs import spec as kernel_spec  # noqa: E402
from lazyops.specs._checks import overlap, plain_call  # noqa: E402
from lazyops.testing._compare import Inputs  # noqa: E402

#: every spec that declares a plain call; rope (whose check has its own fast accept) declares none
SMALL = {"matmul_tl": (8, 16)}


def small_config(spec: Any, dtype: Any) -> Any:
    """The spec's configuration at a small width (the defects do not depend on the size)."""
    return spec.configure(*SMALL.get(spec.name, (16,)), dtype)


#: every spec that declares a plain call; rope (whose check has its own fast accept) declares none
PLAIN = {
    name: spec
    for name in kernel_names()
    if (spec := kernel_spec(name)).plain_layout(small_config(spec, torch.float32)) is not None
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
    "written shares the first input",
    "written overlaps the first input",
)


def engine_call(spec: Any, config: Any, tokens: int, seed: int) -> list[Any]:
    return list(spec.example_inputs(config, tokens, Inputs(seed, "cpu"), {}))


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
    elif defect == "written shares the first input" and written:
        args[written[0]] = args[rows[0]]
    elif defect == "written overlaps the first input" and written:
        first = args[rows[0]]
        buffer = torch.zeros(first.shape[0] + 1, first.shape[1], dtype=first.dtype)
        args[rows[0]], args[written[0]] = buffer[:-1], buffer[1:]
    return args


def is_plain(spec: Any, args: list[Any]) -> bool:
    """What the fast path's launch assumes: every token-indexed input 2-D, dense, with tokens; no written input
    sharing an element with another input."""
    for name in spec.row_inputs:
        arg = args[spec.inputs.index(name)]
        if arg.dim() != 2 or not arg.is_contiguous() or arg.shape[0] == 0:
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
    accepts = plain_call(spec.plain_layout(config), tuple(spec.inputs.index(n) for n in spec.mutates))
    for tokens in (1, 5):
        assert accepts(*engine_call(spec, config, tokens, seed=tokens))


@pytest.mark.parametrize("name", sorted(PLAIN))
@pytest.mark.parametrize("writes_out", [False, True])
def test_a_plain_call_skips_the_full_checks(name: str, writes_out: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarded kernel launches a plain call without running ``check`` (a launch that writes ``out`` gets a
    dense one of the spec's shape and dtype); any other call runs it."""
    spec = PLAIN[name]
    config = small_config(spec, torch.float32)
    checked: list[int] = []
    monkeypatch.setattr(type(spec), "check", lambda self, config, *args: checked.append(len(args)))
    launched: list[int] = []

    def launch(*args: Any) -> Any:
        launched.append(len(args))
        if writes_out:
            *inputs, out = args
            assert tuple(out.shape) == spec.out_shape(config, *inputs)
            assert out.dtype == spec.out_dtype(config) and out.is_contiguous()
            return None
        return spec.output(config, *args)

    kernel = spec.guarded(config, launch, None, writes_out=writes_out)
    args = engine_call(spec, config, 3, seed=0)
    kernel(*args)
    assert (checked, launched) == ([], [len(args) + writes_out])
    kernel(
        *[
            arg.unsqueeze(0) if position == spec.inputs.index(spec.row_inputs[0]) else arg
            for position, arg in enumerate(args)
        ]
    )
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
    accepts = plain_call(spec.plain_layout(config), tuple(spec.inputs.index(n) for n in spec.mutates))
    args = engine_call(spec, config, tokens, seed)
    args = with_defect(spec, config, args, defect, index % len(args))
    try:
        accepted = accepts(*args)
    except (AttributeError, TypeError):  # what the kernel catches: a non-tensor, a wrong count
        accepted = False
    if defect is None:
        assert accepted, "the engine call must take the fast path"
    if not accepted:
        return
    assert len(args) == len(spec.inputs)
    try:
        spec.check(config, *args)
        if spec.mutates:
            spec.check_aliasing(config, *args)
    except KernelInputError as error:
        pytest.fail(f"the predicate accepted a call the checks refuse ({defect} at {index}): {error}")
    assert is_plain(spec, args), f"the predicate accepted a call the launch cannot take as it is ({defect})"
