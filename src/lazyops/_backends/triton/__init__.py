"""The Triton backend: every kernel as a ``@triton.jit`` kernel, math in float32, loads and stores in the input dtype.

It runs on a CUDA GPU, or on the CPU in Triton's interpreter (``TRITON_INTERPRET=1``, set before the kernel
modules are imported, since ``triton.jit`` reads it when it decorates). Importing this package imports neither
torch nor triton: the stub beside it names the kernels, and each kernel module imports triton when it is first
resolved.
"""

from __future__ import annotations

import os

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

#: The values of TRITON_INTERPRET that Triton itself reads as true (its ``getenv_bool``).
_TRUE = frozenset({"1", "true", "on"})


def interpreter_requested() -> bool:
    """Whether ``TRITON_INTERPRET`` asks Triton to run kernels in its interpreter (read as Triton reads it)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUE


def default_device() -> str:
    """The host in Triton's interpreter (it runs kernels on CPU tensors), else the GPU."""
    return "cpu" if interpreter_requested() else "cuda"


def unavailable_reason() -> str | None:
    """Why this backend cannot run here, or None when it can (a CUDA device is visible, or the interpreter is on).

    Checked when a kernel is resolved, so that a machine without a GPU gets this message, with the way out,
    instead of a driver error at the first launch. A missing ``triton`` package is not handled here: importing a
    kernel module raises the ImportError, which the core turns into a BackendError.
    """
    if interpreter_requested():
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return (
        "no GPU driver found; set TRITON_INTERPRET=1 (before lazyops resolves a kernel) to run it in Triton's "
        "interpreter, or select 'torch'"
    )
