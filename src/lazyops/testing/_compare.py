"""How a kernel's output is judged: against the float64 reference, by relative error, with tolerances per dtype.

One judgement for every backend, the built-ins and third-party ones alike, so that "passes the conformance suite"
means the same thing everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lazyops.specs._tolerance import TOLERANCE  # the contract's, which a spec's tolerance() widens

if TYPE_CHECKING:
    from lazyops.testing._case import Case


#: Float32 arithmetic's share of the absolute floor (:func:`absolute_tolerance`), per unit of the output's scale:
#: 8 units of float32 roundoff, as :func:`check_each` allows relative to the largest value.
ARITHMETIC = 8 * torch.finfo(torch.float32).eps


def absolute_tolerance(dtype: torch.dtype, scale: float) -> float:
    """What each element may be off by whatever its size: the floor under the relative tolerance, for outputs
    whose ``scale`` (the size of a typical output of the kernel's configuration; :func:`output_scale`) is given.

    Why a floor: near zero a correct kernel's error is absolute, so a relative error there means nothing. A drawn
    gate of -6.5 makes ``gelu(g) * up`` 4e-10 while its terms are 6.5 and 1.4: float16 rounds that to 0 (a relative
    error of 1 against a tolerance of 1e-3), and the torch backend's float16/bfloat16 GELU on the CPU (torch's own
    ``F.gelu``, whose ``1 + erf`` cancels) returns such values up to 65 % off. On a call of one such element (one
    token of one feature) the normwise relative error is that element's: a correct kernel failed 4 of 47
    conformance runs, and 19 of 4,000 drawn cases of gelu_and_mul in 16 bits.
    Two sources, summed:

    - the format: a value below its smallest normal is held on the fixed grid of its subnormals, so rounding it
      costs up to half that spacing, ``eps * smallest_normal / 2``, whatever the value: ``2**-25`` for float16,
      ``2**-10`` for float8_e4m3fn (0.001 becomes ``2**-9``, twice it); nothing for bfloat16 and float32, which
      keep float32's range. (The smallest normal itself would be too coarse a floor: a float16 softmax over 20000
      features has every output near ``5e-5``, below float16's ``6.1e-5``, and would then pass anything.)
    - the arithmetic: the kernels compute in float32, and where an output is far smaller than the terms it is
      computed from (a product with a vanishing factor, a cancelling sum) float32 rounding errs by units of
      roundoff of the terms, not of the output: :data:`ARITHMETIC` times the output's scale. Measured, the torch
      backend's 16-bit GELU errs by up to 0.06 of that (3.5e-7 at a scale of 6.0); with a share 16 times smaller
      the torch backend still passed 2,000 drawn cases of each gated kernel in each dtype.

    What it lets through: at a typical output it is ``8 * 2**-23`` (1e-6) of it, a tenth of float32's tolerance
    and far under the 16-bit ones, so an error it forgives in an output of ordinary size is one the relative
    tolerance forgives anyway. Only a call whose outputs are all tiny beside the kernel's scale is judged by it: a
    kernel 1 % off escapes on such a call when its outputs' root mean square is below 1e-4 (float32, float16) or
    5e-4 (bfloat16) of the scale. What it still catches: everything else; ``tests/testing/test_tolerances.py`` draws
    thousands of cases of every kernel and dtype, accepts the torch backend on every one, and refuses kernels 1 %
    off or without ``eps``.
    """
    finfo = torch.finfo(dtype)
    return finfo.eps * finfo.smallest_normal / 2 + ARITHMETIC * scale


def output_scale(ref: torch.Tensor) -> float:
    """The root mean square of ``ref``'s finite values (0 when it has none): the size of a typical output."""
    finite = ref[torch.isfinite(ref)].to(torch.float64)
    return float(finite.norm()) / finite.numel() ** 0.5 if finite.numel() else 0.0


