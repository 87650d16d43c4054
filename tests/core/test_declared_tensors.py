"""What ``Tensor`` declares beyond fixed shapes (``lazyops.specs._params``): a shape, layout and write that a factory
argument decides, optional keyword tensors and pairs of them, token-indexed keyword buffers and sizes the token
count gives. Each is held on the full checks (what they refuse, and how they say it) and on the derived fast path
(which must accept the engine call and refuse what the checks refuse)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from lazyops._errors import KernelInputError  # noqa: E402
from lazyops.specs import _checks as checks  # noqa: E402
from lazyops.specs import _engine as engine  # noqa: E402
from lazyops.specs import spec as kernel_spec  # noqa: E402
from lazyops.specs._params import Tensor  # noqa: E402


def both(name: str, config: Any, *args: Any) -> tuple[bool, str | None]:
    """``(the fast path accepts, the full checks' refusal or None)``."""
    spec = kernel_spec(name)
    accepted = engine.plain_predicate(spec, config, strided_rows=False, device_type=None)(args)
    try:
        checks.check_call(spec, config, *args)
        checks.check_aliasing(spec, config, *args)
    except KernelInputError as error:
        assert not accepted, f"the fast path accepted what the checks refuse: {error}"
        return accepted, str(error)
    return accepted, None


def test_a_shape_and_layout_a_factory_argument_decides() -> None:
    spec = kernel_spec("quant_fp8_tl")
    x = torch.randn(3, 16)
    column_major = spec.bind(16, torch.float32, "group", group_size=8, column_major=True)
    good = torch.empty(2, 3).t()  # the transpose of a dense [G, M]
    assert both("quant_fp8_tl", column_major, x, good, None) == (True, None)
    _, error = both("quant_fp8_tl", column_major, x, torch.empty(3, 2), None)
    assert error is not None and "scale must be column-major" in error and ".t().contiguous().t()" in error
    row_major = spec.bind(16, torch.float32, "group", group_size=8)
    assert both("quant_fp8_tl", row_major, x, torch.empty(3, 2), None) == (True, None)
    _, error = both("quant_fp8_tl", row_major, x, torch.empty(3, 1), None)
    assert error is not None and "scale must be a float32 tensor of shape (3, 2)" in error
    per_tensor = spec.bind(16, torch.float32, "tensor")
    assert both("quant_fp8_tl", per_tensor, x, torch.empty(1), None) == (True, None)


def test_a_tensor_read_under_one_configuration_and_written_under_another() -> None:
    """``mutated`` as a function: a static scale is only read, so it may share memory with what else is read; a
    dynamic one is written, so it may not."""
    spec = kernel_spec("quant_fp8_tl")
    static, dynamic = spec.bind(4, torch.float32, "static"), spec.bind(4, torch.float32, "tensor")
    assert "scale" in spec.mutates  # the operator's schema: the kernel may write it
    assert spec.written(static) == () and spec.written(dynamic) == ("scale",)
    x = torch.randn(2, 4)
    assert both("quant_fp8_tl", static, x, x.view(-1)[:1], None)[1] is None
    _, error = both("quant_fp8_tl", dynamic, x, x.view(-1)[:1], None)
    assert error is not None and "scale overlaps x" in error


def test_a_scale_that_may_be_either_layout() -> None:
    spec = kernel_spec("matmul_fp8_tl")
    config = spec.bind(16, 256, torch.bfloat16, "block")
    a, b = torch.zeros(4, 256).to(torch.float8_e4m3fn), torch.zeros(16, 256).to(torch.float8_e4m3fn)
    scale_b = torch.ones(1, 2)
    for scale_a in (torch.ones(4, 2), torch.ones(2, 4).t()):
        assert both("matmul_fp8_tl", config, a, b, scale_a, scale_b, None) == (True, None)
    _, error = both("matmul_fp8_tl", config, a, b, torch.ones(4, 4)[:, ::2], scale_b, None)
    assert error is not None and "row-major or column-major" in error


def test_optional_keyword_tensors_and_pairs() -> None:
    spec = kernel_spec("sample_tl")
    config = spec.bind(8, torch.float32, logprobs=True, top_n=2)
    logits = torch.randn(3, 8)
    params = (
        torch.ones(3),
        torch.zeros(3, dtype=torch.int64),
        torch.ones(3),
        torch.zeros(3),
        torch.zeros(3, dtype=torch.int64),
        torch.zeros(3, dtype=torch.int64),
    )
    assert both("sample_tl", config, logits, *params, None, None, None) == (True, None)
    assert both("sample_tl", config, logits, *params, torch.empty(3), None, None) == (True, None)
    top, ids = torch.empty(3, 2), torch.empty(3, 2, dtype=torch.int64)
    assert both("sample_tl", config, logits, *params, None, top, ids)[1] is None  # a pair: checked, accepted
    _, error = both("sample_tl", config, logits, *params, None, top, None)
    assert error is not None and "top_logprobs and top_ids go together" in error and "pass both or neither" in error
    plain = spec.bind(8, torch.float32)
    _, error = both("sample_tl", plain, logits, *params, torch.empty(3), None, None)
    assert error is not None and "logprobs=True" in error and "pass logprob=None" in error


def test_a_required_keyword_tensor_names_the_factory_argument() -> None:
    spec = kernel_spec("fused_moe_tl")
    config = spec.bind(16, 8, 4, 2, torch.float32, global_experts=8)
    x, w13, w2 = torch.randn(3, 16), torch.randn(4, 16, 16), torch.randn(4, 16, 8)
    weights, ids = torch.rand(3, 2), torch.zeros(3, 2, dtype=torch.int32)
    _, error = both("fused_moe_tl", config, x, w13, w2, weights, ids, None)
    assert error is not None and "expert_map is None" in error and "global_experts=G" in error
    assert both("fused_moe_tl", config, x, w13, w2, weights, ids, torch.zeros(8, dtype=torch.int32)) == (True, None)


def test_sizes_the_token_count_gives() -> None:
    spec = kernel_spec("moe_align_tl")
    config = spec.bind(8, 2, 4)
    ids = torch.zeros(3, 2, dtype=torch.int32)
    padded, blocks = config.sizes(3)
    buffers = (torch.empty(padded, dtype=torch.int32), torch.empty(blocks, dtype=torch.int32))
    counted = torch.empty(1, dtype=torch.int32)
    assert both("moe_align_tl", config, ids, *buffers, counted) == (True, None)
    _, error = both("moe_align_tl", config, ids, buffers[0][:-1], buffers[1], counted)
    assert error is not None and f"sorted_token_ids must be a int32 tensor of shape ({padded},)" in error


def test_a_shape_function_is_no_token_dimension_and_declares_nothing_before_the_rows() -> None:
    from lazyops.specs import KernelSpec, Rows

    class Late(KernelSpec):
        name = "late_tl"
        params = (Rows("x"), Tensor("scale", lambda config: ("T", 1), torch.float32))

    assert Late.row_inputs == ("x",) and Late.free_widths == ()
