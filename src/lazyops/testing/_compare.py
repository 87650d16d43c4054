"""How a kernel's output is judged: against the float64 reference, by relative error, with tolerances per dtype.

One judgement for every backend, the built-ins and third-party ones alike, so that "passes the conformance suite"
means the same thing everywhere.
"""

from __future__ import annotations

import torch

#: ‖out − ref‖ / ‖ref‖ allowed per dtype. For 16-bit types it is one unit in the last place at 1.0 (torch's
#: ``finfo.eps``): the kernels compute in float32 and round once at the store, which a GPU does to nearest (half
#: that error) and Triton's interpreter does for bfloat16 by truncation (under a full unit). For float32 what is
#: left is float32 arithmetic: softmax's ``exp(x - max)`` over a wide row of spread values errs by about
#: ``|x - max|`` units (2.8e-6 seen at n = 20000), matmul accumulates over k. Any real slip (TF32, a 16-bit
#: intermediate, a wrong element) is orders of magnitude above these.
#:
#: ``float8_e4m3fn`` (the fp8 norms' output) has 3 mantissa bits: one round-to-nearest errs by at most half a unit,
#: ``2**-4`` of the value's power of two, which relative to the value is largest just below the first midpoint,
#: ``2**-4 / (1 + 2**-4) = 1/17 ≈ 0.0588``. Every element at that worst point bounds the normwise error too, so
#: 0.06 is what a correct kernel can reach (it typically sees 0.026); a wrong scale, a dropped weight, a missed
#: clamp or a garbled element is far above it. Near zero see :data:`ABSOLUTE_TOLERANCE`.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float8_e4m3fn: 0.06}

#: What each element may be off by in absolute terms, for dtypes whose subnormals ordinary outputs reach: below
#: ``2**-6`` float8_e4m3fn keeps a fixed spacing of ``2**-9``, so a small value rounds by up to ``2**-10``
#: whatever its size (``0.001`` becomes ``2**-9``, twice it). Relative to a norm of a few such values (one token of
#: a narrow row) that is a large relative error, and no error at all.
ABSOLUTE_TOLERANCE = {torch.float8_e4m3fn: 2.0**-10}

#: The dtypes every kernel supports.
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64 (the plain difference when ``ref`` is all zero or empty)."""
    out64 = out.to(torch.float64).cpu()
    ref64 = ref.to(torch.float64).cpu()
    norm = float(ref64.norm())
    diff = float((out64 - ref64).norm())
    return diff / norm if norm else diff


def check_close(
    out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "output", tolerance: float | None = None
) -> float:
    """``out`` has ``ref``'s shape, the kernel's dtype, NaN exactly where ``ref`` has it (a softmax row that is all
    ``-inf``), no other NaN or inf, and is within the dtype's tolerance of ``ref`` elsewhere.

    Returns the relative error (where a dtype's :data:`ABSOLUTE_TOLERANCE` had to be granted, what is left of it
    once that is). The finiteness check is what catches an element the kernel never wrote, when the
    allocator handed its output a block that :func:`poison` filled with NaN.
    """
    tolerance = TOLERANCE[dtype] if tolerance is None else tolerance
    assert isinstance(out, torch.Tensor), f"{what}: a {type(out).__name__}, expected a tensor"
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    out, ref = out.cpu(), ref.cpu()
    if out.element_size() == 1:  # torch has no isfinite for float8; widening it is exact
        out = out.to(torch.float64)
    expected_finite = torch.isfinite(ref)
    finite = torch.isfinite(out)
    wrong = finite != expected_finite
    assert not wrong.any(), (
        f"{what}: {int((~finite & expected_finite).sum())} of {out.numel()} elements are NaN or infinite where the "
        f"reference is finite, {int((finite & ~expected_finite).sum())} finite where it is NaN"
    )
    out, ref = out[expected_finite], ref[expected_finite]
    error = relative_error(out, ref)
    floor = ABSOLUTE_TOLERANCE.get(dtype, 0.0)
    if error > tolerance and floor:
        # allowed: the relative tolerance, plus the dtype's absolute rounding near zero on every element
        difference = float((out.to(torch.float64) - ref.to(torch.float64)).norm())
        norm = float(ref.to(torch.float64).norm())
        beyond_floor = difference - floor * ref.numel() ** 0.5
        if beyond_floor <= tolerance * norm:
            return max(beyond_floor, 0.0) / norm if norm else 0.0
    assert error <= tolerance, f"{what}: relative error {error:.3g} > {tolerance:.0e} ({dtype})"
    return error


def check_each(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Every element of an in-place result is within one unit in the last place of ``ref`` (plus float32 rounding
    of the math, relative to the largest value): nothing stale, nothing written twice or astray.

    For tensors the caller owns (``add_rmsnorm``'s residual, ``rope``'s query and key), a norm over the whole
    tensor would let a few wrong elements hide among many right ones; element by element they cannot.
    """
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.numel() == 0:
        return
    ref = ref.to(torch.float64).cpu()
    got = out.to(torch.float64).cpu()
    bound = torch.finfo(dtype).eps * ref.abs() + 8 * torch.finfo(torch.float32).eps * ref.abs().max()
    bad = ~((got - ref).abs() <= bound)  # NaN compares false, so it counts as bad
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.numel()} elements off, first at {tuple(bad.nonzero()[0].tolist())}: "
        f"{got[bad][0].item()!r} vs {ref[bad][0].item()!r}"
    )


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
