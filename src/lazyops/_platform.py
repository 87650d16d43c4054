"""The platform default: the backend that runs best on this machine, found without importing any backend.

On a machine with a CUDA device it is ``tilelang`` when TileLang is installed, else ``triton`` (else ``torch``
when neither is installed: a default that cannot be imported would make every inherited kernel fail). Elsewhere
it is ``torch``. Packages are looked up with ``importlib.util.find_spec``, which finds a package without running
it: importing TileLang to ask whether it exists would cost seconds.
"""

from __future__ import annotations

import importlib.util
import os


def has_cuda_device() -> bool:
    """True when torch sees a CUDA (or ROCm) device.

    Device files are checked first so that a CPU-only machine answers without importing torch; where they exist,
    torch decides (it honours ``CUDA_VISIBLE_DEVICES``, which the files do not).
    """
    if not (_nvidia_device_files() or os.path.exists("/dev/kfd") or os.path.isdir("/proc/driver/nvidia")):
        return False
    import torch

    return bool(torch.cuda.is_available())


def _nvidia_device_files() -> bool:
    """Whether ``/dev/nvidia<digit>...`` exists: ``glob("/dev/nvidia[0-9]*")``, without importing glob and re."""
    try:
        names = os.listdir("/dev")
    except OSError:
        return False
    return any(name.startswith("nvidia") and name[6:7] in tuple("0123456789") for name in names)


def is_installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def platform_default() -> str:
    if not has_cuda_device():
        return "torch"
    for backend in ("tilelang", "triton"):
        if is_installed(backend):
            return backend
    return "torch"
