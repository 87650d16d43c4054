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

import pytest
import torch

import lazyops
from lazyops import testing
from lazyops.specs import spec
from lazyops.testing.cases import examples

PACKAGE = os.path.dirname(lazyops.__file__) + os.sep
TORCH_BACKEND = os.path.join(PACKAGE, "_backends", "torch") + os.sep
_triton = importlib.util.find_spec("triton")
TRITON = os.path.dirname(_triton.origin) + os.sep if _triton is not None and _triton.origin else None
#: What the engine call may cost in lazyops frames: the kernel, its plain-call predicate, the backend's launch and
#: (Triton) its launcher.
PLAIN_FRAMES = 6
#: The kernels merged on 2026-12-06 whose engine call is not trimmed to that yet, each held at what it costs today
#: so that it can only shrink (the closing note of stop 42 lists them as open work): apply_penalties_tl's keyword
#: checks and its ``given`` helper; moe_route_tl's optional bias; fused_moe_tl's Triton path, five launches (the
#: alignment's three, the two grouped GEMMs) behind their own helpers; moe_align_tl, which has no plain-call
#: predicate at all and takes the checked path on every call (84, 91 and 83 frames). TileLang's are counted on a CPU
#: (test_tilelang_moe.py) around its programs built for the C target, its GPU run to confirm; its fused_moe_tl, five
#: launches behind the alignment's two helpers and ``sizes``, takes 8. Triton's sample_tl at a batch below the SM count
#: takes the split path (issue 37): 2 * KEY_PASSES + 2 = 18 launches, a launcher frame each, behind the path's call.
UNTRIMMED_FRAMES = {
    ("sample_tl", "triton"): 23,
    ("apply_penalties_tl", "torch"): 8,
    ("apply_penalties_tl", "triton"): 7,
    ("moe_route_tl", "triton"): 7,
    ("fused_moe_tl", "triton"): 20,
    ("fused_moe_tl", "tilelang"): 8,
    ("moe_align_tl", "torch"): 84,
    ("moe_align_tl", "triton"): 91,
    ("moe_align_tl", "tilelang"): 83,
}


