"""The Triton launcher's direct path: one lookup per specialization, never a binary of another specialization.

Runs without a GPU: a stand-in for ``triton.JITFunction`` records what goes through the ordinary path and what is
handed to the compiled binary directly.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("triton")

from lazyops._backends.triton import _launch


class Binary:
    function, packed_metadata = "function", "metadata"

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def launch_metadata(self, grid, stream, *values):
        return None

    def run(self, *arguments):
        self.launches.append(arguments)


class JITFunction:  # the class name is what the launcher recognises
    arg_names = ("x_ptr", "y_ptr", "M", "ROWS", "N")
    do_not_specialize = (2,)

    def __init__(self) -> None:
        self.ordinary: list[tuple] = []
        self.binaries: list[Binary] = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.ordinary.append((grid, args, kwargs))
            self.binaries.append(Binary())
            return self.binaries[-1]

        return run


#: the driver's current device and stream, as the launcher asks them
ACTIVE = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: f"stream{device}")


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setattr(
        _launch, "_knobs", SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None))
    )
    return ACTIVE


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


class HookChain:  # the class name is what the launcher recognises, as Triton >= 3.4 keeps hooks in knobs
    def __init__(self) -> None:
        self.calls: list = []


def test_hooks_reach_the_binary_only_when_registered(fake_driver, monkeypatch):
    """An empty hook chain goes to the launcher as None (no metadata built, nothing called); a registered hook
    goes as the chain, with the binary's launch metadata, as Triton's own run passes them."""
    enter, leave = HookChain(), HookChain()
    monkeypatch.setattr(
        _launch, "_knobs", SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=enter, launch_exit_hook=leave))
    )
    kernel = JITFunction()
    launcher = _launch.Launcher(kernel, {"ROWS": 4, "N": 64})
    launcher._driver = SimpleNamespace(active=fake_driver)
    x, y = torch.zeros(8, 64), torch.zeros(8, 64)
    launcher((1,), x, y, 8)
    binary = kernel.binaries[0]
    binary.launch_metadata = lambda grid, stream, *values: ("metadata", grid, stream, values)
    launcher((1,), x, y, 8)
    enter.calls.append(print)
    launcher((2,), x, y, 8)
    (first, second) = binary.launches
    assert first[6:9] == (None, None, None)
    assert second[6:9] == (("metadata", (2,), "stream0", (x, y, 8, 4, 64)), enter, None)


def test_constexprs_must_come_last():
    kernel = JITFunction()
    with pytest.raises(ValueError, match="must come last"):
        _launch.Launcher(kernel, {"M": 1, "N": 64})


#: a row kernel's signature: pointers, the token count (not specialized), then the row strides (specialized)
StridedJITFunction = type(
    "JITFunction",
    (JITFunction,),
    {"arg_names": ["x_ptr", "y_ptr", "M", "x_row_stride", "y_row_stride", "N"], "do_not_specialize": ["M"]},
)


def test_a_row_stride_that_changes_divisibility_is_another_specialization(fake_driver):
    """Contiguous rows of 4096 (a multiple of 16) alternate with a packed view's odd stride: every call reaches the
    binary of its own stride's specialization, never the other's."""
    kernel = StridedJITFunction()
    launcher = _launch.Launcher(kernel, {"N": 4096})
    launcher._driver = SimpleNamespace(active=fake_driver)
    x, y = torch.zeros(2, 4096), torch.zeros(2, 4096)
    for x_stride in (4096, 4099, 4096, 4099, 8192, 1, 1):
        launcher((1,), x, y, 2, x_stride, 4096)
    assert len(kernel.ordinary) == 3, "one binary each for % 16 == 0, neither, and == 1"
    strides = [[launch[9 + 3] for launch in binary.launches] for binary in kernel.binaries]
    assert strides == [[4096, 8192], [4099], [1]]
    launcher((1,), x, y, 2**31, 4096, 4096)  # M past 32 bits: Triton types it i64, specialized or not
    launcher((1,), x, y, 2, 2**31 + 16, 4096)
    assert len(kernel.ordinary) == 5


def test_alternating_contiguous_and_packed_rows_give_every_call_its_own_result():
    """The real kernel through the launcher (its direct path on a GPU): rows of 4096 whose stride is a multiple of
    16, and views of a packed buffer whose stride is odd, in turn, as input and as out=."""
    from lazyops._backends.triton._common import launch_device
    from lazyops._backends.triton.rmsnorm import _rmsnorm_kernel, rmsnorm_tl

    device = launch_device(_rmsnorm_kernel)
    kernel = rmsnorm_tl(4096, torch.float16)
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(4096, generator=generator).half().to(device)
    contiguous = torch.randn(3, 4096, generator=generator).half().to(device)
    packed = torch.randn(3, 4099, generator=generator).half().to(device)[:, :4096]
    assert packed.stride(0) == 4099
    for _ in range(2):
        for x in (contiguous, packed):
            for out in (
                torch.empty(3, 4096, device=device).half(),
                torch.empty(3, 4099, device=device).half()[:, :4096],
            ):
                returned = kernel(x, weight, out=out)
                assert returned is out
                expected = torch.rms_norm(x.float(), (4096,), weight.float(), 1e-6)
                torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)


def test_grid_arithmetic_matches_tritons_own() -> None:
    """The launches compute grids with plain-Python ``cdiv`` and ``next_power_of_2`` (Triton's are
    ``constexpr_function`` objects, microseconds a call); they must give Triton's answers."""
    import triton

    from lazyops._backends.triton._common import cdiv, next_power_of_2

    assert all(next_power_of_2(n) == triton.next_power_of_2(n) for n in range(0, 70_000))
    assert all(cdiv(a, b) == triton.cdiv(a, b) for a in range(0, 600) for b in range(1, 70))


