"""Argument checks shared by every backend's factories and kernels.

A kernel checks its inputs before it launches anything: a wrong shape that reaches a GPU kernel reads or
writes out of bounds, and the symptom (garbage, or an illegal-address error on a later, unrelated launch)
points nowhere near the cause. Every message names the kernel with its static configuration, the argument,
what was found and what was expected, so the fix is obvious from the message alone.

The checks of a whole call are derived from its spec's declared parameters (``_params``): :func:`check_call`,
:func:`check_out` and :func:`check_aliasing` take the spec first (``check_call(spec, config, *args)``), as
:func:`empty_output` does, the output a checked call allocates. The engine (``_engine``) imports this module with
the first call that takes the full checks: a call its fast path recognises never loads it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeAlias

from lazyops._errors import KernelInputError
from lazyops.specs._params import (
    TOKENS,
    Fixed,
    FromTokens,
    Rows,
    Tensor,
    declared_size,
    dtype_of,
    layout_of,
    resolved,
    rows_like,
    shape_of,
    size_of,
    token_indexed,
)

if TYPE_CHECKING:
    import torch

#: A kernel's spec (``lazyops.specs._spec.KernelSpec``), which the engine that imports this module serves: it is not
#: imported here, not even for its type, so that the spec layer has no circle (``tests/core/test_house_limits.py``).
KernelSpec: TypeAlias = Any


def check_tensor(
    kernel: str,
    arg: str,
    tensor: Any,
    *,
    shape: tuple[int | str, ...],
    dtype: torch.dtype | tuple[torch.dtype, ...],
    device: torch.device | None = None,
) -> None:
    """Check one tensor argument of a kernel call that is not indexed by token: a weight, a cache, positions.

    ``shape`` holds ints for sizes fixed by the factory and strings for sizes that may vary; a string that
    repeats across arguments must be checked by the caller (see :func:`same_size`). The tensor must be contiguous:
    the kernels index it densely. Token-indexed tensors (activations) take :func:`check_rows` instead.

    On the hot path of every kernel call: the accepting path is a handful of attribute reads and comparisons,
    and everything that formats a message runs only once a check has failed.
    """
    check_kind(kernel, arg, tensor, dtype, device)
    sizes = tensor.shape
    if sizes != shape:  # one comparison when every size is fixed (a weight), the loop only for varying sizes
        if len(sizes) != len(shape):
            _wrong_shape(kernel, arg, sizes, shape)
        for got, want in zip(sizes, shape, strict=True):
            if got != want and type(want) is int:
                _wrong_shape(kernel, arg, sizes, shape)
    if not tensor.is_contiguous():
        raise KernelInputError(
            f"{kernel}: {arg} is not contiguous (strides {tensor.stride()}); pass {arg}.contiguous()"
        )


def check_rows(
    kernel: str,
    arg: str,
    tensor: Any,
    *,
    width: int | None,
    dtype: torch.dtype | tuple[torch.dtype, ...],
    device: torch.device | None = None,
    lead: int | None = None,
) -> None:
    """Check a token-indexed tensor ``[..., width]``: rows of ``width`` features under any leading dimensions.

    What engines pass: a ``[M, n]`` activation, a ``[batch, heads, head_dim]`` one (per-head QK-norm), or a
    view sliced out of a packed buffer (``qkv[:, :q_size]``), whose rows are strided. The last dimension must be
    contiguous and the leading ones must collapse into one row index with one row stride (so that the tensor is
    ``[rows, width]`` without a copy); rows must not overlap. ``width=None`` leaves the width to the caller;
    ``lead`` fixes the number of leading dimensions (rope's query follows its positions').
    """
    check_kind(kernel, arg, tensor, dtype, device)
    sizes = tensor.shape
    if len(sizes) < 2 or (lead is not None and len(sizes) != lead + 1):
        want = "[..., " if lead is None else "[" + "T, " * lead
        raise KernelInputError(
            f"{kernel}: {arg} has shape {tuple(sizes)}; expected {want}{width if width is not None else 'n'}] "
            "(leading token dimensions, then the features)"
        )
    if width is not None and sizes[-1] != width:
        raise KernelInputError(
            f"{kernel}: {arg} has shape {tuple(sizes)}; its last dimension must be {width} (the factory's width)"
        )
    if tensor.is_contiguous() and 0 not in sizes:
        return  # dense rows, one width apart: the common case, without reading the strides (a tuple per call)
    if row_stride(sizes, tensor.stride()) is None:
        raise KernelInputError(
            f"{kernel}: {arg} of shape {tuple(sizes)} has strides {tensor.stride()}: the kernels take rows whose "
            "features are contiguous (last stride 1), leading dimensions that collapse into one row stride, and "
            f"rows that do not overlap; pass {arg}.contiguous()"
        )


def check_head_rows(
    kernel: str,
    arg: str,
    tensor: Any,
    *,
    width: int | None,
    head: int,
    head_name: str,
    dtype: torch.dtype | tuple[torch.dtype, ...],
    device: torch.device | None,
    lead: int,
) -> int:
    """A token-indexed tensor of heads of ``head`` features: rows ``[*T, width]`` (:func:`check_rows`; ``width=None``:
    any number of heads), or the heads as a dimension of their own, ``[*T, H, head]``, where it has ``lead + 2``
    dimensions (``lead``: how many token dimensions the call's token-indexed inputs have), the heads of a token
    contiguous and tokens one row stride apart. Returns how many of its trailing dimensions are features (2 or 1)."""
    shape: Any = getattr(tensor, "shape", ())
    if len(shape) == lead + 2 and (width is None or (shape[-1] == head and shape[-2] * head == width)):
        check_kind(kernel, arg, tensor, dtype, device)
        if shape[-1] != head:
            raise KernelInputError(
                f"{kernel}: {arg} has shape {tuple(shape)}; a [*T, H, {head_name}] {arg} has {head_name}={head} last"
            )
        heads, (head_step, feature_step) = shape[-2], tensor.stride()[-2:]
        if (
            (head > 1 and feature_step != 1)
            or (heads > 1 and head_step != head)
            or row_stride((*shape[:-2], heads * head), (*tensor.stride()[:-2], 1)) is None
        ):
            raise KernelInputError(
                f"{kernel}: {arg} of shape {tuple(shape)} has strides {tensor.stride()}: the heads of a token must be "
                f"contiguous (stride {head} between heads) and tokens one row stride apart; pass {arg}.contiguous()"
            )
        return 2
    check_rows(kernel, arg, tensor, width=width, dtype=dtype, device=device)
    if width is None and tensor.shape[-1] % head:
        raise KernelInputError(
            f"{kernel}: {arg} has {tensor.shape[-1]} features per token, not a multiple of {head_name}={head}"
        )
    return 1


#: A declared size as :func:`check_shaped` takes it: an int, a ``range`` of the sizes allowed, None (any size), or a
#: ``(symbol, offset)`` the call binds.
Declared = int | range | tuple[str, int] | None
#: The sizes a call has bound: ``{symbol: (size, the tensor that bound it, its shape)}``.
Bound = dict[str, tuple[int, str, tuple[int, ...]]]


def check_shaped(
    kernel: str,
    arg: str,
    tensor: Any,
    *,
    shape: tuple[Declared, ...],
    dtype: torch.dtype | tuple[torch.dtype, ...],
    device: torch.device | None,
    layout: str | tuple[str, ...],
    bound: Bound,
    fixed: bool,
) -> None:
    """A tensor of a declared shape (``_params.Tensor``): each size as declared, a symbol bound by the first tensor
    that has it (recorded in ``bound``) and equal in every other, the layout ``"dense"`` (contiguous), ``"rows"``
    (the last dimension contiguous) or ``"columns"`` (2-D, its transpose contiguous), or a tuple of those taken.
    ``fixed``: a dtype no factory argument changes (:func:`check_kind`)."""
    check_kind(kernel, arg, tensor, dtype, device, fixed=fixed)
    sizes = tensor.shape
    if len(sizes) != len(shape):
        _wrong_declared(kernel, arg, sizes, shape, dtype, bound)
    for position, (got, want) in enumerate(zip(sizes, shape, strict=True)):
        if want is None or got == want:
            continue
        if isinstance(want, tuple):
            symbol, offset = want
            if symbol not in bound:
                bound[symbol] = (got - offset, arg, tuple(sizes))
                continue
            value, binder, binder_sizes = bound[symbol]
            if got != value + offset:
                meaning = " (T: the call's token count)" if symbol == "T" else ""
                raise KernelInputError(
                    f"{kernel}: {arg} has shape {tuple(sizes)} and {binder} {binder_sizes}: {_declared_text(want)} is "
                    f"{got} in {arg} and {value + offset} in {binder}{meaning}; they must agree"
                )
        elif isinstance(want, range):  # by arithmetic: a size under torch.compile is symbolic, not an int
            if not (want.start <= got < want.stop and (got - want.start) % want.step == 0):
                raise KernelInputError(
                    f"{kernel}: {arg} has shape {tuple(sizes)}; its dimension {position} must be one of "
                    f"{_declared_text(want)}"
                )
        else:
            _wrong_declared(kernel, arg, sizes, shape, dtype, bound)
    layouts = layout if isinstance(layout, tuple) else (layout,)
    if any(_laid_out(tensor, sizes, each) for each in layouts):
        return
    if layouts == ("rows",):
        raise KernelInputError(
            f"{kernel}: {arg} of shape {tuple(sizes)} has strides {tensor.stride()}: its last dimension must be "
            f"contiguous; pass {arg}.contiguous()"
        )
    if layouts == ("columns",):
        raise KernelInputError(
            f"{kernel}: {arg} must be column-major (the transpose of a dense [{', '.join(map(str, sizes[::-1]))}] "
            f"tensor); its strides are {tensor.stride()}: pass {arg}.t().contiguous().t()"
        )
    if "columns" in layouts:
        raise KernelInputError(
            f"{kernel}: {arg} must be dense, row-major or column-major (the transpose of a dense tensor); its strides "
            f"are {tensor.stride()}: pass {arg}.contiguous()"
        )
    raise KernelInputError(f"{kernel}: {arg} is not contiguous (strides {tensor.stride()}); pass {arg}.contiguous()")


def _laid_out(tensor: Any, sizes: Any, layout: str) -> bool:
    """Whether ``tensor`` (of ``sizes``) is laid out as ``layout`` says (:func:`check_shaped`)."""
    if layout == "dense":
        return bool(tensor.is_contiguous())
    if layout == "rows":
        return bool(not sizes or sizes[-1] <= 1 or tensor.stride(-1) == 1)
    rows, columns = sizes  # "columns": a [rows, columns] view of a dense [columns, rows] tensor
    row_step, column_step = tensor.stride()
    return bool((rows <= 1 or row_step == 1) and (columns <= 1 or column_step == rows))


def _wrong_declared(kernel: str, arg: str, sizes: Any, shape: tuple[Declared, ...], dtype: Any, bound: Bound) -> None:
    """Refuse a declared tensor of the wrong shape, saying the shape this call needs (its symbols as bound)."""
    declared = tuple(map(_declared_text, shape))
    resolved = tuple(
        str(bound[size[0]][0] + size[1]) if isinstance(size, tuple) and size[0] in bound else text
        for size, text in zip(shape, declared, strict=True)
    )
    tokens = "; T: the call's token count" if any(isinstance(size, tuple) and size[0] == "T" for size in shape) else ""
    note = f" ({', '.join(declared)}{tokens})" if resolved != declared else ""
    dtypes = " or ".join(str(each).removeprefix("torch.") for each in (dtype if isinstance(dtype, tuple) else (dtype,)))
    raise KernelInputError(
        f"{kernel}: {arg} must be a {dtypes} tensor of shape ({', '.join(resolved)}{',' * (len(shape) == 1)}){note}, "
        f"got {tuple(sizes)}"
    )


def _declared_text(size: Declared) -> str:
    if size is None:
        return "any"
    if isinstance(size, tuple):
        return size[0] + (f"+{size[1]}" if size[1] else "")
    if isinstance(size, range):
        shown = [str(each) for each in size[:2]]
        return ", ".join([*shown, "...", str(size[-1])] if len(size) > 3 else [str(each) for each in size])
    return str(size)


def reads_values(tensor: Any, validate: bool) -> bool:
    """Whether a call's index values are read (``KernelSpec.check_values``): on the host always (reading them there
    costs nothing), elsewhere when the factory was given ``validate=True`` (the read synchronises the device, which an
    engine's decode step must not do, nor a CUDA graph's capture); never for tensors without values (meta, the fake
    tensors ``torch.compile`` traces with)."""
    if tensor.is_meta or _is_fake(tensor):
        return False
    return tensor.device.type == "cpu" or validate


def row_stride(sizes: Any, strides: Any) -> int | None:
    """The element stride between consecutive rows of a ``[..., width]`` layout, or None when it has none.

    Size-1 dimensions say nothing about layout and are skipped; with no row dimension left the answer is the
    width (one row, or none).
    """
    width = sizes[-1]
    if width > 1 and strides[-1] != 1:
        return None
    if len(sizes) == 2:  # the common case, without the loop
        rows, row_step = sizes[0], strides[0]
        if rows == 1:
            return int(width)
        return row_step if row_step >= width else None
    stride = None
    expected = None
    for size, step in zip(reversed(sizes[:-1]), reversed(strides[:-1]), strict=True):
        if size == 1:
            continue
        if stride is None:
            stride = expected = step
        if step != expected:
            return None
        expected = step * size
    if stride is None:
        return int(width)
    return stride if stride >= width else None


def rows_of(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor[..., w]`` as the ``[rows, w]`` view a launch indexes (itself when already 2-D)."""
    if tensor.dim() == 2:
        return tensor
    return tensor.view(-1, tensor.shape[-1])