def lazyops_frames(call: Any) -> list[str]:
    """The lazyops functions ``call()`` enters on the host, in order. Not counted, being the kernel itself rather than
    what lazyops puts around it: a Triton kernel's body that Triton's interpreter runs as Python (its caller is
    Triton's code; compiled on a GPU), and what a torch-backend kernel calls from inside its own module's launch (a
    PyTorch program's helpers are its body, as a Triton kernel's ``@triton.jit`` helpers are)."""
    entered: list[str] = []

    def kernel_body(frame: Any) -> bool:
        parent = frame.f_back
        if parent is not None and parent.f_code.co_filename.startswith(TORCH_BACKEND):
            return True
        caller = parent
        while caller is not None:
            if TRITON is not None and caller.f_code.co_filename.startswith(TRITON):
                return True
            caller = caller.f_back
        return False

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE) and not kernel_body(frame):
            entered.append(f"{os.path.relpath(frame.f_code.co_filename, PACKAGE)}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


def engine_call(kernels: Any, name: str, tokens: int) -> tuple[Any, tuple[Any, ...]]:
    kernel_spec = spec(name)
    example = examples(kernel_spec).benchmark(torch.float32)
    args = example.args if name != "matmul_tl" else (64, 64, torch.float32)
    args = tuple(256 if isinstance(arg, int) and arg > 256 and name != "matmul_tl" else arg for arg in args)
    kernel = kernels.factory(name)(*args, **example.kwargs)
    config = kernel_spec.bind(*args, **example.kwargs)
    draw = testing.Inputs(0, kernels.device)
    return kernel, examples(kernel_spec).example_inputs(config, tokens, draw, example.geometry)


def test_the_engine_call_passes_through_few_lazyops_frames(kernels: Any, kernel: str) -> None:
    call, inputs = engine_call(kernels, kernel, tokens=1)
    with torch.inference_mode():
        call(*inputs)  # the first call compiles (Triton) and fills caches: not what an engine's step pays
        frames = lazyops_frames(lambda: call(*inputs))
    assert len(frames) <= UNTRIMMED_FRAMES.get((kernel, kernels.backend), PLAIN_FRAMES), frames


# --- the launches a GPU takes, counted on this machine with stand-ins for what only a GPU has ------------------


class _Binary:
    """A compiled Triton kernel as ``Launcher`` hands it its arguments (``CompiledKernel``'s launch attributes)."""

    function, packed_metadata = "function", "metadata"

    def __init__(self) -> None:
        self.launches = 0

    def launch_metadata(self, grid: Any, stream: Any, *values: Any) -> None:
        return None

    def run(self, *arguments: Any) -> None:
        self.launches += 1


class JITFunction:
    """A ``@triton.jit`` kernel of a row kernel's signature (the class name is what ``Launcher`` recognises):
    ``kernel[grid](...)`` compiles, that is returns a new binary."""

    arg_names = ("x_ptr", "y_ptr", "M", "x_row_stride", "y_row_stride", "N", "ROWS")
    do_not_specialize = ("M",)

    def __init__(self) -> None:
        self.binaries: list[_Binary] = []

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> _Binary:
            self.binaries.append(_Binary())
            return self.binaries[-1]

        return run


def test_the_triton_launchers_direct_path_is_one_frame() -> None:
    """On a GPU a specialization's later launches go straight to its compiled binary (``Launcher``'s direct path;
    Triton's interpreter, above, takes the ordinary path): one lazyops frame, as there, so the counts above hold on
    a GPU too. The stand-ins are the JIT function, its binary and the driver; the launcher and Triton's launch
    hooks are the real ones."""
    from types import SimpleNamespace

    pytest.importorskip("triton")
    from lazyops._backends.triton._launch import Launcher, _knobs

    if _knobs is None:
        pytest.skip("a Triton without knobs takes the ordinary path only")
    kernel = JITFunction()
    launcher = Launcher(kernel, {"N": 4096, "ROWS": 1}, num_warps=8)
    active = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: None)
    launcher._driver = SimpleNamespace(active=active)
    x, out = torch.zeros(1, 4096), torch.zeros(1, 4096)
    launcher((1,), x, out, 1, 4096, 4096)  # the first launch of a specialization compiles
    frames = lazyops_frames(lambda: launcher((1,), x, out, 1, 4096, 4096))
    (binary,) = kernel.binaries
    assert binary.launches == 1, "the second launch went to the compiled binary"
    assert frames == ["_backends/triton/_launch.py:__call__"]


def test_tilelangs_launches_are_one_frame() -> None:
    """A TileLang kernel's launch calls the compiled executable (C, through TVM's FFI) from the closure the kernel
    calls: one lazyops frame for the row kernels, rope and the sampler where every argument is taken as it lies. The
    stand-in is the executable."""
    pytest.importorskip("tilelang")
    from lazyops._backends.tilelang import rope, sample
    from lazyops._backends.tilelang._runtime import launch_out_of_place
    from lazyops.specs.rmsnorm import spec as rmsnorm_spec

    launched: list[int] = []

    def executable(*args: Any) -> None:
        launched.append(len(args))

    launch = launch_out_of_place(rmsnorm_spec, executable, row_multiple=8)
    x, weight, out = torch.ones(1, 4096), torch.ones(4096), torch.ones(1, 4096)
    assert lazyops_frames(lambda: launch(x, weight, out)) == ["_backends/tilelang/_runtime.py:launch"]

    rotate = rope.rope_launch(rope.spec.bind(128, torch.bfloat16), {(torch.float32, torch.int64): executable})
    positions, cache = torch.zeros(1, dtype=torch.int64), torch.ones(16, 128)
    query, key = torch.ones(1, 32 * 128, dtype=torch.bfloat16), torch.ones(1, 8 * 128, dtype=torch.bfloat16)
    assert lazyops_frames(lambda: rotate(positions, query, key, cache)) == ["_backends/tilelang/rope.py:rope"]

    draw = sample.sample_launch(sample.spec.bind(16, torch.bfloat16), {(False, False): executable})
    logits, ints = torch.ones(1, 16, dtype=torch.bfloat16), torch.zeros(1, dtype=torch.int64)
    params = (torch.ones(1), ints, torch.ones(1), torch.zeros(1), ints, ints)
    tokens = torch.zeros(1, dtype=torch.int64)
    assert lazyops_frames(lambda: draw(logits, *params, None, None, None, tokens)) == [
        "_backends/tilelang/sample.py:sample"
    ]
    assert launched == [3, 4, 11], "each launched the executable"
