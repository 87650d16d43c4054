"""Laying out one call's tensors as an engine passes them (a :class:`~lazyops.testing.Layout`), and checking
afterwards that the kernel wrote nothing outside the views it was given.

The spec draws each input contiguous and two-dimensional (``[M, width]``); the reference is computed from those.
Here the same values are moved into the layout the case asks for: views of wider (or packed) buffers, leading
dimensions split, a preallocated ``out=`` or the input it may alias. What the kernel returns and updates is then
compared with the reference through a two-dimensional view of it, and the buffers' other elements must be
bit-identical to what they held before the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from lazyops.testing._case import Layout
from lazyops.testing._compare import (
    ConformanceError,
    __tracebackhide__,  # noqa: F401 - the kit's verdicts end at the test
)


@dataclass
class LaidOut:
    """The call's arguments, its ``out=`` (None: the kernel allocates), and the spare columns of each buffer with
    their contents before the call."""

    args: tuple[Any, ...]
    out: torch.Tensor | None
    spares: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def check_untouched(self, what: str) -> None:
        for region, before in self.spares:
            if not torch.equal(region.cpu(), before.cpu()):
                raise ConformanceError(
                    f"{what}: the kernel wrote outside the views it was given (the buffer's spare columns changed)"
                )


def lay_out(spec: Any, config: Any, args: tuple[Any, ...], layout: Layout, draw: Any) -> LaidOut:
    """``args`` (as the spec draws them) laid out as ``layout`` says; see the module's docstring."""
    laid = list(args)
    row_positions = [spec.inputs.index(name) for name in spec.row_inputs]
    tokens = int(laid[row_positions[0]].shape[0]) if row_positions else 0
    spares: list[tuple[torch.Tensor, torch.Tensor]] = []

    def spare_columns(buffer: torch.Tensor, start: int, end: int) -> None:
        for region in (buffer[:, :start], buffer[:, end:]):
            if region.numel():
                spares.append((region, region.clone()))

    if layout.strided and tokens:
        floating = [i for i in row_positions if laid[i].is_floating_point() and laid[i].dim() == 2]
        groups: list[list[int]] = []
        if layout.packed:
            for dtype in dict.fromkeys(laid[i].dtype for i in floating):
                groups.append([i for i in floating if laid[i].dtype == dtype])
        else:
            groups = [[i] for i in floating]
        for group in groups:
            widths = [int(laid[i].shape[1]) for i in group]
            value = widths[-1] if layout.packed else 0  # a packed qkv's value slice, never to be touched
            total = layout.offset + sum(widths) + value + layout.row_pad
            buffer = draw.randn(tokens, total, dtype=laid[group[0]].dtype)
            start = layout.offset
            for index, width in zip(group, widths, strict=True):
                view = buffer[:, start : start + width]
                view.copy_(laid[index])
                laid[index] = view
                start += width
            spare_columns(buffer, layout.offset, start)

    out: torch.Tensor | None = None
    if spec.returns == "out" and layout.out == "given":
        shape = tuple(spec.out_shape(config, *laid))
        dtype = spec.out_dtype(config)
        if layout.strided and tokens:
            width = shape[-1]
            buffer = draw.randn(tokens, layout.offset + width + layout.row_pad, dtype=dtype)
            out = buffer[:, layout.offset : layout.offset + width]
            spare_columns(buffer, layout.offset, layout.offset + width)
        else:
            out = torch.empty(shape, dtype=dtype, device=draw.device)
        out.fill_(float("nan"))  # an element the kernel does not write stays NaN, which the judge refuses

    split = _split(tokens, layout.lead)
    if split > 1:
        for index in row_positions:
            laid[index] = laid[index].view(split, tokens // split, *laid[index].shape[1:])
        if out is not None:
            out = out.view(split, tokens // split, *out.shape[1:])
    if spec.returns == "out" and layout.out == "alias" and spec.out_aliases:
        out = laid[spec.inputs.index(spec.out_aliases[0])]
    return LaidOut(tuple(laid), out, spares)


def _split(tokens: int, lead: int) -> int:
    """The largest ``d <= lead`` that divides ``tokens`` (the first leading dimension)."""
    for d in range(min(lead, tokens), 1, -1):
        if tokens % d == 0:
            return d
    return 1
