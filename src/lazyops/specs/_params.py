"""A kernel call's parameters, declared once: ``Rows("x")``, ``Fixed("weight", shape=("n",))``, ``Out(like="x")``.

A spec lists what its kernel call takes and gives; everything that follows from that list is derived from it in
one place (``_spec.KernelSpec``): the checks every call passes, the fast path's layout, the output's shape; and, in
the kernel's examples (``lazyops.testing.cases``), the inputs the conformance kit draws and the bytes a benchmark
counts. A fact about a shape is written here once, never three times.

Sizes and dtypes refer to the kernel's static configuration by field name (``width="n"``, ``dtype="weight_dtype"``)
or are given as they are (an int, a ``torch.dtype``); a size may also be a function of the configuration
(``width=lambda config: 2 * config.n`` for a gated activation's ``[M, 2n]`` input).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: A size: a fixed int, the name of a configuration field, or a function of the configuration.
Size = int | str | Callable[[Any], int]
#: A dtype: the name of a configuration field (``"dtype"``, ``"weight_dtype"``) or a ``torch.dtype``.
DType = Any


def size_of(size: Size | None, config: Any) -> int:
    """``size`` for ``config``: the field it names, the value it computes, or the int itself (None: a size the spec
    works out itself, which nothing derived from the declarations may ask for)."""
    if size is None:
        raise NotImplementedError("a size the spec works out itself (width=None) cannot be derived")
    if isinstance(size, str):
        return int(getattr(config, size))
    if callable(size):
        return int(size(config))
    return size


def dtype_of(dtype: DType, config: Any) -> Any:
    """``dtype`` for ``config``: the field it names, or the ``torch.dtype`` itself."""
    return getattr(config, dtype) if isinstance(dtype, str) else dtype


@dataclass(frozen=True)
class Rows:
    """A token-indexed input ``[..., width]``: any leading (token) dimensions, rows that may be strided (a slice of a
    packed buffer), the last dimension contiguous. A launch receives it as a ``[rows, width]`` view. ``width=None``:
    the spec checks the width itself (rope's query holds any number of heads).

    ``mutated``: the call updates it in place (``add_rmsnorm``'s residual). ``scale``: the spread of the values the
    examples draw for it (a residual stream is wider than the activation added to it); where normal values would not
    test the kernel (masked logits) the examples draw it themselves (``Examples.draws``).
    """

    name: str
    width: Size | None = "n"
    dtype: DType = "dtype"
    mutated: bool = False
    scale: float = 1.0


@dataclass(frozen=True)
class Fixed:
    """An input not indexed by token (a weight, a per-tensor scale): exactly ``shape``, dense."""

    name: str
    shape: tuple[Size, ...]
    dtype: DType = "dtype"


@dataclass(frozen=True)
class Out:
    """The tensor a kernel returns: shaped like the input ``like``, or rows ``[..., width]`` under the first
    token-indexed input's leading dimensions. ``may_alias``: the input ``out=`` may be (the very same view), where
    the math reads each element of a row before writing it (``rmsnorm_tl(...)(x, w, out=x)``)."""

    like: str | None = None
    width: Size | None = None
    dtype: DType = "dtype"
    may_alias: str | None = None


@dataclass(frozen=True)
class Other:
    """A parameter whose spec checks and lays out itself (rope's positions, attention's block table): a spec that
    declares one overrides what the declarations cannot derive for it, and its examples draw and count it.

    ``keyword``: a keyword-only tensor the call may leave out (an fp8 cache's ``k_scale=``); declared after every
    positional parameter. Inside lazyops it travels as the last positional arguments, ``None`` when left out (the
    custom operator's ``Tensor?``)."""

    name: str
    mutated: bool = False
    keyword: bool = False


Param = Rows | Fixed | Other
