"""A factory's arguments, checked and normalised at warm-up: sizes, dtypes, flags, and how a kernel names itself.

A factory runs once per configuration, so its checks may be thorough; each refusal names the factory, the
argument, the value and what would be accepted. (The checks of a kernel *call*, on the hot path, are
``_checks``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lazyops._errors import KernelInputError

if TYPE_CHECKING:
    import torch

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


def canonical_dtype(factory: str, dtype: Any, param: str = "dtype") -> torch.dtype:
    """``dtype`` as a ``torch.dtype``; accepts ``torch.float32``/``float16``/``bfloat16`` or their names."""
    import torch

    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = _DTYPE_NAMES.get(dtype.lower().removeprefix("torch."), dtype)
    else:
        raise KernelInputError(
            f"{factory}: {param} must be a torch.dtype or its name, got {type(dtype).__name__} {dtype!r}; "
            f"use one of {', '.join(SUPPORTED_DTYPES)}"
        )
    if name not in SUPPORTED_DTYPES:
        raise KernelInputError(
            f"{factory}: {param} {dtype!r} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}"
        )
    canonical: torch.dtype = getattr(torch, name)
    return canonical


def positive_int(factory: str, param: str, value: Any) -> int:
    """``value`` as an ``int`` > 0; bools and floats are refused, since ``n=True`` or ``n=4096.0`` is a bug."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KernelInputError(f"{factory}: {param} must be a positive int, got {value!r}")
    return int(value)


def flag(factory: str, param: str, value: Any) -> bool:
    """``value`` as a ``bool``: ``True`` or ``False`` only, since ``validate="false"`` would read as true and
    ``validate=0`` or ``None`` is a guess at a spelling."""
    if not isinstance(value, bool):
        kind = type(value).__name__
        raise KernelInputError(f"{factory}: {param} must be True or False, got {value!r} of type {kind}")
    return value


def finite_float(factory: str, param: str, value: Any, *, positive: bool = False, hint: str = "") -> float:
    """``value`` as a finite ``float`` (``> 0`` with ``positive``): ``eps=inf`` makes every output zero and
    ``weight_offset=nan`` every output NaN, silently, so neither is a configuration."""
    kind = "positive finite float" if positive else "finite float"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise KernelInputError(f"{factory}: {param} must be a {kind}{hint}, got {value!r}")
    if positive and not value > 0:
        raise KernelInputError(f"{factory}: {param} must be a {kind}{hint}, got {value!r}")
    return float(value)


def describe(factory: str, **config: Any) -> str:
    """``rmsnorm_tl(n=4096, dtype=torch.bfloat16)``: how a kernel names itself in errors."""
    return f"{factory}({', '.join(f'{key}={value!r}' for key, value in config.items())})"


@dataclass(frozen=True)
class RowConfig:
    """The static configuration of a kernel over rows of ``n`` features that takes nothing else: ``label`` is how the
    kernel names itself in messages (``softmax_tl(n=4096, dtype=torch.bfloat16)``)."""

    n: int
    dtype: torch.dtype
    label: str


def row_config(factory: str, n: Any, dtype: Any) -> RowConfig:
    """``factory(n, dtype)``'s arguments, checked and normalised."""
    n = positive_int(factory, "n", n)
    dtype = canonical_dtype(factory, dtype)
    return RowConfig(n, dtype, describe(factory, n=n, dtype=dtype))
