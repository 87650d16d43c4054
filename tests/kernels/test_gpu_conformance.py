"""Every kernel of every GPU backend that runs here, judged by the conformance kit on the device (issue 29: the
attention kernels on an H200, as every other). ``pytest -m gpu``; ``GPU_CONFORMANCE_EXAMPLES`` (default 6) cases a
kernel, each compiled for its configuration, so the count is what a GPU session can afford. One test per backend and
kernel (``kernel`` comes from tests/kernels/conftest.py): on the H200 TileLang compiles each drawn configuration, and
a device call cut off at its time limit still reports every kernel it finished."""

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
def test_every_kernel_of_a_gpu_backend_conforms_on_the_device(backend: str, kernel: str) -> None:
    from lazyops import _api

    reason = _api.unavailable_reason(backend)
    if reason:
        pytest.skip(reason)
    examples = int(os.environ.get("GPU_CONFORMANCE_EXAMPLES", "6"))
    report = testing.run_conformance(backend, kernels=[kernel], max_examples=examples)
    print(report)
    assert not report.failed