def _triton_integer_key(value: int, specialized: bool) -> tuple:
    """What Triton's own specialization tells apart about an integer argument: its width, and for a specialized
    one whether it is 1 and whether it divides by 16."""
    wide = not -(2**31) <= value < 2**31
    return (wide, value == 1, value % 16 == 0) if specialized else (wide,)


#: integers at the edges of what specialization tells apart, and any others
INTEGERS = st.one_of(
    st.sampled_from([1, 0, -1, -16, 16, 17, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1]), st.integers(-(2**40), 2**40)
)


@pytest.mark.skipif(_launch._knobs is None, reason="a Triton without knobs takes the ordinary path only")
@given(
    first=INTEGERS,
    second=INTEGERS,
    aligned=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float16]),
)
def test_the_key_tells_apart_what_tritons_specialization_tells_apart(first, second, aligned, dtype):
    """Two calls share a binary exactly when Triton would give them one: the same element type and pointer
    alignment, and integers alike in width (and, where specialized, in ``== 1`` and ``% 16``)."""
    x = torch.zeros(64, dtype=dtype)
    y = x if aligned else x[1:]
    for m, stride in ((first, second), (second, first)):
        kernel = StridedJITFunction()
        launcher = _launch.Launcher(kernel, {"N": 4096})
        launcher._driver = SimpleNamespace(active=ACTIVE)
        launcher((1,), x, x, m, stride)
        launcher((1,), y, x, stride, m)
        # M (position 2) is not specialized, the stride (position 3) is
        same = (
            aligned
            and _triton_integer_key(m, False) == _triton_integer_key(stride, False)
            and (_triton_integer_key(stride, True) == _triton_integer_key(m, True))
        )
        assert (len(kernel.ordinary) == 1) is same


#: the TMA GEMM's signature: three descriptors, the token count and the program count (neither specialized)
DescriptorJITFunction = type(
    "JITFunction",
    (JITFunction,),
    {"arg_names": ["a_desc", "b_desc", "c_desc", "M", "programs", "N"], "do_not_specialize": ["M", "programs"]},
)


def test_a_descriptor_of_another_block_shape_or_dtype_is_another_specialization(fake_driver):
    """Triton compiles a TMA descriptor's block shape and element type into the binary: calls differing in either
    never share one; calls differing only in the described tensor (its address, its rows) do."""
    descriptor = pytest.importorskip("triton.tools.tensor_descriptor").TensorDescriptor
    kernel = DescriptorJITFunction()
    launcher = _launch.Launcher(kernel, {"N": 64})
    launcher._driver = SimpleNamespace(active=fake_driver)

    def described(rows, block, dtype=torch.float16):
        tensor = torch.zeros(rows, 64, dtype=dtype)
        return descriptor.from_tensor(tensor, block)

    for rows, block, dtype in ((8, [8, 16], torch.float16), (24, [8, 16], torch.float16)):
        launcher((1,), described(rows, block, dtype), described(64, [16, 16]), described(rows, [8, 16]), rows, 1)
    assert len(kernel.ordinary) == 1
    launcher((1,), described(8, [16, 16]), described(64, [16, 16]), described(8, [8, 16]), 8, 1)
    launcher((1,), described(8, [8, 16], torch.bfloat16), described(64, [16, 16]), described(8, [8, 16]), 8, 1)
    assert len(kernel.ordinary) == 3