def check_kind(
    kernel: str,
    arg: str,
    tensor: Any,
    dtype: torch.dtype | tuple[torch.dtype, ...],
    device: torch.device | None,
    *,
    fixed: bool = False,
) -> None:
    """A tensor of ``dtype`` on ``device``. ``fixed``: a dtype no factory argument changes (a scale's float32); an
    integer dtype (index tensors: block tables, lengths, slots) is always one. The way out named for a wrong dtype is
    then ``arg.to(dtype)``, else another kernel built for it."""
    if not isinstance(tensor, _TENSOR or tensor_type()):
        raise KernelInputError(f"{kernel}: {arg} must be a torch.Tensor, got {type(tensor).__name__}")
    found = tensor.dtype
    if found is not dtype and (type(dtype) is not tuple or found not in dtype):
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        if fixed or not any(each.is_floating_point for each in allowed):
            hint = f"whatever the factory's arguments: pass {arg}.to({allowed[0]})"
        else:
            hint = "build another kernel with the factory for another dtype"
        raise KernelInputError(f"{kernel}: {arg} has dtype {found}; expected {' or '.join(map(str, allowed))} ({hint})")
    if device is not None and tensor.device != device:
        raise KernelInputError(
            f"{kernel}: {arg} is on {tensor.device}; expected {device}, where the other arguments are"
        )


