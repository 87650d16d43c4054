"""Activations quantized to float8 in TileLang (the spec: ``lazyops.specs.quant_fp8``); also ``silu_and_mul_fp8_tl``'s
program (a gated input) and the second launch of the fp8 norms' dynamic scales.

One program serves every granularity. A thread block owns ``rows`` whole row segments (a segment: the row, or one
group of ``group_size`` columns; one segment a block along the grid for each group, the grid one-dimensional): it
reads the segment once into float32 registers (16-byte vectors), takes its absolute maximum (NaN skipped, as CUDA's
``fmaxf`` does) with a block reduction, writes the scale, and stores ``x / scale`` converted once with the
hardware's saturation (``cvt.rn.satfinite``: ±448, NaN kept), as the static fp8 norms store. No clamp is written,
so the stores stay vectors (docs/decisions/007). A segment wider than ``_rows.MAX_RESIDENT`` features is read twice (the
maximum, then the quantized store). Divided, not multiplied by a reciprocal (docs/decisions/013): the quotient is
IEEE-rounded (TileLang does not pass ``--use_fast_math``), as torch's and Triton's.

- ``scales="static"``: ``scale[0]`` read by every launch; no reduction.
- ``scales="tensor"``: two launches (docs/decisions/013). The first takes each block's maximum into a one-element
  int32 buffer by ``atomicMax`` on the float's bits (non-negative floats order as their bits, and an integer
  ``atomicMax`` is one instruction where a float one is a compare-and-swap loop); the second quantizes with it, and
  its first block writes ``scale[0]``. No host read: the pair is captured in a CUDA graph as it is (the buffer is
  zeroed by a ``torch.zeros``, a memset node).
- ``scales="token"``: a scale a row; ``scale_ub`` bounds the maximum first (a variant compiled with it).
- ``scales="group"``: one block a group of ``rows`` rows; the scale's strides are kernel parameters, so a row-major
  ``[M, G]`` and the transpose of a ``[G, M]`` buffer (``column_major``) take the same program. ``ue8m0``: the scale
  rounded up to a power of two by carrying the mantissa into the exponent (exact; no ``log2``).

What a GPU must still confirm (nothing here has run on one; CI lowers the programs for sm_90a,
``tests/kernels/test_tilelang_lowering.py``): the kit's cases on the device (``make gpu-tlfp8``), in particular that
the block reduction skips NaN as lowered, that the ``atomicMax`` pair agrees with Triton's on every case, and the
bandwidth: a block of 128 threads a 128-column group holds one 16-byte vector a thread (narrow groups: more rows a
block keep 128 threads busy), not measured against the copy yet.
"""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T
import torch

from lazyops._backends.tilelang._fp8 import block_scale
from lazyops._backends.tilelang._rows import ITEMSIZE, VECTOR_BYTES, plan_rows, vector_elements
from lazyops._backends.tilelang._runtime import (
    ALIGNMENT,
    F32,
    FP8,
    INDEX,
    compiled,
    direct,
    launch_with_copies,
    refuse_unsupported,
    tl_dtype,
)
from lazyops.specs.quant_fp8 import QuantFP8Config, spec

#: the programs' variants: the per-tensor scale's first launch (``REDUCE``), and the quantizing one
REDUCE, QUANTIZE = "reduce", "quantize"


def silu_product(gate: Any, up: Any) -> Any:
    """``silu(g) * u`` in float32 as ``silu_and_mul_tl``'s program writes it, so fused and unfused agree bit for bit."""
    return gate / (T.float32(1) + T.exp(-gate)) * up


