"""The Triton backend: every kernel as a ``@triton.jit`` kernel, math in float32, loads and stores in the input dtype.

It runs on a CUDA GPU, or on the CPU in Triton's interpreter (``TRITON_INTERPRET=1``, set before the kernel
modules are imported, since ``triton.jit`` reads it when it decorates). Importing this package imports neither
torch nor triton: the stub beside it names the kernels, and each kernel module imports triton when it is first
resolved.
"""

from __future__ import annotations

import lazy_loader

from lazyops._backends import has_cuda_device, is_installed
from lazyops._backends._ways_out import interpreter_requested, select_another

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)


def default_device() -> str:
    """The host in Triton's interpreter (it runs kernels on CPU tensors), else the GPU."""
    return "cpu" if interpreter_requested() else "cuda"


def unavailable_reason() -> str | None:
    """Why this backend cannot run here, or None when it can (``triton`` is installed, and a CUDA device is visible
    or the interpreter is on).

    Checked when a kernel is resolved, so that a machine without a GPU or without Triton gets this message, with
    a way out that works on it, instead of a driver error at the first launch or an ImportError.
    """
    if not is_installed("triton"):
        return (
            f"the package 'triton' is not installed; install it with: pip install 'lazyops[triton]', or "
            f"{select_another('triton')}"
        )
    if interpreter_requested() or has_cuda_device():
        return None
    return (
        "no GPU driver found; set TRITON_INTERPRET=1 (before lazyops resolves a kernel) to run it in Triton's "
        f"interpreter, or {select_another('triton')}"
    )