def same_leading(kernel: str, first: str, tensor: Any, other: str, tensor_other: Any) -> None:
    """Two token-indexed tensors agree on their leading (token) dimensions."""
    sizes, other_sizes = tensor.shape, tensor_other.shape
    if len(sizes) == 2 and len(other_sizes) == 2 and sizes[0] == other_sizes[0]:
        return  # the common case, without slicing two sizes
    if sizes[:-1] != other_sizes[:-1]:
        raise KernelInputError(
            f"{kernel}: {first} has shape {tuple(tensor.shape)} and {other} {tuple(tensor_other.shape)}; their "
            "leading (token) dimensions must be equal"
        )


def span(tensor: torch.Tensor) -> tuple[int, int]:
    """The byte range ``[start, end)`` a tensor's elements lie in."""
    start = tensor.data_ptr()
    if tensor.is_contiguous():  # dense: the bytes it holds, without reading sizes and strides
        return start, start + tensor.nbytes
    sizes = tensor.shape
    if len(sizes) == 2:  # the common case, without the loop (this runs on every call of an in-place kernel)
        rows, width = sizes
        if not rows or not width:
            return start, start
        row_step, step = tensor.stride()
        return start, start + ((rows - 1) * row_step + (width - 1) * step + 1) * tensor.element_size()
    if 0 in sizes:
        return start, start
    last = 0
    for size, step in zip(sizes, tensor.stride(), strict=True):
        last += (size - 1) * step
    return start, start + (last + 1) * tensor.element_size()


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` are the same elements in the same order (one tensor passed twice, or two equal views)."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` share an element. Exact for row-strided views with one row stride (the slices of a
    packed ``qkv`` buffer do not overlap although their byte ranges interleave); otherwise by byte range, which
    may refuse two interleaved views that do not in fact share an element.

    Tensors without memory (meta tensors, the fake tensors ``torch.compile`` traces with) share none: their
    aliasing is the compiler's to track, from the operator's schema.
    """
    if _is_fake(a) or _is_fake(b):  # asked first: a fake tensor's data_ptr() warns (or raises) in the user's run
        return False
    try:
        a_start, a_end = span(a)
        b_start, b_end = span(b)
    except (RuntimeError, NotImplementedError):  # another tensor without a data pointer
        return False
    if a_end <= b_start or b_end <= a_start or a_start == a_end or b_start == b_end:
        return False  # the common case decided on two byte ranges, before asking what kind of tensors these are
    if a.is_meta or b.is_meta:
        return False
    size = a.element_size()
    if size != b.element_size():
        return True
    if a.dim() == 2 and b.dim() == 2:  # the packed-qkv case, on every call: no general layout analysis
        (a_step, a_unit), (b_step, b_unit) = a.stride(), b.stride()
        if a_step == b_step and a_unit == 1 and b_unit == 1 and a_step >= a.shape[1] and b_step >= b.shape[1]:
            period = a_step * size
            return _arcs_intersect(a_start % period, a.shape[1] * size, b_start % period, b.shape[1] * size, period)
    a_rows, b_rows = _row_form(a), _row_form(b)
    if a_rows is None or b_rows is None or a_rows[0] != b_rows[0]:
        return True
    # Same row stride S: within the period of S elements, a row of each covers an arc; they share an element iff
    # the arcs intersect.
    period = a_rows[0] * size
    return _arcs_intersect(a_start % period, a_rows[1] * size, b_start % period, b_rows[1] * size, period)


_FAKE_TENSOR: Any = None


def _is_fake(tensor: torch.Tensor) -> bool:
    """A tensor ``torch.compile`` traces with: it has no memory of its own to compare."""
    global _FAKE_TENSOR
    if type(tensor) is tensor_type():
        return False
    if _FAKE_TENSOR is None:
        from torch._subclasses.fake_tensor import FakeTensor

        _FAKE_TENSOR = FakeTensor
    return isinstance(tensor, _FAKE_TENSOR)


def _row_form(tensor: torch.Tensor) -> tuple[int, int] | None:
    """``(row stride, row width)`` in elements when ``tensor`` is rows of contiguous elements one stride apart (its
    trailing dimensions dense, the leading ones collapsing into one row index), else None."""
    sizes, strides = tensor.shape, tensor.stride()
    width, split = 1, len(sizes)
    while split > 0 and (sizes[split - 1] == 1 or strides[split - 1] == width):
        width *= sizes[split - 1]
        split -= 1
    if split == 0:
        return None  # one dense block: the byte range was exact
    stride = row_stride((*sizes[:split], width), (*strides[:split], 1))
    return None if stride is None else (stride, width)


def _arcs_intersect(a: int, a_len: int, b: int, b_len: int, period: int) -> bool:
    d = (b - a) % period
    return d < a_len or (period - d) < b_len


def _wrong_shape(kernel: str, arg: str, sizes: Any, shape: tuple[int | str, ...]) -> None:
    raise KernelInputError(f"{kernel}: {arg} has shape {tuple(sizes)}; expected ({', '.join(map(str, shape))})")


_TENSOR: Any = None


def tensor_type() -> Any:
    """``torch.Tensor``, imported on first need (this module is imported before torch may be)."""
    global _TENSOR
    if _TENSOR is None:
        import torch

        _TENSOR = torch.Tensor
    return _TENSOR


# -- a spec's call, checked: the full checks of ``KernelSpec``'s declarations, which every call the fast path does not
# -- recognise passes before anything is written (``_engine.checked_route``; the custom operator's fake, ``_ops``)
def check_call(spec: KernelSpec, config: Any, *args: Any) -> None:
    """Refuse a call ``spec``'s kernel cannot serve, before anything is written (``KernelInputError``): each declared
    parameter's kind, dtype, device, shape and layout, the sizes the call binds agreeing, the token-indexed
    inputs' leading dimensions equal; then, where they are read, the index values (``KernelSpec.check_values``)."""
    label = config.label
    params, keywords = spec.params, spec.keywords
    if len(args) != len(params):
        named = "".join(f", {name}=" for name in keywords)
        raise KernelInputError(
            f"{label}: takes {len(params) - len(keywords)} tensors "
            f"({', '.join(spec.inputs[: len(params) - len(keywords)])}){named}; got {len(args)}"
        )
    device = None
    leading = first = None
    bound: Bound = {}
    for param, arg in zip(params, args, strict=True):
        name = param.name
        if isinstance(param, Fixed):
            shape = tuple(size_of(size, config) for size in param.shape)
            check_tensor(label, name, arg, shape=shape, dtype=dtype_of(param.dtype, config), device=device)
        elif isinstance(param, Tensor) and param.keyword and not _given(label, config, param, arg, args, spec):
            continue
        elif isinstance(param, Tensor) and not token_indexed(param):
            _check_declared(label, config, resolved(param, config), arg, device, bound)
        else:  # token-indexed: rows, or a tensor whose shape starts with "*T"
            if isinstance(param, Rows) and param.head is None:  # (rows, as most kernels take: one frame less)
                width, dtype = size_of(param.width, config), dtype_of(param.dtype, config)
                check_rows(label, name, arg, width=width, dtype=dtype, device=device)
                features = 1
            else:
                lead = 1 if leading is None else len(leading)
                features = _check_tokens(label, config, param, arg, device, lead, bound)
            token_dims = arg.shape[: arg.dim() - features]
            if leading is None:
                leading, first = token_dims, name
                bound[TOKENS] = (math.prod(token_dims), name, tuple(arg.shape))
            elif token_dims != leading:
                raise KernelInputError(
                    f"{label}: {first} has leading (token) dimensions {tuple(leading)} and {name} "
                    f"{tuple(token_dims)}; they must be equal"
                )
        if device is None:
            device = arg.device
    if spec.value_checks and reads_values(args[0], getattr(config, "validate", False)):
        spec.check_values(config, *args)


