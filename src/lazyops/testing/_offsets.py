"""Calls whose rows lie 2**31 elements or more apart: the conformance kit's check of a kernel's 64-bit offsets.

A kernel that computes an offset in 32 bits reads and writes out of bounds once a row stride, or the distance from a
tensor's first element to its last, passes 2**31 elements; on a GPU the process's CUDA context is then lost and
every later call fails with it. Engines make such calls (a row of a wide packed buffer, a view with a huge unused
batch stride), so :func:`check_large_offsets` makes them, in three layouts of one case's tensors:

- ``one row``: a single token whose row stride is :data:`BEYOND_INT32` elements;
- ``unused batch stride``: ``[1, M, width]`` views whose batch stride is :data:`BEYOND_INT32` elements;
- ``rows 2**31 apart``: two tokens whose rows lie :data:`BEYOND_INT32` elements or more apart, every token-indexed
  input and ``out=`` side by side in one buffer of that row pitch per dtype (4 GiB in bfloat16).

The first two take no memory (a size-1 dimension's stride addresses nothing), so they run on every device; the
third only on a CUDA device with :data:`LARGE_MEMORY` bytes free. Each is judged against the float64 reference as
:func:`~lazyops.testing.check_case` judges, and the elements around the views must come back as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lazyops.testing._case import Case
from lazyops.testing._compare import (
    Inputs,
    check_close,
    check_each,
    default_max_elements,
    float64,
    output_scales,
)

#: A row stride past what 32 bits hold: 2**31 and a little, a multiple of 64 elements (kernels that load rows in
#: 16-byte vectors take it as it is, without copying the view; so does TMA).
BEYOND_INT32 = 2**31 + 256
#: Free device memory below which the ``rows 2**31 apart`` layout is skipped: its buffers take up to 8 GiB (a
#: float32 case), and the kernel's own allocations and the reference want room beside them.
LARGE_MEMORY = 16 * 2**30
#: Elements left between views and after the last one in each row, filled and checked for stray writes; views
#: start at multiples of it, so each is as aligned as a fresh allocation's first 64 bytes.
GAP = 64


def check_large_offsets(
    factory: Callable[..., Any],
    case: Case,
    *,
    device: str | None = None,
    pitch: int = BEYOND_INT32,
    rows_apart: bool | None = None,
) -> dict[str, float]:
    """Run ``case``'s kernel (built with ``factory``) on views whose rows or unused dimensions lie ``pitch``
    elements apart, and judge the results against the float64 reference; ``AssertionError`` says which layout
    failed and how. ``rows_apart``: whether to lay rows ``pitch`` apart too (None: where the device has
    :data:`LARGE_MEMORY` free). Returns the worst relative error of each layout checked, by its name."""
    from lazyops.specs import spec as spec_of_kernel
    from lazyops.testing.cases import examples

    spec = spec_of_kernel(case.kernel)
    if spec.judgement == "draws":  # a sampler: its judge (``_draws``) takes strided rows; 2**31 apart is not done
        return {}
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = spec.bind(*case.args, **case.kwargs)
    kernel = case.build(factory)
    # judged with check_case's floors: one row's outputs alone cannot tell their typical size (a dot product of
    # random terms may cancel to 1e-3 of it, where float32's rounding of the terms is all its error)
    scales = output_scales(examples(spec), config, case, default_max_elements(device))
    checked: dict[str, float] = {}
    layouts: list[tuple[str, int, Callable[..., tuple[tuple[Any, ...], Any, list[Any]]]]] = [
        ("one row", 1, _one_row),
        ("unused batch stride", 3, _unused_batch_stride),
    ]
    if _has_room(device) if rows_apart is None else rows_apart:
        layouts.append(("rows 2**31 apart" if pitch >= 2**31 else "rows apart", 2, _rows_apart))
    for name, tokens, lay_out in layouts:
        draw = Inputs(case.seed, device)
        drawn = examples(spec).example_inputs(config, tokens, draw, case.geometry)
        expected = dict(zip(spec.results, spec.reference(config, *map(float64, drawn)), strict=True))
        args, out, guards = lay_out(spec, config, drawn, pitch)
        what = f"{case.kernel}, {name} (stride {pitch})"
        returned = kernel(*args) if out is None else kernel(*args, out=out)
        worst = 0.0
        if spec.returns == "out":
            if returned is not out:  # raised, not asserted: the check must hold under python -O too
                raise AssertionError(f"{what}: given out=, the kernel must return it")
            flat = returned.reshape(expected["out"].shape)
            worst = check_close(
                flat,
                expected["out"],
                spec.out_dtype(config),
                what=what,
                scale=scales["out"],
                tolerance=spec.tolerance(config),
            )
        for result in spec.mutates:
            tensor = args[spec.inputs.index(result)].reshape(expected[result].shape)
            stored = tensor.dtype  # an in-place result is judged in its own dtype (an fp8 cache's is float8)
            check_each(tensor, expected[result], stored, what=f"{what}: {result}", scale=scales[result])
            judged = check_close(tensor, expected[result], stored, what=f"{what}: {result}", scale=scales[result])
            worst = max(worst, judged)
        for region, before in guards:
            if not torch.equal(region.cpu().to(torch.float64), before):
                raise AssertionError(f"{what}: the kernel wrote outside the views it was given")
        checked[name] = worst
    return checked


def _has_room(device: str) -> bool:
    if torch.device(device).type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return free >= LARGE_MEMORY


def _out_rows(spec: Any, config: Any, args: tuple[Any, ...]) -> torch.Tensor | None:
    """A contiguous ``[M, width]`` tensor standing for the ``out=`` a layout places (None: the kernel has none)."""
    if spec.returns != "out":
        return None
    shape = tuple(spec.out_shape(config, *args))
    out: torch.Tensor = args[0].new_empty(shape, dtype=spec.out_dtype(config))
    return out


def _one_row(spec: Any, config: Any, args: tuple[Any, ...], pitch: int) -> tuple[tuple[Any, ...], Any, list[Any]]:
    """Each token-indexed input, and ``out=``, as one row whose stride is ``pitch`` (it addresses nothing)."""
    rows = {spec.inputs.index(name) for name in spec.row_inputs}
    laid = [_strided_single(arg, pitch) if index in rows else arg for index, arg in enumerate(args)]
    out = _out_rows(spec, config, args)
    return tuple(laid), None if out is None else _strided_single(out.fill_(float("nan")), pitch), []


def _strided_single(tensor: torch.Tensor, pitch: int) -> torch.Tensor:
    return tensor.as_strided(tensor.shape, (pitch, *tensor.stride()[1:]))


def _unused_batch_stride(
    spec: Any, config: Any, args: tuple[Any, ...], pitch: int
) -> tuple[tuple[Any, ...], Any, list[Any]]:
    """Each token-indexed input, and ``out=``, as ``[1, M, ...]`` whose batch stride is ``pitch``."""
    rows = {spec.inputs.index(name) for name in spec.row_inputs}
    laid = [_batch_of_one(arg, pitch) if index in rows else arg for index, arg in enumerate(args)]
    out = _out_rows(spec, config, args)
    return tuple(laid), None if out is None else _batch_of_one(out.fill_(float("nan")), pitch), []


def _batch_of_one(tensor: torch.Tensor, pitch: int) -> torch.Tensor:
    return tensor.as_strided((1, *tensor.shape), (pitch, *tensor.stride()))


def _rows_apart(spec: Any, config: Any, args: tuple[Any, ...], pitch: int) -> tuple[tuple[Any, ...], Any, list[Any]]:
    """The two-dimensional floating token-indexed inputs and ``out=`` side by side in one buffer per dtype whose
    rows lie ``pitch`` elements (rounded up past their widths) apart; the elements after each view, in each row,
    filled and remembered."""
    laid = list(args)
    out = _out_rows(spec, config, args)
    placed = [(spec.inputs.index(name), args[spec.inputs.index(name)]) for name in spec.row_inputs]
    placed = [(index, arg) for index, arg in placed if arg.dim() == 2 and arg.is_floating_point()]
    if out is not None:
        placed.append((-1, out.fill_(float("nan"))))
    guards = []
    for dtype in dict.fromkeys(arg.dtype for _, arg in placed):
        group = [(index, arg) for index, arg in placed if arg.dtype == dtype]
        starts, end = [], 0
        for _, arg in group:
            starts.append(end)
            end += -(-(arg.shape[1] + GAP) // GAP) * GAP
        row_pitch = max(pitch, -(-end // GAP) * GAP)
        rows = group[0][1].shape[0]
        buffer = torch.empty((rows - 1) * row_pitch + end, dtype=dtype, device=args[0].device)
        for start, (index, arg) in zip(starts, group, strict=True):
            width = arg.shape[1]
            view = buffer.as_strided(arg.shape, (row_pitch, 1), start)
            view.copy_(arg)
            guard = buffer.as_strided((rows, GAP), (row_pitch, 1), start + width)
            guard.copy_(torch.arange(GAP, device=buffer.device).to(dtype).expand(rows, GAP))
            guards.append((guard, guard.cpu().to(torch.float64)))
            if index == -1:
                out = view
            else:
                laid[index] = view
    return tuple(laid), out, guards