def quant_program(
    n: int,
    dtype: str,
    scales: str,
    group_size: int,
    ue8m0: bool = False,
    gated: bool = False,
    bounded: bool = False,
    variant: str = QUANTIZE,
) -> Any:
    """The program ``main(x[M, W], scale, ub[1], amax[1], y[M, n])`` for a dynamic token count ``M``, ``W`` = ``2n``
    for a gated input (gate, then up) else ``n``.

    ``scale`` is ``[1]`` (static, tensor) or ``[M, G]`` with run-time strides (token: ``G = 1``; group). ``ub``
    (``scale_ub``) is read only when ``bounded``, ``amax`` (int32, the float maximum's bits) only by the per-tensor
    pair: its ``variant=REDUCE`` launch takes the maximum into it and writes nothing else.
    """
    per_segment = scales in ("token", "group")
    width = group_size if scales == "group" else n
    groups = n // width
    plan = plan_rows(width, dtype)
    rows, cols, chunks = plan.block_rows, plan.block_cols, plan.chunks
    x_width = 2 * n if gated else n
    M = T.dynamic("M", INDEX)
    x_stride, y_stride, scale_row, scale_group = T.dynamic("x_stride, y_stride, scale_row, scale_group", INDEX)
    vec = vector_elements(width, dtype)
    scale_shape = (M, groups) if per_segment else (1,)
    scale_strides = (scale_row, scale_group) if per_segment else (1,)

    def value(x: Any, row: Any, col: Any) -> Any:
        """The float32 value quantized at ``(row, col)``: ``x``, or ``silu(gate) * up`` for a gated input."""
        if gated:
            return silu_product(T.cast(x[row, col], F32), T.cast(x[row, n + col], F32))
        return T.cast(x[row, col], F32)

    @T.macro
    def segment_amax(x: T.Tensor, magnitude: T.Tensor, amax: T.Tensor, values: T.Tensor, by: Any, g: Any):
        """Each of the block's rows' NaN-free ``|value|`` maximum over its segment into ``amax``; with one chunk the
        values stay in ``values`` for the store."""
        if chunks == 1:
            for i, j in T.Parallel(rows, cols):
                row = by * rows + i
                values[i, j] = T.if_then_else(row < M and j < width, value(x, row, g * width + j), T.float32(0))
            for i, j in T.Parallel(rows, cols):
                magnitude[i, j] = T.if_then_else(T.isnan(values[i, j]), T.float32(0), T.abs(values[i, j]))
        else:
            T.clear(magnitude)
            for c in T.serial(chunks):
                for i, j in T.Parallel(rows, cols):
                    row = by * rows + i
                    col = c * cols + j
                    current = T.if_then_else(row < M and col < width, value(x, row, g * width + col), T.float32(0))
                    magnitude[i, j] = T.max(
                        magnitude[i, j], T.if_then_else(T.isnan(current), T.float32(0), T.abs(current))
                    )
        T.reduce_max(magnitude, amax, dim=1)

    @T.macro
    def store(x: T.Tensor, y: T.Tensor, values: T.Tensor, factor: T.Tensor, by: Any, g: Any):
        if chunks == 1 and per_segment:
            for i, j in T.Parallel(rows, cols):
                row = by * rows + i
                if row < M and j < width:
                    y[row, g * width + j] = T.cast(values[i, j] / factor[i], FP8)
        else:
            for c in T.serial(chunks):
                for i, j in T.Parallel(rows, cols):
                    row = by * rows + i
                    col = c * cols + j
                    if row < M and col < width:
                        y[row, g * width + col] = T.cast(value(x, row, g * width + col) / factor[i], FP8)

    @T.prim_func
    def main(
        x: T.StridedTensor((M, x_width), (x_stride, 1), dtype),
        scale: T.StridedTensor(scale_shape, scale_strides, F32),
        ub: T.Tensor((1,), F32),
        amax_bits: T.Tensor((1,), "int32"),
        y: T.StridedTensor((M, n), (y_stride, 1), FP8),
    ):
        T.assume(x_stride % vec == 0)
        T.assume(y_stride % vec == 0)
        with T.Kernel(T.ceildiv(M, rows) * groups, threads=plan.threads) as block:
            by = block // groups
            g = block % groups
            values = T.alloc_fragment((rows, cols), F32)
            magnitude = T.alloc_fragment((rows, cols), F32)
            factor = T.alloc_fragment((rows,), F32)
            if scales == "static":
                for i in T.Parallel(rows):
                    factor[i] = scale[0]
            elif scales == "tensor" and variant == QUANTIZE:
                for i in T.Parallel(rows):
                    factor[i] = block_scale(T.reinterpret(amax_bits[0], F32), False)
                if block == 0:
                    scale[0] = block_scale(T.reinterpret(amax_bits[0], F32), False)
            else:
                segment_amax(x, magnitude, factor, values, by, g)
                if variant == REDUCE:
                    for i in T.Parallel(rows):
                        if by * rows + i < M:
                            T.atomic_max(amax_bits[0], T.reinterpret(factor[i], "int32"))
                else:
                    for i in T.Parallel(rows):
                        amax = T.min(factor[i], ub[0]) if bounded else factor[i]
                        factor[i] = block_scale(amax, ue8m0)
                        if by * rows + i < M:
                            scale[by * rows + i, g] = factor[i]
            if variant == QUANTIZE:
                store(x, y, values, factor, by, g)

    return main


