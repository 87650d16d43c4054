"""Every kernel of every GPU backend that runs here, judged by the conformance kit on the device. ``pytest -m gpu``:
one case per configuration class (``run_conformance(per_class=True)``: each dtype the backend serves, each option
the spec draws), so that a backend compiling each configuration (TileLang) compiles three to five a kernel rather
than one per drawn example; ``GPU_CONFORMANCE_EXAMPLES=N`` draws N examples a kernel instead, for a deeper run. One
test per backend and kernel (``kernel`` comes from tests/kernels/conftest.py): a device call cut off at its time
limit still reports every kernel it finished."""

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
    examples = int(os.environ.get("GPU_CONFORMANCE_EXAMPLES") or 0)
    report = testing.run_conformance(backend, kernels=[kernel], max_examples=examples or 1, per_class=not examples)
    print(report)
    assert not report.failed
