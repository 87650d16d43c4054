"""A kernel's parameters: its factory's arguments, checked and normalised at warm-up, and its call's tensors,
declared once.

**The factory's arguments** (``positive_int``, ``canonical_dtype``, ``flag``, ``finite_float``, ``describe``): a
factory runs once per configuration, so its checks may be thorough; each refusal names the factory, the argument,
the value and what would be accepted. (The checks of a kernel *call*, on the hot path, are ``_checks``.)

**The call's tensors**: ``Rows("x")``, ``Fixed("weight", shape=("n",))``, ``Tensor("block_table", ("B", None),
torch.int32)``, ``Out(like="x")``. A spec lists what its kernel call takes and gives; everything that follows from
that list is derived from it: the checks every call passes (``_checks``) and the fast path (``_engine``), functions
of the spec, the output's shape (``_spec.KernelSpec``); and, in the kernel's examples (``lazyops.testing.cases``),
the inputs the conformance kit draws and the bytes a benchmark counts. A fact about a shape is written here once,
never three times.

Sizes and dtypes refer to the kernel's static configuration by field name (``width="n"``, ``dtype="weight_dtype"``)
or are given as they are (an int, a ``torch.dtype``); a size may also be a function of the configuration
(``width=lambda config: 2 * config.n`` for a gated activation's ``[M, 2n]`` input). A :class:`Tensor`'s sizes may
also be bound by the call: an uppercase symbol (``"B"``, ``"B+1"``), see there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lazyops._errors import KernelInputError

if TYPE_CHECKING:
    import torch

#: A size: a fixed int, the name of a configuration field, or a function of the configuration.
Size = int | str | Callable[[Any], Any]
#: A dtype: the name of a configuration field (``"dtype"``, ``"weight_dtype"``) or a ``torch.dtype``.
DType = Any


#: The call's token count as a :class:`Tensor` size (``kv_cache_write``'s ``slot_mapping[T]``), and, first in a shape,
#: the call's token dimensions themselves, whatever their number (``rope``'s ``positions[*T]``).
TOKENS, TOKEN_DIMS = "T", "*T"


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


def allowed_of(size: Size, config: Any) -> int | range:
    """:func:`size_of`, where a function of the configuration may give a ``range`` of the sizes allowed (rope's rotary
    dimension: ``range(2, head_dim + 1, 2)``)."""
    value = size(config) if callable(size) else size_of(size, config)
    return value if isinstance(value, range) else int(value)


def dtype_of(dtype: DType, config: Any) -> Any:
    """``dtype`` for ``config``: the field it names, or the ``torch.dtype`` itself; a tuple of them, each (any of them
    is taken)."""
    if isinstance(dtype, tuple):
        resolved = tuple(dict.fromkeys(dtype_of(each, config) for each in dtype))
        return resolved[0] if len(resolved) == 1 else resolved
    return getattr(config, dtype) if isinstance(dtype, str) else dtype


def symbol_of(size: Any) -> tuple[str, int] | None:
    """``(symbol, offset)`` of a size the call binds (``"B+1"``: ``("B", 1)``), None for one the configuration gives."""
    if isinstance(size, str) and size[:1].isupper():
        symbol, _, offset = size.partition("+")
        return symbol, int(offset or 0)
    return None


@dataclass(frozen=True)
class Rows:
    """A token-indexed input ``[..., width]``: any leading (token) dimensions, rows that may be strided (a slice of a
    packed buffer), the last dimension contiguous. A launch receives it as a ``[rows, width]`` view. ``width=None``
    (without ``head``): the spec checks the width itself.

    ``head``: the rows are heads of this size (attention's query ``[*T, H*D]``), which a call may also give as a
    dimension of their own, ``[*T, H, D]`` (the heads of a token contiguous, tokens one stride apart); with
    ``width=None`` a row holds any number of them (rope's query and key).

    ``mutated``: the call updates it in place (``add_rmsnorm``'s residual). ``scale``: the spread of the values the
    examples draw for it (a residual stream is wider than the activation added to it); where normal values would not
    test the kernel (masked logits) the examples draw it themselves (``Examples.draws``).
    """

    name: str
    width: Size | None = "n"
    dtype: DType = "dtype"
    mutated: bool = False
    scale: float = 1.0
    head: Size | None = None


def head_rows(name: str, heads: str) -> Rows:
    """A token-indexed input of ``config.<heads>`` heads of ``head_dim`` (attention's query, a paged cache's new keys
    and values): rows ``[*T, heads * head_dim]`` (strided: a slice of a packed ``qkv``) or ``[T, heads, head_dim]``."""
    return Rows(name, width=lambda config: getattr(config, heads) * config.head_dim, head="head_dim")


@dataclass(frozen=True)
class Fixed:
    """An input not indexed by token (a weight, a per-tensor scale): exactly ``shape``, dense."""

    name: str
    shape: tuple[Size, ...]
    dtype: DType = "dtype"


@dataclass(frozen=True)
class Tensor:
    """An input with a shape of its own: a cache, an index tensor, a scale. Each entry of ``shape`` is a size the
    configuration gives (as above; a function may give a ``range`` of the sizes allowed), None (any size), a size
    the call binds: an uppercase symbol, ``"B"``, or one past it, ``"B+1"``, or a :class:`FromTokens` (a size the
    token count gives: an output buffer sized for the worst case). The first tensor that has a symbol binds it; every
    other must agree. ``"T"`` is the call's token count, and ``"*T"``, first, the token dimensions themselves: the
    tensor is then token-indexed (rope's ``positions[*T]``, a sampler's per-request ``temperature[*T]``).

    ``dtype``: one, or a tuple of those taken. ``layout``: ``"dense"`` (contiguous), ``"rows"`` (the last dimension
    contiguous only: a block table sliced from a wider one), ``"columns"`` (a 2-D tensor whose transpose is dense:
    the column-major scales DeepGEMM-style GEMMs read), or a tuple of those taken. ``mutated``: written in place.

    ``shape``, ``layout`` and ``mutated`` may also be functions of the configuration, where a factory argument
    decides them (``quant_fp8_tl``'s ``scale`` is ``[1]`` per tensor and ``[T, G]`` per group, column-major with
    ``column_major=True``, and read, not written, when static); a ``shape`` function does not start with ``"*T"``.
    A ``mutated`` function makes the tensor one the kernel may write (the custom operator's schema says so), and
    written under the configurations it answers True for (what the aliasing checks and the fast path compare).

    ``keyword``: keyword-only (declared after every positional parameter), left out as None; an empty tensor of its
    dtype stands for None (the custom operator's ``Tensor?``, the kit's drawn arguments). ``present(config)``: whether
    the configuration needs it (True: then it must be given), must not have it (False: then it must be left out) or
    takes it or not (None); ``why`` says which configuration needs it, in both refusals (an fp8 cache's scales).
    ``together``: another keyword tensor given with this one, both or neither (a logit bias's ids and values).
    """

    name: str
    shape: tuple[Size | FromTokens | None, ...] | Callable[[Any], tuple[Any, ...]]
    dtype: DType = "dtype"
    layout: str | tuple[str, ...] | Callable[[Any], Any] = "dense"
    mutated: bool | Callable[[Any], bool] = False
    keyword: bool = False
    present: Callable[[Any], bool | None] | None = None
    why: str = ""
    together: str = ""


@dataclass(frozen=True)
class FromTokens:
    """A :class:`Tensor` size the call's token count gives, ``size(config, tokens)``: ``moe_align_tl``'s buffers,
    sized for the worst case of ``tokens * top_k`` assignments. ``text`` names it in messages."""

    size: Callable[[Any, int], int]
    text: str = "a size of the token count"


@dataclass(frozen=True)
class Out:
    """The tensor a kernel returns: shaped like the input ``like``, or rows ``[..., width]`` under the first
    token-indexed input's leading dimensions, or, with neither, one value a row ``[...]`` under them (a sampler's token
    ids). ``may_alias``: the input ``out=`` may be (the very same view), where the math reads each element of a row
    before writing it (``rmsnorm_tl(...)(x, w, out=x)``)."""

    like: str | None = None
    width: Size | None = None
    dtype: DType = "dtype"
    may_alias: str | None = None


Param = Rows | Fixed | Tensor


# -- the declarations read: what the spec (``_spec``), the call's checks (``_checks``) and the fast path (``_engine``)
# -- each ask of a parameter
def token_indexed(param: Param) -> bool:
    """Whether ``param`` is indexed by token: rows, or a :class:`Tensor` whose shape starts with ``"*T"``."""
    return isinstance(param, Rows) or (
        isinstance(param, Tensor) and isinstance(param.shape, tuple) and param.shape[:1] == (TOKEN_DIMS,)
    )


def resolved(param: Tensor, config: Any) -> Tensor:
    """``param`` with the attributes a function of the configuration gives (``shape``, ``layout``) for ``config``."""
    if not callable(param.shape) and not callable(param.layout):
        return param
    shape = param.shape(config) if callable(param.shape) else param.shape
    return replace(param, shape=shape, layout=param.layout(config) if callable(param.layout) else param.layout)


def shape_of(param: Tensor) -> tuple[Any, ...]:
    """A resolved (or class-level tuple) :class:`Tensor`'s shape (:func:`resolved`)."""
    return param.shape if isinstance(param.shape, tuple) else ()


def layout_of(param: Tensor) -> str | tuple[str, ...]:
    """A resolved :class:`Tensor`'s layout (:func:`resolved`)."""
    return param.layout if isinstance(param.layout, str | tuple) else "dense"


def declared_size(size: Any, config: Any) -> int | range | tuple[str, int] | None:
    """A :class:`Tensor`'s size for ``config``: None (any), the ``(symbol, offset)`` the call binds, or the int (or
    ``range``) the configuration gives (``_checks.Declared``)."""
    if size is None:
        return None
    return symbol_of(size) or allowed_of(size, config)


def rows_like(out: Out | None, params: tuple[Param, ...]) -> Rows | None:
    """The token-indexed input ``out`` is shaped like (:attr:`Out.like`), if it is rows."""
    if out is None or out.like is None:
        return None
    param = next(param for param in params if param.name == out.like)
    return param if isinstance(param, Rows) else None


# -- the factory's arguments -----------------------------------------------------------------------------------------
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


def finite_float(
    factory: str, param: str, value: Any, *, positive: bool = False, hint: str = "", default: float | None = None
) -> float:
    """``value`` as a finite ``float`` (``> 0`` with ``positive``): ``eps=inf`` makes every output zero and
    ``weight_offset=nan`` every output NaN, silently, so neither is a configuration. With a ``default``, None is
    that default (an argument left out)."""
    if value is None and default is not None:
        return default
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