def unsupported(config: QuantFP8Config) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does). A group narrower than a 16-byte vector of
    ``x`` (fewer than 8 half-precision or 4 float32 columns) would need scalar loads and a block of mostly idle
    lanes; Triton and torch serve it."""
    if config.scales == "group" and config.group_size < VECTOR_BYTES // ITEMSIZE[tl_dtype(config.dtype)]:
        return f"group_size={config.group_size} is narrower than a 16-byte vector of {config.dtype}"
    return None


def programs(config: QuantFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant: the quantizing program, with ``scale_ub``
    (per token), and the per-tensor scale's first launch."""
    refuse_unsupported(spec.name if not config.gated else "silu_and_mul_fp8_tl", config, unsupported(config))
    dtype = tl_dtype(config.dtype)
    args = (config.n, dtype, config.scales, config.group_size, config.ue8m0, config.gated)
    built: dict[str, Callable[[], Any]] = {"main": lambda: quant_program(*args)}
    if config.scales == "token":
        built["bounded"] = lambda: quant_program(*args, bounded=True)
    if config.scales == "tensor":
        built[REDUCE] = lambda: quant_program(*args, variant=REDUCE)
    return built


def row_multiple(config: QuantFP8Config) -> int:
    """The row-stride multiple the programs assume of ``x`` and ``y`` (16-byte vectors of a segment)."""
    width = config.group_size if config.scales == "group" else config.n
    return vector_elements(width, tl_dtype(config.dtype))


def quant_launch(config: QuantFP8Config, kernels: dict[str, Any] | None = None) -> Callable[..., None]:
    """``launch(x, scale, scale_ub, out)`` of the compiled programs for ``config`` (``quant_fp8_tl``'s and
    ``silu_and_mul_fp8_tl``'s; the fp8 norms' second launch, whose factory compiled them as ``kernels``, by the
    variants :func:`programs` names)."""
    kernels = kernels if kernels is not None else compiled(config.label, programs(config))
    built = {variant: direct(kernel) for variant, kernel in kernels.items()}
    main, bounded, reduce = built["main"], built.get("bounded"), built.get(REDUCE)
    multiple = row_multiple(config)
    multiples = (multiple, 1, 1, 1, multiple)
    # The one-element buffer a program reads only in another variant (``ub`` unbounded, ``amax`` outside the
    # per-tensor pair), one a device, never written: a CUDA graph may keep it.
    placeholders: dict[torch.device, torch.Tensor] = {}

    def run(kernel: Any, args: tuple[torch.Tensor, ...]) -> None:
        for arg, need in zip(args, multiples, strict=True):
            if arg.data_ptr() % ALIGNMENT or (need != 1 and arg.dim() > 1 and arg.stride(0) % need):
                launch_with_copies(kernel, args, (1, 4), multiples)
                return
        kernel(*args)

    def launch(x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None, out: torch.Tensor) -> None:
        if not x.shape[0]:
            return
        unused = placeholders.get(x.device)
        if unused is None:
            unused = placeholders[x.device] = torch.zeros(1, dtype=torch.int32, device=x.device)
        amax, ub = unused, unused.view(torch.float32)
        if reduce is not None:
            amax = torch.zeros(1, dtype=torch.int32, device=x.device)
            run(reduce, (x, scale, ub, amax, out))
        if bounded is not None and scale_ub is not None and scale_ub.numel():
            ub = scale_ub
            kernel = bounded
        else:
            kernel = main
        run(kernel, (x, scale, ub, amax, out))

    return launch


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def quant_fp8_tl(config: QuantFP8Config) -> Callable[..., None]:
    return quant_launch(config)  # launch(x, scale, scale_ub, out)
