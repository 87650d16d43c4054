"""Engine-shaped calls, in every backend that runs here: views of packed buffers, ``out=`` with and without
aliasing, any leading dimensions, float32 weights under 16-bit activations; and the layouts that must be refused.

The conformance kit draws all of these at random (:func:`lazyops.testing.strategies.layouts`); the tests here pin
the cases engines depend on by name, each judged by the kit against the float64 reference.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lazyops._errors import KernelInputError
from lazyops.specs import spec
from lazyops.testing import Case, Layout, check_case


def run(kernels: Any, kernel: str, args: tuple[Any, ...], layout: Layout, tokens=(7, 0, 12), **kwargs: Any) -> None:
    case = Case(kernel, args, kwargs, tokens=tokens, seed=1234, layout=layout, geometry=GEOMETRY.get(kernel, {}))
    check_case(kernels.factory(kernel), case, device=kernels.device, max_elements=kernels.max_elements)


GEOMETRY = {
    "rope_tl": {
        "rotary_dim": 64,
        "query_heads": 4,
        "key_heads": 2,
        "cache_rows": 256,
        "cache_dtype": "float32",
        "positions_dtype": torch.int64,
    },
    "softmax_tl": {"mask": "none", "block": 1024},
}


@pytest.mark.parametrize("is_neox", [True, False])
def test_rope_rotates_query_and_key_in_place_inside_a_packed_qkv_buffer(kernels, is_neox):
    """vLLM's, SGLang's and FlashInfer's call: query and key are slices of one ``qkv[M, (Hq + 2 Hk) * head_dim]``;
    both are rotated where they lie, and the value slice (and every other column) is left bit-identical."""
    run(kernels, "rope_tl", (64, torch.float32), Layout(packed=True), is_neox=is_neox)
    run(kernels, "rope_tl", (64, torch.float16), Layout(packed=True, row_pad=8, lead=2), is_neox=is_neox)


def test_rope_takes_heads_as_their_own_dimension(kernels):
    kernel = kernels.factory("rope_tl")(64, torch.float32)
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(5, 4 + 2 + 2, 64, generator=generator).to(kernels.device)
    query, key = qkv[:, :4], qkv[:, 4:6]  # [M, H, head_dim] views of a packed buffer
    positions = torch.arange(5, device=kernels.device)
    cache = torch.randn(16, 64, generator=generator).to(kernels.device)
    expected = [t.reshape(5, -1).double() for t in (query, key)]
    expected = spec("rope_tl").reference(spec("rope_tl").bind(64, torch.float32), positions, *expected, cache)
    value_before = qkv[:, 6:].clone()
    returned = kernel(positions, query, key, cache)
    assert returned[0] is query and returned[1] is key
    for got, want in zip(returned, expected, strict=True):
        torch.testing.assert_close(got.reshape(5, -1).double().cpu(), want.cpu(), rtol=1e-5, atol=1e-5)
    assert torch.equal(qkv[:, 6:], value_before)


@pytest.mark.parametrize(
    "name", ["rmsnorm_tl", "add_rmsnorm_tl", "layernorm_tl", "softmax_tl", "silu_and_mul_tl", "matmul_tl"]
)
@pytest.mark.parametrize("out", ["given", "alias"])
def test_out_is_written_and_returned(kernels, name, out):
    kernel = name
    if out == "alias" and not spec(kernel).out_aliases:
        pytest.skip(f"{kernel}'s output cannot alias an input")
    args = (16, 16, torch.float32) if kernel == "matmul_tl" else (40, torch.float32)
    run(kernels, kernel, args, Layout(out=out))
    run(kernels, kernel, args, Layout(out=out, row_pad=8, offset=3, lead=2))


@pytest.mark.parametrize(
    "name", ["rmsnorm_tl", "add_rmsnorm_tl", "layernorm_tl", "softmax_tl", "gelu_and_mul_tl", "matmul_tl"]
)
def test_leading_dimensions_and_strided_rows(kernels, name):
    """``x[batch, seq, n]``, ``[tokens, heads, head_dim]`` (a per-head QK-norm), and rows strided in a wider
    buffer: the leading shape is kept in the output."""
    kernel = name
    args = (16, 16, torch.float16) if kernel == "matmul_tl" else (40, torch.float16)
    run(kernels, kernel, args, Layout(lead=3), tokens=(12, 5))
    run(kernels, kernel, args, Layout(lead=2, row_pad=1, offset=16), tokens=(12, 1))


@pytest.mark.parametrize("name", ["rmsnorm_tl", "add_rmsnorm_tl"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("weight_offset", [0.0, 1.0])
def test_norms_take_a_float32_weight_and_gemma_scaling(kernels, name, dtype, weight_offset):
    run(kernels, name, (100, dtype), Layout(), weight_dtype=torch.float32, weight_offset=weight_offset)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [100, 20000])
def test_layernorm_takes_float32_weight_and_bias(kernels, dtype, n):
    """FlashInfer's ``layernorm`` form: 16-bit activations, float32 ``gamma`` and ``beta`` (a wide row too)."""
    run(kernels, "layernorm_tl", (n, dtype), Layout(), tokens=(3,), weight_dtype=torch.float32)


