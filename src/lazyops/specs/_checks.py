"""Argument checks shared by every backend's factories and kernels.

A kernel checks its inputs before it launches anything: a wrong shape that reaches a GPU kernel reads or
writes out of bounds, and the symptom (garbage, or an illegal-address error on a later, unrelated launch)
points nowhere near the cause. Every message names the kernel with its static configuration, the argument,
what was found and what was expected, so the fix is obvious from the message alone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lazyops._errors import KernelInputError

if TYPE_CHECKING:
    import torch


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


def rows_apart(a: torch.Tensor, b: torch.Tensor, *dense: torch.Tensor) -> bool:
    """Whether the row tensors ``a`` and ``b`` (``[rows, width]``, unit last stride: rope's query and key, as
    ``_engine_call`` accepted them) share no element with each other or with the ``dense`` tensors: the fast path's
    aliasing test, exact for two slices of one packed buffer, in one frame (:func:`overlap` is the general one).
    """
    size = a.element_size()
    a_rows, a_width = a.shape
    b_rows, b_width = b.shape
    a_step, b_step = a.stride(0), b.stride(0)
    a_start, b_start = a.data_ptr(), b.data_ptr()
    a_end = a_start + ((a_rows - 1) * a_step + a_width) * size
    b_end = b_start + ((b_rows - 1) * b_step + b_width) * size
    if a_start < b_end and b_start < a_end:  # interleaved: apart only as distinct columns of one row stride
        if a_step != b_step or a_rows != b_rows or a_step < a_width or b.element_size() != size:
            return False
        period = a_step * size
        if _arcs_intersect(a_start % period, a_width * size, b_start % period, b_width * size, period):
            return False
    for other in dense:
        start = other.data_ptr()
        end = start + other.nbytes
        if (start < a_end and a_start < end) or (start < b_end and b_start < end):
            return False
    return True


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


def same_size(kernel: str, what: str, sizes: dict[str, int]) -> None:
    """Check that a varying size (the token count, say) agrees across arguments."""
    # Compared, not hashed: under torch.compile the sizes are symbolic, and a symbolic size has no hash.
    values = list(sizes.values())
    if any(value != values[0] for value in values[1:]):
        found = ", ".join(f"{arg}: {size}" for arg, size in sizes.items())
        raise KernelInputError(f"{kernel}: {what} differs between arguments ({found}); they must be equal")


#: How one input of a plain call looks (see :func:`plain_call`): its dtype, and either ``width`` (a token-indexed
#: input, ``[tokens, width]``) or ``shape`` (any other input, exactly that shape).
PlainInput = tuple[Any, int | None, tuple[int, ...] | None]


def rows_input(width: int, dtype: torch.dtype) -> PlainInput:
    """A token-indexed input of a plain call: ``[tokens, width]``, dense."""
    return (dtype, width, None)


def fixed_input(shape: tuple[int, ...], dtype: torch.dtype) -> PlainInput:
    """An input of a plain call that is not indexed by token (a weight, a scale): exactly ``shape``, dense."""
    return (dtype, None, shape)


def plain_call(layout: tuple[PlainInput, ...], written: tuple[int, ...] = (), device_type: str | None = None) -> Any:
    """A predicate over a call's packed arguments that recognises, in a few attribute reads, the call engines make
    on every step: every input a dense tensor of its dtype on the first input's device, none requiring grad while
    grad mode is on, the token-indexed ones ``[tokens, width]`` with the same ``tokens > 0``, the others of their
    exact shape, each ``written`` input sharing no byte with any other input (whatever its dtype) and writable here
    (not an inference tensor outside ``torch.inference_mode()``), and the device one of ``device_type`` (the
    current one, for CUDA: a launch goes to the current device).

    It is the kernel's fast path, its layout declared by the spec's parameters: where it answers True, the full
    checks would accept the call and the launch needs no adaptation; where it answers False (or raises, for a
    non-tensor), the call takes the full checks, which accept it or say what is wrong. So it may refuse what the
    checks accept (a strided view, a 3-D input), never the reverse; ``tests/core/test_plain_call.py`` holds it to that.

    Its cost is the kernel's host cost on every step, so it reads each attribute once and loops over nothing it can
    unroll: the first token-indexed input is read on its own, the others and the fixed inputs in two loops over
    ``(position, dtype, width or shape)``.
    """
    import torch

    is_grad_enabled = torch.is_grad_enabled
    inference_mode = torch.is_inference_mode_enabled
    current_device = torch.cuda.current_device
    count = len(layout)
    rows = tuple((index, dtype, width) for index, (dtype, width, _) in enumerate(layout) if width is not None)
    fixed = tuple((index, dtype, shape) for index, (dtype, width, shape) in enumerate(layout) if width is None)
    if not rows:
        raise ValueError(
            f"plain_call{layout!r}: no token-indexed input to count the tokens by; declare one with Rows, or let "
            "the spec's plain_layout return None (no fast path)"
        )
    (first_index, first_dtype, first_width), other_rows = rows[0], rows[1:]
    # Each input's byte count once its shape is checked, ``tokens * per_token + fixed``: dense tensors span exactly
    # that many bytes, so the overlap test reads no ``nbytes``.
    spans = tuple(
        ((width or 0) * dtype.itemsize, 0 if width is not None else math.prod(shape or ()) * dtype.itemsize)
        for dtype, width, shape in layout
    )
    written_against = tuple(
        (index, *spans[index], tuple((other, *spans[other]) for other in range(count) if other != index))
        for index in written
    )
    on_cuda = device_type == "cuda"
    other_kind = device_type if device_type not in (None, "cuda") else None

    def accepts(args: tuple[Any, ...]) -> bool:
        if len(args) != count:
            return False
        first = args[first_index]
        grad = is_grad_enabled()
        if first.dtype is not first_dtype or not first.is_contiguous() or (grad and first.requires_grad):
            return False
        sizes = first.shape
        if len(sizes) != 2 or sizes[1] != first_width:
            return False
        tokens = sizes[0]
        if tokens <= 0:
            return False
        if on_cuda:  # ``is_cuda``: a flag read, where ``device.type`` builds a device object
            if not first.is_cuda or first.get_device() != current_device():
                return False
        elif other_kind is not None and first.device.type != other_kind:
            return False
        if count == 1:
            return True
        device = first.device
        for index, dtype, width in other_rows:
            arg = args[index]
            if arg.dtype is not dtype or not arg.is_contiguous() or (grad and arg.requires_grad):
                return False
            sizes = arg.shape
            if len(sizes) != 2 or sizes[1] != width or sizes[0] != tokens or arg.device != device:
                return False
        for index, dtype, shape in fixed:
            arg = args[index]
            if arg.dtype is not dtype or not arg.is_contiguous() or (grad and arg.requires_grad):
                return False
            if arg.shape != shape or arg.device != device:
                return False
        for index, per_token, fixed_bytes, others in written_against:  # dense tensors: one byte range each
            target = args[index]
            if target.is_inference() and not inference_mode():
                return False  # written under torch.inference_mode() by the checked path
            start = target.data_ptr()
            end = start + tokens * per_token + fixed_bytes
            for other, other_per_token, other_fixed_bytes in others:
                other_start = args[other].data_ptr()
                if start < other_start + tokens * other_per_token + other_fixed_bytes and other_start < end:
                    return False
        return True

    return accepts
