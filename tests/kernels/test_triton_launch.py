"""The Triton launcher's direct path: one lookup per specialization, never a binary of another specialization.

Runs without a GPU: a stand-in for ``triton.JITFunction`` records what goes through the ordinary path and what is
handed to the compiled binary directly.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")

from lazyops._backends.triton import _launch  # noqa: E402


class Binary:
    function, packed_metadata = "function", "metadata"

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def launch_metadata(self, grid, stream, *values):
        return None

    def run(self, *arguments):
        self.launches.append(arguments)


class JITFunction:  # the class name is what the launcher recognises
    arg_names = ["x_ptr", "y_ptr", "M", "ROWS", "N"]
    do_not_specialize = [2]

    def __init__(self) -> None:
        self.ordinary: list[tuple] = []
        self.binaries: list[Binary] = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.ordinary.append((grid, args, kwargs))
            self.binaries.append(Binary())
            return self.binaries[-1]

        return run


@pytest.fixture
def fake_driver(monkeypatch):
    active = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: f"stream{device}")
    monkeypatch.setattr(_launch, "_knobs", SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)))
    return active


def test_the_second_call_of_a_specialization_goes_straight_to_the_binary(fake_driver):
    kernel = JITFunction()
    launcher = _launch.Launcher(kernel, {"ROWS": 4, "N": 64}, num_warps=4)
    launcher._driver = SimpleNamespace(active=fake_driver)
    x, y = torch.zeros(8, 64), torch.zeros(8, 64)
    launcher((2,), x, y, 8)
    launcher((3,), x, y, 9)  # another M: M is not specialized, so the same binary
    assert len(kernel.ordinary) == 1
    assert kernel.ordinary[0][2] == {"ROWS": 4, "N": 64, "num_warps": 4}
    (launch,) = kernel.binaries[0].launches
    assert launch[:4] == (3, 1, 1, "stream0")
    assert launch[9:] == (x, y, 9, 4, 64), "runtime arguments, then the compile-time ones in signature order"


def test_a_misaligned_pointer_or_another_dtype_is_another_specialization(fake_driver):
    kernel = JITFunction()
    launcher = _launch.Launcher(kernel, {"ROWS": 4, "N": 64})
    launcher._driver = SimpleNamespace(active=fake_driver)
    x, y = torch.zeros(8, 64), torch.zeros(8, 64)
    launcher((1,), x, y, 8)
    launcher((1,), x.view(-1)[1:65].view(1, 64), y, 1)  # 4 bytes past an aligned start
    launcher((1,), x.half(), y, 8)
    assert len(kernel.ordinary) == 3


def test_constexprs_must_come_last():
    kernel = JITFunction()
    with pytest.raises(ValueError, match="must come last"):
        _launch.Launcher(kernel, {"M": 1, "N": 64})
