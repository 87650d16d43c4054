"""A kernel call passes through few lazyops frames: at one token a kernel's host time is its cost, and every Python
frame between the caller and the launch is paid on every step of every layer.

Counted with ``sys.setprofile``: every Python function of the lazyops package entered during one call, the plain
call engines make (dense rows, exact parameters) and a checked one (a strided view with ``out=``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import torch

import lazyops
from lazyops import testing
from lazyops.specs import spec

PACKAGE = os.path.dirname(lazyops.__file__) + os.sep
_triton = importlib.util.find_spec("triton")
TRITON = os.path.dirname(_triton.origin) + os.sep if _triton is not None and _triton.origin else None
#: What the engine call may cost in lazyops frames: the kernel, its plain-call predicate, the backend's launch and
#: (Triton) its launcher.
PLAIN_FRAMES = 6


def lazyops_frames(call: Any) -> list[str]:
    """The lazyops functions ``call()`` enters on the host, in order. A Triton kernel's body that Triton's
    interpreter runs as Python (its caller is Triton's code) is the kernel itself, compiled on a GPU: not counted."""
    entered: list[str] = []

    def interpreted(frame: Any) -> bool:
        caller = frame.f_back
        while caller is not None:
            if TRITON is not None and caller.f_code.co_filename.startswith(TRITON):
                return True
            caller = caller.f_back
        return False

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE) and not interpreted(frame):
            entered.append(f"{os.path.relpath(frame.f_code.co_filename, PACKAGE)}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


def engine_call(kernels: Any, name: str, tokens: int) -> tuple[Any, tuple[Any, ...]]:
    kernel_spec = spec(name)
    example = kernel_spec.benchmark(torch.float32)
    args = example.args if name != "matmul_tl" else (64, 64, torch.float32)
    args = tuple(256 if isinstance(arg, int) and arg > 256 and name != "matmul_tl" else arg for arg in args)
    kernel = kernels.factory(name)(*args, **example.kwargs)
    config = kernel_spec.bind(*args, **example.kwargs)
    draw = testing.Inputs(0, kernels.device)
    return kernel, kernel_spec.example_inputs(config, tokens, draw, example.geometry)


def test_the_engine_call_passes_through_few_lazyops_frames(kernels: Any, kernel: str) -> None:
    call, inputs = engine_call(kernels, kernel, tokens=1)
    with torch.inference_mode():
        call(*inputs)  # the first call compiles (Triton) and fills caches: not what an engine's step pays
        frames = lazyops_frames(lambda: call(*inputs))
    assert len(frames) <= PLAIN_FRAMES, frames
