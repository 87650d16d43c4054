"""The memory-overlap checks every in-place and ``out=`` call runs, against a brute-force count of shared elements.

``_checks.overlap`` has fast paths (a dense tensor's byte range from ``nbytes``; two row views of one stride
compared as arcs) because it runs on every call. A missed overlap lets a kernel read what it already wrote, so it
must never answer "disjoint" for views that share an element; it is exact for dense tensors and for row views of
one row stride, and may be conservative (refuse) otherwise.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lazyops._errors import KernelInputError  # noqa: E402
from lazyops.specs import _checks as checks  # noqa: E402

BUFFER = 256


@st.composite
def views(draw: st.DrawFn) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``(offset, sizes, strides)`` of a 1-D, dense 2-D, row-strided 2-D or 3-D view inside ``BUFFER`` elements."""
    kind = draw(st.sampled_from(["flat", "dense", "rows", "three"]))
    if kind == "flat":
        size = draw(st.integers(0, 64))
        sizes, strides = (size,), (1,)
    elif kind == "dense":
        rows, width = draw(st.integers(1, 8)), draw(st.integers(1, 16))
        sizes, strides = (rows, width), (width, 1)
    elif kind == "rows":
        rows, width = draw(st.integers(1, 8)), draw(st.integers(1, 16))
        sizes, strides = (rows, width), (draw(st.integers(width, 32)), 1)
    else:
        a, b, width = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 8))
        row = draw(st.integers(width, 12))
        sizes, strides = (a, b, width), (b * row, row, 1)
    extent = sum((size - 1) * step for size, step in zip(sizes, strides, strict=True)) + 1
    offset = draw(st.integers(0, max(0, BUFFER - extent)))
    return offset, sizes, strides


def elements(offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> set[int]:
    if 0 in sizes:
        return set()
    index = torch.arange(BUFFER).as_strided(sizes, strides, offset)
    return set(index.reshape(-1).tolist())


def exact_case(view_a: torch.Tensor, view_b: torch.Tensor) -> bool:
    """Where ``overlap`` must be exact: both dense, or both rows of contiguous features one common stride apart."""
    if view_a.is_contiguous() and view_b.is_contiguous():
        return True
    return all(v.dim() == 2 and v.stride(1) == 1 and v.stride(0) >= v.shape[1] for v in (view_a, view_b)) and (
        view_a.stride(0) == view_b.stride(0)
    )


@settings(max_examples=400, deadline=None)
@given(views(), views())
def test_overlap_never_misses_a_shared_element(a: tuple, b: tuple) -> None:
    buffer = torch.zeros(BUFFER)
    view_a, view_b = buffer.as_strided(a[1], a[2], a[0]), buffer.as_strided(b[1], b[2], b[0])
    shared = bool(elements(*a) & elements(*b))
    found = checks.overlap(view_a, view_b)
    assert found or not shared, (a, b)
    if exact_case(view_a, view_b):
        assert found == shared, (a, b)


def test_separate_tensors_and_meta_tensors_do_not_overlap() -> None:
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert not checks.overlap(x, y)
    assert checks.overlap(x, x)
    assert checks.overlap(x[1:], x[:2])
    meta = torch.empty(4, 8, device="meta")
    assert not checks.overlap(meta, meta)  # no memory: the compiler tracks their aliasing from the schema


def test_span_of_a_dense_view_is_its_bytes() -> None:
    buffer = torch.zeros(64, dtype=torch.float16)
    view = buffer[6:38].view(4, 8)
    start, end = checks.span(view)
    assert start == buffer.data_ptr() + 12 and end == start + 64


def test_a_cuda_backend_refuses_tensors_elsewhere_by_name() -> None:
    from lazyops.specs._engine import kernel_of
    from lazyops.specs.rmsnorm import spec

    config = spec.bind(8, torch.float32)
    kernel = kernel_of(spec, config, lambda x, weight: x, "test", "cuda", strided_rows=False, writes_out=False)
    with pytest.raises(KernelInputError, match=r"rmsnorm_tl\(.*the inputs are on cpu; .*take cuda tensors"):
        kernel(torch.randn(2, 8), torch.randn(8))