def check_out(spec: KernelSpec, config: Any, out: Any, *args: Any) -> None:
    """Refuse an ``out=`` ``spec``'s kernel cannot write: its shape, dtype, device and layout (as the input it is
    shaped like, heads and all; one value a row: dense, of its exact shape), and any overlap with an input other than
    an exact alias the math allows (``KernelSpec.out_aliases``)."""
    label = config.label
    expected = spec.out_shape(config, *args)
    dtype, device = spec.out_dtype(config), args[0].device
    like = rows_like(spec.out, spec.params)
    if one_a_row(spec, config):
        check_tensor(label, "out", out, shape=tuple(expected), dtype=dtype)
    elif like is not None and like.head is not None:
        width = None if like.width is None else size_of(like.width, config)
        head = size_of(like.head, config)
        check_head_rows(label, "out", out, width=width, head=head, head_name="head", dtype=dtype, device=device, lead=1)
    else:
        check_rows(label, "out", out, width=None, dtype=dtype, device=device)
    if tuple(out.shape) != tuple(expected):
        raise KernelInputError(
            f"{label}: out has shape {tuple(out.shape)}; this call writes {tuple(expected)} (pass out=None to "
            "have the kernel allocate it)"
        )
    aliases = spec.out_aliases
    for name, arg in zip(spec.inputs, args, strict=True):
        if arg is not None and overlap(out, arg):  # (an empty tensor overlaps nothing)
            if name in aliases and same_view(out, arg):
                continue
            allowed = f"; it may be {name} itself" if name in aliases else ""
            raise KernelInputError(
                f"{label}: out overlaps {name} in memory{allowed}; the kernel would read what it has already "
                "written: pass a separate buffer"
            )