#: The dtypes every kernel supports.
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class ConformanceError(AssertionError):
    """A kernel does not do what its spec says: the judge's verdict, with what is wrong.

    Raised, never asserted, so that ``python -O`` (which strips ``assert`` statements) cannot turn the kit into a
    rubber stamp. An ``AssertionError`` all the same: pytest reports it as a failed test, and code that caught the
    kit's ``AssertionError`` before still catches it.
    """

    __module__ = "lazyops.testing"  # where users import it from, and what a traceback names


def __tracebackhide__(excinfo: object) -> bool:  # read by pytest in the frames of the kit's modules
    """A verdict says all there is to say: pytest ends its traceback at the line of the test that asked for it,
    instead of printing the kit's own source above the message (``--fulltrace`` shows everything). Any other error
    keeps the kit's frames: there the kit may be what needs reading."""
    return isinstance(getattr(excinfo, "value", None), ConformanceError)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64 (the plain difference when ``ref`` is all zero or empty)."""
    out64 = out.to(torch.float64).cpu()
    ref64 = ref.to(torch.float64).cpu()
    norm = float(ref64.norm())
    diff = float((out64 - ref64).norm())
    return diff / norm if norm else diff


def check_close(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype,
    what: str = "output",
    tolerance: float | None = None,
    *,
    scale: float | None = None,
) -> float:
    """``out`` has ``ref``'s shape, the kernel's dtype, NaN exactly where ``ref`` has it (a softmax row that is all
    ``-inf``), no other NaN or inf, and is within the dtype's tolerance of ``ref`` elsewhere: ``‖out − ref‖`` at
    most ``tolerance * ‖ref‖`` plus :func:`absolute_tolerance` on each element.

    ``scale`` is the size of a typical output of the kernel (:func:`output_scale` of a batch of its outputs; the
    kit passes that of 64 tokens of the case's configuration); it defaults to ``ref``'s own, which suits a
    ``ref`` of many values, not one or two.

    Returns the relative error (where the absolute floor had to be granted, what is left of it once that is).
    The finiteness check is what catches an element the kernel never wrote, when the allocator handed its output
    a block that :func:`poison` filled with NaN.
    """
    if not dtype.is_floating_point:  # indices (a router's experts) are right or wrong
        return check_exact(out, ref, dtype, what)
    tolerance = TOLERANCE[dtype] if tolerance is None else tolerance
    if not isinstance(out, torch.Tensor):
        raise ConformanceError(f"{what}: a {type(out).__name__}, expected a tensor")
    if out.dtype != dtype:
        raise ConformanceError(f"{what}: dtype {out.dtype}, expected {dtype}")
    check_shape(out, ref, what)
    out, ref = out.cpu(), ref.cpu()
    if out.element_size() == 1:  # torch has no isfinite for float8; widening it is exact
        out = out.to(torch.float64)
    expected_finite = torch.isfinite(ref)
    finite = torch.isfinite(out)
    wrong = finite != expected_finite
    if wrong.any():
        raise ConformanceError(
            f"{what}: {int((~finite & expected_finite).sum())} of {out.numel()} elements are NaN or infinite where "
            f"the reference is finite, {int((finite & ~expected_finite).sum())} finite where it is NaN"
        )
    out, ref = out[expected_finite], ref[expected_finite]
    error = relative_error(out, ref)
    if error <= tolerance:
        return error
    # allowed: the relative tolerance, plus the absolute floor on every element
    floor = absolute_tolerance(dtype, output_scale(ref) if scale is None else scale)
    difference = float((out.to(torch.float64) - ref.to(torch.float64)).norm())
    norm = float(ref.to(torch.float64).norm())
    beyond_floor = max(difference - floor * ref.numel() ** 0.5, 0.0)
    if beyond_floor <= tolerance * norm:
        return beyond_floor / norm if norm else 0.0
    left = beyond_floor / norm if norm else beyond_floor
    granted = f", {left:.3g} beyond an absolute {floor:.1e} an element" if left < 0.99 * error else ""
    raise ConformanceError(f"{what}: relative error {error:.3g} > {tolerance:.0e} ({dtype}){granted}")


def check_exact(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "output") -> float:
    """``out`` equals ``ref`` element for element, in ``dtype`` (an integer result: no tolerance makes sense)."""
    if not isinstance(out, torch.Tensor) or out.dtype != dtype:
        raise ConformanceError(f"{what}: {getattr(out, 'dtype', type(out).__name__)}, expected a {dtype} tensor")
    check_shape(out, ref, what)
    wrong = out.cpu() != ref.cpu().to(dtype)
    if wrong.any():
        first = tuple(wrong.nonzero()[0].tolist())
        raise ConformanceError(
            f"{what}: {int(wrong.sum())} of {wrong.numel()} elements differ, first at {first}: "
            f"{out.cpu()[first].item()} where the reference has {ref.cpu()[first].item()}"
        )
    return 0.0


def check_each(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    *,
    scale: float | None = None,
    relative: float = 0.0,
) -> None:
    """Every element of an in-place result is within one unit in the last place of ``ref``, plus the absolute
    floor (:func:`absolute_tolerance`: float32 rounding of the math, relative to ``scale`` or the largest value
    if that is larger): nothing stale, nothing written twice or astray.

    For tensors the caller owns (``add_rmsnorm``'s residual, ``rope``'s query and key), a norm over the whole
    tensor would let a few wrong elements hide among many right ones; element by element they cannot.

    ``relative``: a further bound relative to each element, for a result computed from another computation's
    float32 rounding rather than rounded once (the fp8 norms' dynamic scales, from the float32 norm's maximum).
    """
    if not dtype.is_floating_point:
        check_exact(out, ref, dtype, what)
        return
    check_shape(out, ref, what)
    if out.numel() == 0:
        return
    ref = ref.to(torch.float64).cpu()
    got = out.to(torch.float64).cpu()
    finite = torch.isfinite(ref)  # an infinite element (a masked logit's -inf) must be exactly that
    largest = float(ref[finite].abs().max()) if finite.any() else 0.0
    floor = absolute_tolerance(dtype, largest if scale is None else max(scale, largest))
    bound = (torch.finfo(dtype).eps + relative) * ref.abs() + floor
    bad = torch.where(finite, ~((got - ref).abs() <= bound), got != ref)  # NaN compares false: bad
    bad &= ~(got.isnan() & ref.isnan())  # ...unless the reference has NaN there (moe_route_tl's NaN rows)
    if bad.any():
        raise ConformanceError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements off, first at {tuple(bad.nonzero()[0].tolist())}: "
            f"{got[bad][0].item()!r} vs {ref[bad][0].item()!r}"
        )


#: How near a rounding tie (relative to the value) a float8 element may round either way: the float32 arithmetic of
#: a correct kernel (its scale rounded to float32, a norm's sum of squares) moves the value it converts by a few
#: units of float32 roundoff times the terms, far under this 2**-10 (1/128 of float8's unit at 1.0).
FP8_TIE_MARGIN = 2.0**-10


def check_fp8_rounding(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Each finite element of a float8 e4m3 ``out`` is ``ref`` (what the conversion receives, in float64, already
    clamped to ±448) rounded to nearest on e4m3's grid, or, only where ``ref`` lies within :data:`FP8_TIE_MARGIN`
    of a tie, the other neighbour: within one float8 unit everywhere, exact off ties. The normwise tolerance of
    :func:`check_close` (1/17) would let a kernel that rounds every element the wrong way pass."""
    ref = ref.to(torch.float64).cpu().reshape(-1)
    got = out.cpu().reshape(-1).to(torch.float64)
    finite = torch.isfinite(ref)
    ref, got = ref[finite], got[finite]
    if not ref.numel():
        return
    nearest = ref.to(torch.float8_e4m3fn)
    magnitude = nearest.view(torch.uint8).to(torch.int16) & 0x7F
    away = ref.abs() > nearest.to(torch.float64).abs()
    other_magnitude = (magnitude + torch.where(away, 1, -1)).clamp(0, 0x7E)
    sign = torch.where(ref < 0, -1.0, 1.0).to(torch.float64)
    other = other_magnitude.to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64) * sign
    near = nearest.to(torch.float64)
    tie = ((ref - (near + other) / 2).abs() <= FP8_TIE_MARGIN * ref.abs()) & (other != near)
    bad = (got != near) & ~(tie & (got == other))
    if bad.any():
        first = int(bad.nonzero()[0])
        raise ConformanceError(
            f"{what}: {int(bad.sum())} of {bad.numel()} float8 elements are not the reference rounded to nearest "
            f"(nor, at a tie, its other neighbour); first: {got[first].item()!r} for {ref[first].item()!r} "
            f"(nearest {near[first].item()!r})"
        )


