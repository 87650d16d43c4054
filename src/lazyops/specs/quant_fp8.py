"""Activations quantized to float8 e4m3 for an fp8 GEMM: vLLM's ``scaled_fp8_quant`` and
``per_token_group_quant_fp8``, sgl-kernel's ``sgl_per_token_group_quant_fp8``.

``y = saturate(x / scale)`` converted once to ``torch.float8_e4m3fn`` (±448, NaN kept), with ``scale`` float32:

- ``scales="static"``: a given one-element scale, read at every call (a CUDA graph sees its updates);
- ``scales="tensor"``: ``scale[0] = amax(|x|) / 448`` over the whole call, written into ``scale`` (a reduction across
  the grid: two launches, no host read);
- ``scales="token"``: one scale a row, ``scale[M, 1]``; ``scale_ub=`` (a one-element tensor, vLLM's) bounds the
  absolute maximum first, so an outlier row saturates rather than crushing its other values;
- ``scales="group"``: one scale per ``group_size`` columns of a row, ``scale[M, n // group_size]``, row-major, or
  column-major (``column_major=True``: ``scale`` is the transposed view of a ``[n // group_size, M]`` buffer, the
  layout DeepGEMM-style GEMMs read); ``ue8m0=True`` rounds each scale up to a power of two (DeepSeek-V3 on
  Blackwell), so the dequantizing multiply is exact.

The absolute maximum skips NaN (as CUDA's ``fmaxf`` does): a NaN element stays NaN, its neighbours are quantized
as if it were not there. A zero row (or group, or tensor) gets the scale ``1e-10 / 448`` (the absolute maximum
floored at ``1e-10``, the peers' ``eps``): positive and finite, so ``x / scale`` is an exact 0 rather than
``0 / 0 = NaN``, ``1 / scale`` (4.5e12) stays finite in float32 and the dequantized product ``0 * scale`` is 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import TOKENS, Out, Param, Rows, Tensor
from lazyops.specs._spec import KernelSpec

#: The output's dtype, and the largest finite value it holds (``torch.finfo(torch.float8_e4m3fn).max``); also
#: ``lazyops.specs.rmsnorm_fp8``'s names for them.
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0

#: the granularities of the scales
SCALES = ("static", "tensor", "token", "group")
#: the absolute maximum's floor: a zero row's scale is ``MIN_AMAX / 448`` (see the module's docstring)
MIN_AMAX = 1e-10


@dataclass(frozen=True)
class QuantFP8Config:
    n: int
    dtype: torch.dtype
    scales: str
    group_size: int
    column_major: bool
    ue8m0: bool
    label: str
    #: ``silu_and_mul_fp8_tl``'s: ``x[..., 2n]`` holds the gate then the up projection, quantized is their product
    gated: ClassVar[bool] = False

    @property
    def x_width(self) -> int:
        """The width of ``x``'s rows: ``2n`` for a gated input, else ``n``."""
        return 2 * self.n if self.gated else self.n

    @property
    def groups(self) -> int:
        """Scales a row: ``n // group_size`` per group, else 1."""
        return self.n // self.group_size if self.scales == "group" else 1


class QuantFP8Kernel(Protocol):
    """What ``quant_fp8_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        x: torch.Tensor,
        scale: torch.Tensor,
        /,
        *,
        scale_ub: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y[..., n] = saturate(x / scale)`` in ``torch.float8_e4m3fn``; ``scale`` is read (static) or written
        (dynamic: ``[1]``, ``[M, 1]`` or ``[M, n // group_size]``); written into ``out`` when given."""
        ...


def scale_shape(config: QuantFP8Config, rows: int) -> tuple[int, ...]:
    """The shape of ``scale`` for ``rows`` rows."""
    return (1,) if config.scales in ("static", "tensor") else (rows, config.groups)


