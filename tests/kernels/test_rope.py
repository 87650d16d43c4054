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