def one_a_row(spec: KernelSpec, config: Any) -> bool:
    """Whether ``spec``'s kernel returns one value a row (a sampler's token ids, ``Out`` with neither ``like`` nor a
    width): ``[*T]``, under the first token-indexed input's leading dimensions."""
    out = spec.out
    return out is not None and out.like is None and spec.out_width(config) is None


def empty_output(spec: KernelSpec, config: Any, *args: Any) -> torch.Tensor:
    """An empty (contiguous) tensor shaped, typed and placed as ``spec``'s kernel's returned one
    (``KernelSpec.out_shape``, ``KernelSpec.out_dtype``)."""
    empty: torch.Tensor = args[0].new_empty(spec.out_shape(config, *args), dtype=spec.out_dtype(config))
    return empty


def check_aliasing(spec: KernelSpec, config: Any, *args: Any) -> None:
    """Refuse a call whose in-place inputs share memory with another input (rope's query and key are two slices
    of one packed buffer: distinct columns of it are fine, the same elements are not), whatever either's dtype:
    a ``view(dtype)`` of an input is the same memory, and writing it changes what the other reads. A keyword
    tensor left out (None, or empty) shares nothing; an input this configuration only reads
    (``KernelSpec.written``) is compared as any other."""
    for written, other in aliasing_pairs(spec, config):
        if args[other] is not None and args[written] is not None and overlap(args[written], args[other]):
            inputs = spec.inputs
            raise KernelInputError(
                f"{config.label}: {inputs[written]} overlaps {inputs[other]} in memory; {inputs[written]} is "
                "written in place, so they must not share elements (not through a view of another dtype "
                "either): pass separate tensors"
            )