def check_shape(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    if tuple(out.shape) != tuple(ref.shape):
        raise ConformanceError(f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")


def poison(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device) -> None:
    """Leave a NaN-filled block of an output's size free, so the kernel's output likely reuses it.

    Kernels allocate their own outputs, so a test cannot fill them with NaN beforehand; but the CUDA caching
    allocator (and often malloc) hands a block just freed to the next allocation of its size. An element the
    kernel forgot to write then reads NaN, which :func:`check_close` refuses, rather than a harmless zero. It is a
    likelihood, not a guarantee; the in-place outputs, which the caller does own, are checked element by element.
    """
    block = torch.full(shape, float("nan"), dtype=dtype, device=device)
    del block


class Inputs:
    """One example's random inputs: drawn on the host from the example's seed, then moved to the device.

    The host generator makes an example reproducible from its seed alone, whatever the device.
    """

    def __init__(self, seed: int, device: str | torch.device) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.device = device

    def randn(
        self, *shape: int, dtype: torch.dtype, scale: float = 1.0, device: str | torch.device | None = None
    ) -> torch.Tensor:
        values = torch.randn(*shape, generator=self.generator, dtype=torch.float32) * scale
        return values.to(dtype).to(self.device if device is None else device)

    def randint(
        self, high: int, *shape: int, dtype: torch.dtype, device: str | torch.device | None = None
    ) -> torch.Tensor:
        values = torch.randint(0, high, shape, generator=self.generator, dtype=dtype)
        return values.to(self.device if device is None else device)


def rows(m: int, width: int, max_elements: int) -> int:
    """``m`` cut so that ``m`` rows of ``width`` stay within ``max_elements`` (never below one row, unless 0)."""
    return min(m, max(1, max_elements // max(width, 1)))


def default_max_elements(device: str) -> int:
    """The most elements one input of one example may hold: small on the host, where kernels are slow (or run in
    an interpreter), large on a GPU, where size is what finds the bugs (grid strides, several blocks per row)."""
    return 100_000 if str(device).startswith("cpu") else 2_000_000


def float64(value: Any) -> Any:
    """Floating tensors in float64 for the reference; integer ones (positions) and the rest as they are."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.float64)
    return value


#: How many tokens :func:`output_scales` draws (fewer when a token is wide).
SCALE_TOKENS = 64


def output_scales(kernel_examples: Any, config: Any, case: Case, max_elements: int) -> dict[str, float]:
    """The scale of each result of ``case``'s configuration (its :func:`output_scale`), from the reference over a
    batch of :data:`SCALE_TOKENS` tokens drawn from the case's seed: the size of a typical output, which one call of
    a token or two cannot tell (its outputs may all be near zero, or one dot product that cancels). Every judge of
    a case (:func:`~lazyops.testing.check_case`, :func:`~lazyops.testing.check_large_offsets`) floors by these.
    ``kernel_examples``: the kernel's (``lazyops.testing.cases.examples``)."""
    spec = kernel_examples.spec
    tokens = rows(SCALE_TOKENS, kernel_examples.token_elements(config, case.geometry), max_elements)
    drawn = kernel_examples.example_inputs(config, tokens, Inputs(case.seed, "cpu"), case.geometry)
    results = spec.reference(config, *map(float64, drawn))
    return {name: output_scale(result) for name, result in zip(spec.results, results, strict=True)}
