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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs import _checks as checks
from lazyops.specs._params import Other, Out, Rows
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
    checked: int = arguments.positive_int(name, "group_size", group_size)
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


def check_scale(config: QuantFP8Config, label: str, rows: int, device: torch.device, scale: Any) -> None:
    """Refuse a ``scale`` of the wrong shape, dtype, device or layout for ``rows`` rows (``KernelInputError``)."""
    shape = scale_shape(config, rows)
    if not isinstance(scale, torch.Tensor) or tuple(scale.shape) != shape or scale.dtype != torch.float32:
        got = f"{tuple(scale.shape)} {scale.dtype}" if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise KernelInputError(f"{label}: scale must be a float32 tensor of shape {shape}, got {got}")
    if scale.device != device:
        raise KernelInputError(f"{label}: scale is on {scale.device}, x on {device}")
    if len(shape) == 2 and rows:
        want = (1, rows) if config.column_major else (config.groups, 1)
        if (config.groups > 1 and scale.stride(1) != want[1]) or (rows > 1 and scale.stride(0) != want[0]):
            layout = "column-major ([G, M] transposed)" if config.column_major else "row-major, dense"
            raise KernelInputError(f"{label}: scale must be {layout}; its strides are {scale.stride()}")


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


class QuantFP8Spec(KernelSpec):
    name = "quant_fp8_tl"
    kernel_type = QuantFP8Kernel
    #: the configuration's class (``silu_and_mul_fp8_tl``'s says its ``x`` is a gated activation's input)
    config_type: ClassVar[type[QuantFP8Config]] = QuantFP8Config
    params = (Rows("x", width="x_width"), Other("scale", mutated=True), Other("scale_ub", keyword=True))
    out = Out(width="n", dtype=FP8_DTYPE)

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
        name = self.name
        n = arguments.positive_int(name, "n", n)
        dtype = arguments.canonical_dtype(name, dtype)
        options: dict[str, Any] = {"n": n, "dtype": dtype}
        group_size = scale_options(name, n, options, scales, group_size, column_major, ue8m0)
        return self.config_type(
            n,
            dtype,
            scales,
            group_size,
            bool(column_major),
            bool(ue8m0),
            arguments.describe(name, **options),
        )

    def check(self, config: QuantFP8Config, x: Any, scale: Any, scale_ub: Any = None) -> None:
        label = config.label
        checks.check_rows(label, "x", x, width=config.x_width, dtype=config.dtype, device=None)
        check_scale(config, label, x.numel() // config.x_width, x.device, scale)
        if scale_ub is None:
            return
        if not isinstance(scale_ub, torch.Tensor) or scale_ub.dtype != torch.float32 or scale_ub.device != x.device:
            raise KernelInputError(f"{label}: scale_ub must be a float32 tensor of one element beside x")
        if scale_ub.numel():  # an empty tensor stands for None inside lazyops (the custom operator's Tensor?)
            if config.scales != "token":
                raise KernelInputError(f"{label}: scale_ub bounds per-token scales only (scales='token')")
            if tuple(scale_ub.shape) != (1,):
                raise KernelInputError(f"{label}: scale_ub must have one element, got {tuple(scale_ub.shape)}")

    def check_aliasing(self, config: QuantFP8Config, x: Any, scale: Any, scale_ub: Any = None) -> None:
        """A written ``scale`` shares no element with ``x`` or ``scale_ub`` (a static one is only read)."""
        if config.scales == "static":
            return
        for name, other in (("x", x), ("scale_ub", scale_ub)):
            if other is not None and other.numel() and checks.overlap(scale, other):
                raise KernelInputError(f"{config.label}: scale overlaps {name} in memory: pass a separate buffer")

    def plain_predicate(
        self, config: QuantFP8Config, *, strided_rows: bool, device_type: str | None
    ) -> Callable[[tuple[Any, ...]], bool]:
        """The engine call, recognised in one frame: dense ``x[M, n]`` with tokens, ``scale`` of its exact shape and
        layout, ``scale_ub`` absent or one float32 element (``scales="token"``), one device (the current one for
        CUDA), nothing requiring grad in grad mode, a written scale writable here and apart from ``x``."""
        return plain_quant(config, device_type)

    def reference(  # type: ignore[override]
        self, config: QuantFP8Config, x: torch.Tensor, scale: torch.Tensor, scale_ub: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(what the float8 conversion receives, the scale after the call)``."""
        bound = None if scale_ub is None or not scale_ub.numel() else scale_ub
        return quant_reference(config, x, scale, bound)


def plain_quant(config: QuantFP8Config, device_type: str | None) -> Callable[[tuple[Any, ...]], bool]:
    """:meth:`QuantFP8Spec.plain_predicate`'s predicate."""
    tensor, float32, dtype, n, groups = torch.Tensor, torch.float32, config.dtype, config.x_width, config.groups
    inference_mode, is_grad_enabled, current_device = (
        torch.is_inference_mode_enabled,
        torch.is_grad_enabled,
        torch.cuda.current_device,
    )
    on_cuda = device_type == "cuda"
    other_kind = device_type if device_type not in (None, "cuda") else None
    per_tensor, written = config.scales in ("static", "tensor"), config.scales != "static"
    column_major, bounded = config.column_major, config.scales == "token"

    def accepts(args: tuple[Any, ...]) -> bool:
        if len(args) != 3:
            return False
        x, scale, scale_ub = args
        if type(x) is not tensor or x.dtype is not dtype or type(scale) is not tensor or scale.dtype is not float32:
            return False
        sizes = x.shape
        if len(sizes) != 2 or sizes[1] != n or not sizes[0] or not x.is_contiguous():
            return False
        tokens = sizes[0]
        if per_tensor:
            if scale.shape != (1,):
                return False
        elif scale.shape != (tokens, groups) or scale.stride() != ((1, tokens) if column_major else (groups, 1)):
            return False
        device = x.device
        if on_cuda:
            if not x.is_cuda or x.get_device() != current_device():
                return False
        elif other_kind is not None and device.type != other_kind:
            return False
        if scale.device != device or (written and scale.is_inference() and not inference_mode()):
            return False
        if scale_ub is not None:
            if type(scale_ub) is not tensor or scale_ub.dtype is not float32 or scale_ub.device != device:
                return False
            if scale_ub.numel() and (not bounded or scale_ub.shape != (1,)):
                return False
            if is_grad_enabled() and scale_ub.requires_grad:
                return False
        if is_grad_enabled() and (x.requires_grad or scale.requires_grad):
            return False
        if written:
            start, end = x.data_ptr(), x.data_ptr() + x.nbytes
            scale_start = scale.data_ptr()
            if scale_start < end and start < scale_start + scale.numel() * 4:
                return False
            if scale_ub is not None and scale_ub.numel():
                bound = scale_ub.data_ptr()
                if scale_start <= bound < scale_start + scale.numel() * 4:
                    return False
        return True

    return accepts


spec = QuantFP8Spec()
