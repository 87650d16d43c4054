"""Kernels inside engines: every kernel is a custom operator that ``torch.compile(fullgraph=True)`` and
``torch.export`` keep in their graphs, with a fake implementation that agrees with the real one, while eager
calls never pay for the dispatcher.

On this CPU machine: the torch backend, and Triton in its interpreter (dynamo only sees the operator; its real
implementation runs the interpreted kernel), are compiled with inductor. TileLang needs a GPU: this file under
``pytest -m gpu``, and its record (``make gpu-check``'s ``gpu-check.md``), cover it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lazyops import testing
from lazyops.testing import Case
from lazyops.testing.block import decoder_block


def test_the_operator_passes_torch_library_opcheck(kernels, kernel):
    """Schema (mutated arguments declared), fake implementation against the real one, dispatch registrations:
    what ``torch.library.opcheck`` verifies of a custom operator."""

    @kernels.drawn_calls(kernel, tokens=5, host_examples=2, examples=4)
    def check(call: Any, args: tuple[Any, ...], case: Case) -> None:
        from lazyops.specs._engine import config_values

        operator = call.lazyops_operators()[0]
        assert operator.name().startswith(f"lazyops_{kernels.backend}::"), operator.name()
        values = config_values(call.lazyops_config)
        utilities: tuple[str, ...] = ("test_schema", "test_faketensor")
        if any(is_float8(arg) for arg in args):
            # torch's schema check compares each argument with allclose, which has no float8 kernel (an fp8 KV
            # cache): what it would verify is checked here from the schema, as for the fp8 norms' out below.
            utilities = ("test_faketensor",)
            from lazyops.specs import spec

            written = {arg.name for arg in operator._schema.arguments if arg.alias_info and arg.alias_info.is_write}
            assert written == set(spec(kernel).mutates), operator._schema
        with torch.inference_mode(False), torch.no_grad():
            torch.library.opcheck(operator, (*args, *values), test_utils=utilities)

    check()


def is_float8(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.element_size() == 1


class RecordOperators(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        self.names.append(func.name())
        return func(*args, **(kwargs or {}))


def test_eager_calls_never_go_through_the_dispatcher(kernels, kernel):
    """The dispatcher costs more than a launch should (16 to 42 µs a call on a 2-core CPU, docs/decisions/003): eager calls run the
    backend's kernel directly, and the operator is for tracing only."""

    @kernels.drawn_calls(kernel, tokens=5, host_examples=2, examples=4)
    def check(call: Any, args: tuple[Any, ...], case: Case) -> None:
        with RecordOperators() as recorded:
            call(*args)
        assert not [name for name in recorded.names if name.startswith("lazyops_")], recorded.names

    check()


def assert_same(got: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
    for g, e in zip(got, expected, strict=True):
        testing.check_close(g, e.double(), dtype, tolerance=4 * testing.TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_decoder_block_compiles_fullgraph_and_matches_eager(kernels, dtype):
    block, inputs = decoder_block(64, dtype)
    args = inputs(6, kernels.device)
    eager_args = copy.deepcopy(args)
    with torch.inference_mode():
        expected = block(*eager_args)
        # dynamic=None, as engines compile: the second token count below recompiles with a symbolic M, which the
        # operators' fake implementations (the spec's checks on symbolic sizes) must take.
        compiled = torch.compile(block, fullgraph=True)
        got = compiled(*args)
        assert_same(got, expected, dtype)
        # the residual was updated in place by the compiled graph, as by the eager call
        assert torch.equal(args[1], eager_args[1])
        # a second token count: the operators take any M
        more = inputs(3, kernels.device)
        assert_same(compiled(*copy.deepcopy(more)), block(*more), dtype)


def test_a_decoder_block_exports(kernels):
    dtype = torch.float32
    block, inputs = decoder_block(64, dtype)

    class Block(torch.nn.Module):
        def forward(self, *args):
            return block(*args)

    args = inputs(4, kernels.device)
    exported = torch.export.export(Block(), copy.deepcopy(args))
    names = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert any(name.startswith(f"lazyops_{kernels.backend}.") for name in names), names
    with torch.inference_mode():
        expected = block(*copy.deepcopy(args))
    assert_same(exported.module()(*copy.deepcopy(args)), expected, dtype)


def test_the_out_operator_passes_torch_library_opcheck(kernels, kernel):
    """``out=`` while compiling goes through ``<kernel>_out``, which declares ``out`` as written."""
    from lazyops.specs import spec

    if spec(kernel).returns != "out":
        pytest.skip(f"{kernel} updates its inputs in place and takes no out=")

    @kernels.drawn_calls(kernel, tokens=5, host_examples=2, examples=4)
    def check(call: Any, args: tuple[Any, ...], case: Case) -> None:
        from lazyops.specs import _engine
        from lazyops.specs._checks import empty_output

        config = call.lazyops_config
        kernel_spec = spec(kernel)
        _, operator_out = call.lazyops_operators()
        assert operator_out is not None and operator_out.name().endswith(f"{kernel.removesuffix('_tl')}_out")
        out = empty_output(kernel_spec, config, *args)
        utilities: tuple[str, ...] = ("test_schema", "test_faketensor")
        if is_float8(out) or any(is_float8(arg) for arg in args):
            # torch's schema check compares each argument before and after with allclose, which torch has no
            # kernel for in float8 (the fp8 norms' out, an fp8 KV cache): what it would verify is checked here from
            # the schema.
            utilities = ("test_faketensor",)
            written = {arg.name for arg in operator_out._schema.arguments if arg.alias_info and arg.alias_info.is_write}
            assert written == {"out", *kernel_spec.mutates}, operator_out._schema
        with torch.inference_mode(False), torch.no_grad():
            torch.library.opcheck(operator_out, (*args, out, *_engine.config_values(config)), test_utils=utilities)

    check()


@pytest.mark.parametrize("alias", [False, True])
def test_out_and_strided_views_compile_fullgraph_and_match_eager(kernels, alias):
    """What an engine compiles: a norm written into a preallocated buffer (or over its input), then rope on the
    query and key views of a packed projection, under ``torch.compile(fullgraph=True)``."""
    import lazyops

    assert lazyops.which("rmsnorm_tl").backend == kernels.backend
    norm = kernels.factory("rmsnorm_tl")(64, torch.float32)
    rope = kernels.factory("rope_tl")(16, torch.float32)

    def step(x, weight, buffer, qkv, positions, cache):
        normed = norm(x, weight, out=x if alias else buffer)
        query, key = rope(positions, qkv[:, :32], qkv[:, 32:48], cache)
        return normed * 2, query.sum() + key.sum()

    generator = torch.Generator().manual_seed(0)

    def inputs():
        return [
            t.to(kernels.device)
            for t in (
                torch.randn(6, 64, generator=generator),
                torch.randn(64, generator=generator),
                torch.empty(6, 64),
                torch.randn(6, 64, generator=generator),
                torch.randint(0, 8, (6,), generator=generator),
                torch.randn(8, 16, generator=generator),
            )
        ]

    args = inputs()
    eager_args = [t.clone() for t in args]
    with torch.inference_mode():
        expected = step(*eager_args)
        got = torch.compile(step, fullgraph=True)(*args)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    # the written buffers and the packed projection hold what the eager call left in them
    for index in (0, 2, 3) if not alias else (0, 3):
        torch.testing.assert_close(args[index], eager_args[index], rtol=1e-5, atol=1e-5)