def aliasing_pairs(spec: KernelSpec, config: Any = None) -> tuple[tuple[int, int], ...]:
    """The (written input, other input) positions :func:`check_aliasing` compares, each pair once: those
    ``KernelSpec.written`` names under ``config`` (None: every input the kernel may write)."""
    inputs = spec.inputs
    mutates = spec.mutates if config is None else spec.written(config)
    return tuple(
        (inputs.index(written), other)
        for position, written in enumerate(mutates)
        for other, name in enumerate(inputs)
        if name != written and name not in mutates[:position]
    )


def _fixed(dtype: Any) -> bool:
    """A dtype no factory argument changes (none named by a configuration field): :func:`check_kind`'s hint."""
    return not any(isinstance(each, str) for each in (dtype if isinstance(dtype, tuple) else (dtype,)))


def _left_out(config: Any, param: Tensor, arg: Any) -> bool:
    """Whether the keyword tensor ``param`` is left out: None, or an empty tensor of its dtype."""
    if arg is None:
        return True
    dtype = dtype_of(param.dtype, config)
    return (
        isinstance(arg, tensor_type())
        and not arg.numel()
        and arg.dtype in (dtype if isinstance(dtype, tuple) else (dtype,))
    )


def _given(label: str, config: Any, param: Tensor, arg: Any, args: tuple[Any, ...], spec: KernelSpec) -> bool:
    """Whether the keyword tensor ``param`` is given (neither None nor an empty tensor of its dtype); refuses one the
    configuration needs and the call left out, or one it must not have (``Tensor.present``), or one given without
    the tensor it goes with (``Tensor.together``)."""
    left_out = _left_out(config, param, arg)
    needed = None if param.present is None else param.present(config)
    if left_out and needed:
        raise KernelInputError(f"{label}: {param.name} is {'None' if arg is None else 'empty'}; {param.why}")
    if not left_out and needed is False:
        raise KernelInputError(f"{label}: {param.name} is given; {param.why}: pass {param.name}=None")
    if param.together:
        partner = spec.params[spec.inputs.index(param.together)]
        partner_left_out = _left_out(config, partner, args[spec.inputs.index(param.together)])
        if left_out != partner_left_out:
            absent = param.name if left_out else param.together
            raise KernelInputError(
                f"{label}: {param.name} and {param.together} go together; {absent} is absent: pass both or neither"
            )
    return not left_out


