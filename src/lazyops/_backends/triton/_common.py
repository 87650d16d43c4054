"""What the Triton kernels share: how a row is spread over programs, and which device a launch may touch.

Private to this backend (the stub does not list it), imported by the kernel modules only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

#: The widest row (a power of two) that one program holds in registers at once. Up to this width a row is read
#: once and kept; a wider row is walked in ``LOOP_BLOCK`` pieces, twice, which costs a second read but never
#: spills registers. 16384 float32 values over 16 warps is 32 registers a thread.
MAX_FUSED_BLOCK = 16384
LOOP_BLOCK = 4096
#: Rows narrower than this are packed several to a program: a program of 128 elements would spend its time
#: being scheduled, not loading.
MIN_PROGRAM_ELEMENTS = 2048


@dataclass(frozen=True)
class RowLayout:
    """How a row-wise kernel covers rows of ``n`` elements: the block, rows per program, one pass or a loop."""

    block_n: int
    rows: int
    single_pass: bool
    num_warps: int


@triton.jit
def program_rows(M, ROWS: tl.constexpr):
    """The rows program ``program_id(0)`` of a row-wise kernel takes: the first, in 64 bits (past 2**31 rows
    ``program_id * ROWS`` wraps in 32 bits, and the kernel would read and write rows before its tensors), and how
    many of its ``ROWS`` lie within ``M``, in 32. Kernels move their pointers to the first row and keep the per-row
    vectors 32-bit: a 64-bit row vector took softmax over rows of 128 from 61 to 90 registers a thread (ptxas,
    sm_90a), this form to 56."""
    first = tl.program_id(0).to(tl.int64) * ROWS
    return first, tl.minimum(M - first, ROWS).to(tl.int32)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints, for the arithmetic that plans a launch. Not ``triton.cdiv``: from Triton
    3.5 that is a ``constexpr_function``, whose call unwraps its arguments (about 3 µs a call). A launch computes
    its grid as ``-(-m // rows)`` inline: even this function would be a Python frame on every launch."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ≥ ``n`` (0 for 0), as ``triton.next_power_of_2`` without its call cost."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def row_layout(n: int) -> RowLayout:
    """The layout for a row-wise kernel (softmax, the norms) over rows of ``n`` elements."""
    block = next_power_of_2(n)
    if block > MAX_FUSED_BLOCK:
        return RowLayout(block_n=LOOP_BLOCK, rows=1, single_pass=False, num_warps=8)
    rows = max(1, MIN_PROGRAM_ELEMENTS // block)
    return RowLayout(block_n=block, rows=rows, single_pass=True, num_warps=warps_for(rows * block))


def warps_for(elements: int) -> int:
    """Warps for a program touching ``elements`` values: about 8 to 32 values a thread."""
    if elements <= 2048:
        return 4
    if elements <= 8192:
        return 8
    return 16


def interpreting(kernel: Any) -> bool:
    """Whether ``kernel`` (a ``@triton.jit`` object) runs in Triton's interpreter.

    Asked of the kernel object, not of the environment: ``triton.jit`` read ``TRITON_INTERPRET`` once, when it
    decorated the kernel, and that is what the launch will do whatever the variable says now.
    """
    return type(kernel).__name__ == "InterpretedFunction"


def launch_device(kernel: Any) -> str:
    """The device kind a ``@triton.jit`` kernel's launch dereferences: CUDA pointers, or host memory in the
    interpreter. Kernels refuse tensors of the other kind before launching."""
    return "cpu" if interpreting(kernel) else "cuda"


#: An elementwise kernel needs no whole row in one program: the columns are split into blocks of at most this.
MAX_GATE_BLOCK = 4096


def gated_launch(kernel: Any, config: Any, **constexprs: Any) -> Callable[[Any, Any], None]:
    """The launch of a gated activation ``x[M, 2n] -> out[M, n]``, ``kernel(x_ptr, y_ptr, M, x_row_stride,
    y_row_stride, N, BLOCK_N, ROWS, ...)``: both row-strided (views of packed buffers), out written in place.

    Elementwise, so the grid tiles both dimensions: each program takes ``ROWS`` tokens by ``BLOCK_N`` features of
    the gate and of the up projection, and narrow rows are packed so that no program is too small to stream.
    """
    from lazyops._backends.triton._launch import Launcher

    n = config.n
    block_n = min(next_power_of_2(n), MAX_GATE_BLOCK)
    rows = max(1, MIN_PROGRAM_ELEMENTS // block_n)
    launch = Launcher(
        kernel, {"N": n, "BLOCK_N": block_n, "ROWS": rows, **constexprs}, num_warps=warps_for(rows * block_n)
    )

    column_blocks = -(-n // block_n)

    def gated(x: Any, out: Any) -> None:
        m = x.shape[0]
        launch((-(-m // rows), column_blocks), x, out, m, x.stride(0), out.stride(0))

    return gated
