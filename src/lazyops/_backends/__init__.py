"""The built-in backends, one package each, every kernel a module of the same name in each; and the platform
default: the one that runs best on this machine, found without importing any backend.

On a machine with a CUDA device it is ``tilelang`` when TileLang is installed, else ``triton`` (else ``torch``
when neither is installed: a default that cannot be imported would make every inherited kernel fail). Elsewhere
it is ``torch``. Packages are looked up with ``importlib.util.find_spec``, which finds a package without running
it: importing TileLang to ask whether it exists would cost seconds.
"""

from __future__ import annotations

import importlib.util
import os

#: Files whose presence means a GPU driver may serve this process, so that torch is asked: NVIDIA's control device
#: (every CUDA process opens it, and a container given a GPU has it), AMD's ROCm compute device, WSL2's GPU device
#: (its CUDA has no /dev/nvidia* files), NVIDIA's driver folder. One ``stat`` each, where listing /dev was ~100.
GPU_DRIVER_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg", "/proc/driver/nvidia")


def has_cuda_device() -> bool:
    """True when torch sees a CUDA (or ROCm) device.

    Driver files are checked first so that a CPU-only machine answers without importing torch; where one exists,
    torch decides (it honours ``CUDA_VISIBLE_DEVICES``, which the files do not).
    """
    if not any(os.path.exists(path) for path in GPU_DRIVER_FILES):
        return False
    import torch

    return bool(torch.cuda.is_available())


def is_installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def platform_default() -> str:
    if not has_cuda_device():
        return "torch"
    for backend in ("tilelang", "triton"):
        if is_installed(backend):
            return backend
    return "torch"
