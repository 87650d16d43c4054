"""Issue 33's kernel items on the device (``pytest -m gpu``): each GPU backend declines what it cannot build, so
its paged kernels' configurations fall through to torch and run there on the GPU; an index tensor of the wrong
dtype gets its conversion from every backend; ``validate=True`` reads no value of meta tensors."""

from __future__ import annotations

import pytest
import torch

from lazyops._errors import KernelInputError
from lazyops.specs import spec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU backends' kernels on their device"),
]

GPU_BACKENDS = ("triton", "tilelang")


def usable(backend: str) -> None:
    from lazyops import _api

    reason = _api.unavailable_reason(backend)
    if reason:
        pytest.skip(reason)


def inputs(head_dim: int, dtype: torch.dtype, **dtypes: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Two sequences of 5 and 3 tokens in blocks of 4, the first a prefill of 5 queries, the second one decode."""
    cuda = "cuda"
    query = torch.randn(6, 4 * head_dim, dtype=dtype, device=cuda)
    key_cache = torch.randn(4, 4, 2, head_dim, dtype=dtype, device=cuda)
    value_cache = torch.randn(4, 4, 2, head_dim, dtype=dtype, device=cuda)

    def index(name: str, values: list[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=dtypes.get(name, torch.int32), device=cuda)

    return (
        query,
        key_cache,
        value_cache,
        index("block_table", [[0, 1], [2, 3]]),
        index("seq_lens", [5, 3]),
        index("cu_seqlens_q", [0, 5, 6]),
    )


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_head_dim_a_backend_declines_runs_from_torch_on_the_device(backend):
    usable(backend)
    import lazyops
    from lazyops._api import configured

    with configured(backend=f"{backend},torch"):
        assert lazyops.which("paged_attention_tl", 4, 2, 512, "bfloat16", block_size=4).backend == "torch"
        kernel = lazyops.paged_attention_tl(4, 2, 512, torch.bfloat16, block_size=4)
    args = inputs(512, torch.bfloat16)
    config = spec("paged_attention_tl").bind(4, 2, 512, torch.bfloat16, block_size=4)
    (expected,) = spec("paged_attention_tl").reference(
        config, *(a.double() if a.is_floating_point() else a for a in args)
    )
    torch.testing.assert_close(kernel(*args).double(), expected, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("name", ["block_table", "seq_lens", "cu_seqlens_q"])
def test_an_index_of_the_wrong_dtype_names_the_conversion_on_the_device(backend, name):
    usable(backend)
    import importlib

    factory = importlib.import_module(f"lazyops._backends.{backend}").paged_attention_tl
    kernel = factory(4, 2, 64, torch.bfloat16, block_size=4)
    with pytest.raises(KernelInputError, match=rf"{name}\.to\(torch\.int32\)"):
        kernel(*inputs(64, torch.bfloat16, **{name: torch.int64}))


def test_the_torch_backend_with_validate_on_meta_tensors_returns_meta():
    from lazyops._backends.torch import paged_attention_tl

    kernel = paged_attention_tl(4, 2, 64, torch.bfloat16, block_size=4, validate=True)
    out = kernel(*(a.to("meta") for a in inputs(64, torch.bfloat16)))
    assert out.device.type == "meta"