def test_layernorm_is_torchs_layer_norm(kernels):
    kernel = kernels.factory("layernorm_tl")(64, torch.float32, 1e-3)
    x = torch.randn(3, 8, 64, device=kernels.device) + 5
    weight, bias = torch.randn(2, 64, device=kernels.device).unbind()
    y = kernel(x, weight, bias)
    assert y.shape == x.shape
    expected = torch.nn.functional.layer_norm(x, (64,), weight, bias, 1e-3)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


def test_a_per_head_qk_norm_keeps_the_input_shape(kernels):
    kernel = kernels.factory("rmsnorm_tl")(64, torch.float32)
    x = torch.randn(3, 8, 64, device=kernels.device)
    weight = torch.randn(64, device=kernels.device)
    y = kernel(x, weight)
    assert y.shape == x.shape
    torch.testing.assert_close(y, torch.rms_norm(x, (64,), weight, 1e-6), rtol=1e-5, atol=1e-5)


def bad(kernels: Any, kernel: str, *args: Any, match: str, **call: Any) -> None:
    with pytest.raises(KernelInputError, match=match):
        kernels.factory(kernel)(*args)(*call.pop("tensors"), **call)


def test_layouts_that_are_not_row_strided_are_refused(kernels):
    d = kernels.device
    weight = torch.ones(8, device=d)
    transposed = torch.randn(8, 5, device=d).t()
    bad(kernels, "rmsnorm_tl", 8, torch.float32, match="last stride 1", tensors=(transposed, weight))
    overlapping = torch.randn(1, 8, device=d).expand(4, 8)
    bad(kernels, "rmsnorm_tl", 8, torch.float32, match="do not overlap", tensors=(overlapping, weight))
    # [2, 3, 8] whose two leading dimensions do not collapse into one row stride
    uncollapsible = torch.randn(2, 4, 8, device=d)[:, :3]
    bad(kernels, "rmsnorm_tl", 8, torch.float32, match="collapse", tensors=(uncollapsible, weight))
    bad(kernels, "rmsnorm_tl", 8, torch.float32, match="expected", tensors=(torch.randn(8, device=d), weight))


def test_bad_out_is_refused_before_anything_is_written(kernels):
    d = kernels.device
    x = torch.randn(4, 8, device=d)
    weight = torch.ones(8, device=d)
    before = x.clone()
    for out, match in (
        (torch.empty(4, 9, device=d), "shape"),
        (torch.empty(4, 8, dtype=torch.float16, device=d), "dtype"),
        (x[1:].new_empty(0).set_(x.untyped_storage(), 2, (4, 8), (8, 1)) if d != "meta" else None, "overlaps"),
        (torch.empty(8, 4, device=d).t(), "last stride 1"),
    ):
        if out is None:
            continue
        bad(kernels, "rmsnorm_tl", 8, torch.float32, match=match, tensors=(x, weight), out=out)
        assert torch.equal(x, before)
    qkv = torch.randn(4, 24, device=d)
    bad(kernels, "silu_and_mul_tl", 8, torch.float32, match="overlaps x", tensors=(qkv[:, :16],), out=qkv[:, :8])
    residual = torch.randn(4, 8, device=d)
    bad(kernels, "add_rmsnorm_tl", 8, torch.float32, match="overlaps", tensors=(x, residual, weight), out=residual)
    bad(kernels, "add_rmsnorm_tl", 8, torch.float32, match="overlaps", tensors=(x, x, weight))


def test_query_and_key_sharing_elements_are_refused(kernels):
    d = kernels.device
    qkv = torch.randn(4, 3 * 16, device=d)
    positions = torch.zeros(4, dtype=torch.int64, device=d)
    cache = torch.randn(8, 16, device=d)
    with pytest.raises(KernelInputError, match="query overlaps key"):
        kernels.factory("rope_tl")(16, torch.float32)(positions, qkv[:, :32], qkv[:, 16:32], cache)
    with pytest.raises(KernelInputError, match="out="):
        kernels.factory("rope_tl")(16, torch.float32)(positions, qkv[:, :16], qkv[:, 16:32], cache, out=qkv)


def packed_view(device: str, rows: int, width: int, seed: int) -> torch.Tensor:
    """``[rows, width]`` cut out of a wider buffer, 3 columns in: rows strided by ``width + 7``, a misaligned start."""
    buffer = torch.randn(rows, width + 7, generator=torch.Generator().manual_seed(seed)).to(device)
    return buffer[:, 3 : 3 + width]