def scale_options(
    name: str, n: int, options: dict[str, Any], scales: Any, group_size: Any, column_major: Any, ue8m0: Any
) -> int:
    """The factory's scale arguments checked for rows of ``n`` (``name`` is the factory's, for its errors), added to
    ``options`` (the label's) where they say something; returns ``group_size`` checked. Shared by every factory
    that takes ``scales=`` (the fp8 norms too)."""
    if scales not in SCALES:
        raise KernelInputError(f"{name}: scales must be one of {', '.join(SCALES)}, got {scales!r}")
    checked: int = _params.positive_int(name, "group_size", group_size)
    options["scales"] = scales
    if scales == "group":
        if n % checked:
            raise KernelInputError(f"{name}: n={n} is not a multiple of group_size={checked}")
        options["group_size"] = checked
        if column_major:
            options["column_major"] = True
        if ue8m0:
            options["ue8m0"] = True
    elif column_major or ue8m0:
        raise KernelInputError(f"{name}: column_major and ue8m0 are options of scales='group'")
    return checked


def scale_declared(config: QuantFP8Config) -> tuple[Any, ...]:
    """``scale``'s declared shape: ``[1]`` per tensor, else ``[T, groups]`` (``T``: the call's rows)."""
    return (1,) if config.scales in ("static", "tensor") else (TOKENS, config.groups)


def scale_layout(config: QuantFP8Config) -> str:
    """``scale``'s layout: column-major (the transpose of a dense ``[groups, T]``) with ``column_major=True``."""
    return "columns" if config.column_major else "dense"


#: The scales ``quant_fp8_tl`` takes, read (static) or written (dynamic), shaped by the factory's ``scales``; shared
#: by every factory that takes ``scales=`` (the fp8 norms too).
SCALE = Tensor(
    "scale", scale_declared, torch.float32, layout=scale_layout, mutated=lambda config: config.scales != "static"
)
#: ``scale_ub=``: one float32 element bounding the per-token absolute maximum; ``scales="token"`` only.
SCALE_UB = Tensor(
    "scale_ub",
    (1,),
    torch.float32,
    keyword=True,
    present=lambda config: None if config.scales == "token" else False,
    why="scale_ub bounds per-token scales only (scales='token')",
)


def absolute_max(x: torch.Tensor) -> torch.Tensor:
    """``|x|``'s maximum over the last dimension, NaN skipped (0 for a row of NaN), kept as a dimension."""
    return torch.nan_to_num(x.abs(), nan=0.0).amax(dim=-1, keepdim=True)


def dynamic_scale(amax: torch.Tensor, ue8m0: bool, scale_ub: torch.Tensor | None = None) -> torch.Tensor:
    """The scale of a block whose absolute maximum is ``amax`` (the reference's, in ``amax``'s dtype)."""
    if scale_ub is not None:
        amax = torch.minimum(amax, scale_ub.to(amax.dtype))
    # a tensor divisor on amax's device: CUDA turns a division by a Python number into a product with its
    # reciprocal (one rounding more), and the scale must be ``amax / 448`` rounded once on every device
    scale = amax.clamp(min=MIN_AMAX) / amax.new_full((1,), FP8_MAX)
    return torch.exp2(torch.ceil(torch.log2(scale))) if ue8m0 else scale


