"""The platform default: tilelang on CUDA when installed, else triton; torch elsewhere."""

from __future__ import annotations

import pytest

import lazyops._backends as _platform
from fresh_interpreter import run_python


@pytest.mark.parametrize(
    "cuda, installed, expected",
    [
        (False, {"tilelang", "triton"}, "torch"),
        (True, {"tilelang", "triton"}, "tilelang"),
        (True, {"triton"}, "triton"),
        (True, set(), "torch"),  # neither GPU backend installed: a default that cannot import would be no default
    ],
)
def test_platform_default(monkeypatch, cuda, installed, expected):
    monkeypatch.setattr(_platform, "has_cuda_device", lambda: cuda)
    monkeypatch.setattr(_platform, "is_installed", lambda package: package in installed)
    assert _platform.platform_default() == expected


def test_finding_tilelang_does_not_import_it(fake_backends):
    code = """
    import sys
    from lazyops._backends import is_installed, platform_default
    print(is_installed("tilelang"), "tilelang" in sys.modules, platform_default())
    """
    result = run_python(code, fake_backends.env())
    assert result.returncode == 0, result.stderr
    _installed, imported, _ = result.stdout.split()
    assert imported == "False"


def test_default_on_a_cuda_machine_is_used_by_the_namespace(fake_backends, monkeypatch):
    from lazyops._namespace import Namespace

    module_dict: dict = {}
    namespace = Namespace(module_dict, environ={}, default=lambda: "triton")
    assert namespace.which("rmsnorm_tl").backend == "triton"
    assert namespace.which("rmsnorm_tl").reason == "selected"
    namespace.configure(backend="torch", fallback=["rmsnorm_tl"])
    assert (namespace.which("rmsnorm_tl").backend, namespace.which("rmsnorm_tl").reason) == ("triton", "fallback-list")


@pytest.mark.parametrize("present", [None, *_platform.GPU_DRIVER_FILES])
def test_torch_is_asked_only_where_a_gpu_driver_file_exists(monkeypatch, present):
    """No driver file: no GPU, and torch is not imported to say so. Any one of them (WSL2's /dev/dxg included):
    torch decides."""
    import torch

    asked = []
    monkeypatch.setattr(_platform.os.path, "exists", lambda path: path == present)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(True) or True)
    assert _platform.has_cuda_device() is (present is not None)
    assert asked == ([True] if present else [])


def test_a_cpu_machine_answers_without_importing_torch(fake_backends):
    code = """
    import sys
    from lazyops._backends import GPU_DRIVER_FILES, has_cuda_device
    import os
    print(any(os.path.exists(path) for path in GPU_DRIVER_FILES), has_cuda_device(), "torch" in sys.modules)
    """
    result = run_python(code, fake_backends.env())
    assert result.returncode == 0, result.stderr
    files, device, torch_imported = result.stdout.split()
    if files == "True":
        pytest.skip("this machine has a GPU driver file: torch is rightly asked")
    assert (device, torch_imported) == ("False", "False")