def strided_call(device: str, name: str) -> tuple[tuple[Any, ...], tuple[Any, ...], Any]:
    """The factory arguments, the call's arguments (row inputs and out views of packed buffers), and out (or None)."""
    tokens = 5
    if name == "rope_tl":
        qkv = torch.randn(tokens, (4 + 2 + 2) * 16, generator=torch.Generator().manual_seed(1)).to(device)
        positions = torch.arange(tokens, device=device)
        cache = torch.randn(8, 16, generator=torch.Generator().manual_seed(2)).to(device)
        return (16, torch.float32), (positions, qkv[:, :64], qkv[:, 64:96], cache), None
    if name == "matmul_tl":  # k long enough for Triton's split-K: out is written by its second kernel
        b = torch.randn(512, 24, generator=torch.Generator().manual_seed(2)).to(device)
        return (24, 512, torch.float32), (packed_view(device, tokens, 512, 1), b), packed_view(device, tokens, 24, 3)
    weight = torch.randn(40, generator=torch.Generator().manual_seed(2)).to(device)
    out = packed_view(device, tokens, 40, 3)
    if name in ("silu_and_mul_tl", "gelu_and_mul_tl"):
        return (40, torch.float32), (packed_view(device, tokens, 80, 1),), out
    x = packed_view(device, tokens, 40, 1)
    if name == "softmax_tl":
        return (40, torch.float32), (x,), out
    if name == "rmsnorm_tl":
        return (40, torch.float32), (x, weight), out
    return (40, torch.float32), (x, packed_view(device, tokens, 40, 4), weight), out


STRIDED_KERNELS = [
    "rmsnorm_tl",
    "add_rmsnorm_tl",
    "softmax_tl",
    "silu_and_mul_tl",
    "gelu_and_mul_tl",
    "matmul_tl",
    "rope_tl",
]


@pytest.mark.parametrize("name", STRIDED_KERNELS)
def test_a_launch_that_takes_strides_receives_the_callers_views(kernels, name, monkeypatch):
    """Where a backend declares ``strided_rows`` (and ``writes_out``), nothing is copied: its launch gets the very
    views of the packed buffers (their storage and strides) and writes the results where they lie, leaving the
    buffers' other columns alone. Triton is checked down to its kernel launches."""

    conventions = kernels.factory(name).lazyops_conventions
    if not conventions["strided_rows"]:
        pytest.skip(f"{kernels.backend}'s {name} copies strided rows (strided_rows=False)")
    factory_args, args, out = strided_call(kernels.device, name)
    kernel_spec = spec(name)
    received: list[torch.Tensor] = []

    def record(*values: Any) -> None:
        received.extend(value for value in values if isinstance(value, torch.Tensor))

    if kernels.backend == "triton":  # down to the kernel launches: a copy inside the launch is a copy too
        from lazyops._backends.triton._launch import Launcher

        launch_kernel = Launcher.__call__

        def recording_launch(self: Any, grid: Any, *values: Any) -> None:
            record(*values)
            launch_kernel(self, grid, *values)

        monkeypatch.setattr(Launcher, "__call__", recording_launch)
    else:
        from lazyops.specs import _engine

        kernel_of = _engine.kernel_of

        def recording_kernel_of(spec: Any, config: Any, launch: Any, *rest: Any, **options: Any) -> Any:
            def recorded(*values: Any) -> Any:
                record(*values)
                return launch(*values)

            return kernel_of(spec, config, recorded, *rest, **options)

        monkeypatch.setattr(_engine, "kernel_of", recording_kernel_of)
    kernel = kernels.factory(name)(*factory_args)
    views = [args[kernel_spec.inputs.index(row)] for row in kernel_spec.row_inputs if row != "positions"]
    if out is not None and conventions["writes_out"]:
        views.append(out)
    untouched = [
        (base, base.clone())
        for base in {id(view._base): view._base for view in views if view._base is not None}.values()
    ]
    expected = kernel_spec.reference(
        kernel_spec.bind(*factory_args), *(a.double() if a.is_floating_point() else a for a in args)
    )

    result = kernel(*args) if out is None else kernel(*args, out=out)

    for view in views:
        assert any(got.data_ptr() == view.data_ptr() and got.stride() == view.stride() for got in received), (
            f"the launch never received the {tuple(view.shape)} view (strides {view.stride()}): it was copied"
        )
    results = [out if name_ == "out" else args[kernel_spec.inputs.index(name_)] for name_ in kernel_spec.results]
    if out is not None:
        assert result is out
    for got, want in zip(results, expected, strict=True):
        torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=1e-4, atol=1e-4)
    for base, before in untouched:
        written = torch.zeros_like(base, dtype=torch.bool)
        for view in views:
            if view._base is base:
                torch.as_strided(written, view.shape, view.stride(), view.storage_offset()).fill_(True)
        assert torch.equal(base[~written], before[~written]), "a column outside the views was written"