def _check_declared(
    label: str, config: Any, param: Tensor, arg: Any, device: Any, bound: Bound, tokens: int = 0
) -> None:
    """:func:`check_shaped` of a :class:`Tensor` (``tokens``: the leading dimensions its ``"*T"`` stands for)."""
    sizes: tuple[Declared, ...] = (None,) * tokens + tuple(
        size.size(config, bound[TOKENS][0]) if isinstance(size, FromTokens) else declared_size(size, config)
        for size in shape_of(param)[1 if tokens else 0 :]
    )
    dtype, fixed = dtype_of(param.dtype, config), _fixed(param.dtype)
    check_shaped(
        label,
        param.name,
        arg,
        shape=sizes,
        dtype=dtype,
        device=device,
        layout=layout_of(param),
        bound=bound,
        fixed=fixed,
    )


def _check_tokens(label: str, config: Any, param: Rows | Tensor, arg: Any, device: Any, lead: int, bound: Bound) -> int:
    """Check a token-indexed input of heads, or a ``"*T"`` tensor, given ``lead`` token dimensions (those of the call's
    first token-indexed input; 1 for the first); returns how many of its trailing dimensions are not tokens."""
    if isinstance(param, Tensor):  # ``("*T", ...)``: any leading dimensions (at least one), then its own sizes
        rest = len(shape_of(param)) - 1
        _check_declared(label, config, param, arg, device, bound, max(1, len(getattr(arg, "shape", ())) - rest))
        return rest
    return check_head_rows(
        label,
        param.name,
        arg,
        width=None if param.width is None else size_of(param.width, config),
        head=size_of(param.head, config),
        head_name=param.head if isinstance(param.head, str) else "head",
        dtype=dtype_of(param.dtype, config),
        device=device,
        lead=lead,
    )