def quant_reference(
    config: QuantFP8Config, x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(what the float8 conversion receives, the scale)`` for ``x[M, n]``, in ``x``'s dtype (float64 testing)."""
    if config.gated:
        x = silu_and_mul_reference(x, config.n)
    rows = x.reshape(-1, config.n)
    if not rows.shape[0]:  # a call without tokens writes nothing
        return x.clone(), scale
    if config.scales == "static":
        return (rows / scale.to(x.dtype)).clamp(-FP8_MAX, FP8_MAX).reshape(x.shape), scale
    if config.scales == "tensor":
        amax = absolute_max(rows.reshape(1, -1)).reshape(1)
        computed = dynamic_scale(amax, False)
        per_element = computed
    else:
        grouped = rows.reshape(rows.shape[0], config.groups, -1)
        bound = scale_ub if config.scales == "token" else None
        computed = dynamic_scale(absolute_max(grouped), config.ue8m0, bound)  # [M, G, 1]
        per_element = computed.expand_as(grouped).reshape(rows.shape)
        computed = computed.reshape(rows.shape[0], config.groups)
    y = (rows / per_element).clamp(-FP8_MAX, FP8_MAX)
    return y.reshape(x.shape), computed.to(scale.dtype).to(x.dtype)


def silu_and_mul_reference(x: torch.Tensor, n: int) -> torch.Tensor:
    """``silu(x[..., :n]) * x[..., n:]`` in ``x``'s dtype."""
    return torch.nn.functional.silu(x[..., :n]) * x[..., n:]


class QuantFP8Family:
    """What ``quant_fp8_tl`` and ``silu_and_mul_fp8_tl`` share (a mixin beside ``KernelSpec``): the parameters, the
    output, the factory's arguments (:meth:`configure`) and the reference; a member names its factory, its
    configuration's class and its ``bind`` (the docstring)."""

    #: the configuration's class (``silu_and_mul_fp8_tl``'s says its ``x`` is a gated activation's input)
    config_type: ClassVar[type[QuantFP8Config]] = QuantFP8Config
    name: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = (Rows("x", width="x_width"), SCALE, SCALE_UB)
    out: ClassVar[Out | None] = Out(width="n", dtype=FP8_DTYPE)

    def configure(
        self, n: int, dtype: torch.dtype | str, scales: str, group_size: int, column_major: bool, ue8m0: bool
    ) -> QuantFP8Config:
        """The factory's arguments checked and normalised (``bind``'s body)."""
        name = self.name
        n = _params.positive_int(name, "n", n)
        dtype = _params.canonical_dtype(name, dtype)
        options: dict[str, Any] = {"n": n, "dtype": dtype}
        group_size = scale_options(name, n, options, scales, group_size, column_major, ue8m0)
        label = _params.describe(name, **options)
        return self.config_type(n, dtype, scales, group_size, bool(column_major), bool(ue8m0), label)

    def reference(
        self, config: QuantFP8Config, x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(what the float8 conversion receives, the scale after the call)``."""
        bound = None if scale_ub is None or not scale_ub.numel() else scale_ub
        return quant_reference(config, x, scale, bound)


class QuantFP8Spec(QuantFP8Family, KernelSpec):  # type: ignore[misc]  # (the reference takes named tensors)
    name = "quant_fp8_tl"
    kernel_type = QuantFP8Kernel

    def bind(
        self,
        n: int,
        dtype: torch.dtype | str,
        scales: str = "token",
        *,
        group_size: int = 128,
        column_major: bool = False,
        ue8m0: bool = False,
    ) -> QuantFP8Config:
        """Activations ``x[..., n]`` in ``dtype`` quantized to float8 e4m3 for an fp8 GEMM.

        Returns ``kernel(x[..., n], scale, *, scale_ub=None, out=None) -> y[..., n]`` in ``torch.float8_e4m3fn``,
        ``y = saturate(x / scale)`` (±448; NaN stays NaN). ``scales``: ``"static"`` (``scale[1]`` given, read),
        ``"tensor"`` (``scale[1]`` written: ``amax(|x|) / 448``), ``"token"`` (``scale[M, 1]`` written, one a row;
        ``scale_ub[1]`` bounds the row's absolute maximum) or ``"group"`` (``scale[M, n // group_size]`` written,
        row-major, or the transpose of a ``[n // group_size, M]`` buffer with ``column_major=True``; ``ue8m0``
        rounds the scales up to powers of two). ``M`` counts the rows of ``x`` (its leading dimensions' product).
        A zero row's scale is ``1e-10 / 448``. Replaces vLLM's ``scaled_fp8_quant`` and
        ``per_token_group_quant_fp8``, sgl-kernel's ``sgl_per_token_group_quant_fp8``.
        """
        return self.configure(n, dtype, scales, group_size, column_major, ue8m0)


spec = QuantFP8Spec()
