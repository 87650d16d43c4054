"""Argument checks shared by every backend's factories and kernels.

A kernel checks its inputs before it launches anything: a wrong shape that reaches a GPU kernel reads or
writes out of bounds, and the symptom (garbage, or an illegal-address error on a later, unrelated launch)
points nowhere near the cause. Every message names the kernel with its static configuration, the argument,
what was found and what was expected, so the fix is obvious from the message alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazyops._errors import KernelInputError

if TYPE_CHECKING:
    import torch

    from lazyops.specs._spec import RowConfig

#: The dtypes every kernel supports, by the names accepted for them.
_DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}
SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")


def canonical_dtype(factory: str, dtype: Any) -> torch.dtype:
    """``dtype`` as a ``torch.dtype``; accepts ``torch.float32``/``float16``/``bfloat16`` or their names."""
    import torch

    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = _DTYPE_NAMES.get(dtype.lower().removeprefix("torch."), dtype)
    else:
        raise KernelInputError(
            f"{factory}: dtype must be a torch.dtype or its name, got {type(dtype).__name__} {dtype!r}; "
            f"use one of {', '.join(SUPPORTED_DTYPES)}"
        )
    if name not in SUPPORTED_DTYPES:
        raise KernelInputError(f"{factory}: dtype {dtype!r} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}")
    canonical: torch.dtype = getattr(torch, name)
    return canonical


def positive_int(factory: str, param: str, value: Any) -> int:
    """``value`` as an ``int`` > 0; bools and floats are refused, since ``n=True`` or ``n=4096.0`` is a bug."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KernelInputError(f"{factory}: {param} must be a positive int, got {value!r}")
    return int(value)


def positive_float(factory: str, param: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise KernelInputError(f"{factory}: {param} must be a positive float, got {value!r}")
    return float(value)


def check_tensor(
    kernel: str,
    arg: str,
    tensor: Any,
    *,
    shape: tuple[int | str, ...],
    dtype: torch.dtype | tuple[torch.dtype, ...],
    device: torch.device | None = None,
) -> None:
    """Check one tensor argument of a kernel call.

    ``shape`` holds ints for sizes fixed by the factory and strings for sizes that may vary ("M"); a string that
    repeats across calls must be checked by the caller (see :func:`same_size`). The tensor must be contiguous:
    the kernels index rows by their width, so a strided view would be read wrongly, not merely slowly.

    On the hot path of every kernel call: the accepting path is a handful of attribute reads and comparisons,
    and everything that formats a message runs only once a check has failed.
    """
    if not isinstance(tensor, _tensor_type()):
        raise KernelInputError(f"{kernel}: {arg} must be a torch.Tensor, got {type(tensor).__name__}")
    sizes = tensor.shape
    if len(sizes) != len(shape):
        _wrong_shape(kernel, arg, sizes, shape)
    for got, want in zip(sizes, shape, strict=True):
        if got != want and type(want) is int:
            _wrong_shape(kernel, arg, sizes, shape)
    found = tensor.dtype
    if found is not dtype and (type(dtype) is not tuple or found not in dtype):
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        raise KernelInputError(
            f"{kernel}: {arg} has dtype {found}; expected {' or '.join(map(str, allowed))} "
            f"(build another kernel with the factory for another dtype)"
        )
    if device is not None and tensor.device != device:
        raise KernelInputError(
            f"{kernel}: {arg} is on {tensor.device}; expected {device}, where the other arguments are"
        )
    if not tensor.is_contiguous():
        raise KernelInputError(
            f"{kernel}: {arg} is not contiguous (strides {tensor.stride()}); pass {arg}.contiguous()"
        )


def _wrong_shape(kernel: str, arg: str, sizes: Any, shape: tuple[int | str, ...]) -> None:
    raise KernelInputError(f"{kernel}: {arg} has shape {tuple(sizes)}; expected ({', '.join(map(str, shape))})")


_TENSOR: Any = None


def _tensor_type() -> Any:
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


def check_device(kernel: str, tensor: torch.Tensor, *, cuda: bool) -> None:
    """Refuse a tensor on the wrong kind of device before a launch touches it."""
    if cuda and tensor.device.type != "cuda":
        raise KernelInputError(f"{kernel}: inputs must be CUDA tensors, got a tensor on {tensor.device}")
    if not cuda and tensor.device.type != "cpu":
        raise KernelInputError(f"{kernel}: inputs must be CPU tensors here, got a tensor on {tensor.device}")


def row_config(factory: str, n: Any, dtype: Any) -> RowConfig:
    """``factory(n, dtype)``'s arguments, checked and normalised (see :class:`lazyops.specs._spec.RowConfig`)."""
    from lazyops.specs._spec import RowConfig

    n = positive_int(factory, "n", n)
    dtype = canonical_dtype(factory, dtype)
    return RowConfig(n, dtype, describe(factory, n=n, dtype=dtype))


def describe(factory: str, **config: Any) -> str:
    """``rmsnorm_tl(n=4096, dtype=torch.bfloat16)``: how a kernel names itself in errors."""
    return f"{factory}({', '.join(f'{key}={value!r}' for key, value in config.items())})"
