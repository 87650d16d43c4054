"""Every kernel of every GPU backend that runs here, judged by the conformance kit on the device (issue 29: the
attention kernels on an H200, as every other). ``pytest -m gpu``; ``GPU_CONFORMANCE_EXAMPLES`` (default 6) cases a
kernel, each compiled for its configuration, so the count is what a GPU session can afford."""

from __future__ import annotations

import os

import pytest
import torch

from lazyops import testing

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU backends' kernels on their device"),
]


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_every_kernel_of_a_gpu_backend_conforms_on_the_device(backend: str) -> None:
    from lazyops import _api

    reason = _api.unavailable_reason(backend)
    if reason:
        pytest.skip(reason)
    report = testing.run_conformance(backend, max_examples=int(os.environ.get("GPU_CONFORMANCE_EXAMPLES", "6")))
    print(report)
    assert not report.failed
