"""``run_conformance``: every kernel a backend exports, checked against the float64 reference with hypothesis.

The factories are taken from the backend itself through the registry (the same path ``lazyops.<name>`` takes,
without any configuration), so a third-party backend registered by entry point is checked exactly as the
built-ins are, and running the suite changes nothing about what ``lazyops`` resolves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, given

import lazyops
from lazyops import _api
from lazyops._errors import BackendError, ConfigError
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing._classes import class_cases
from lazyops.testing._compare import (
    TOLERANCE,
    ConformanceError,
    Inputs,
    __tracebackhide__,  # noqa: F401 - the kit's verdicts end at the test
    check_close,
    check_each,
    check_fp8_rounding,
    default_max_elements,
    float64,
    output_scales,
    poison,
    rows,
)
from lazyops.testing._layout import lay_out
from lazyops.testing._offsets import check_large_offsets
from lazyops.testing.cases import examples

PASSED = "passed"
FAILED = "FAILED"
NOT_EXPORTED = "not exported"
NO_SPEC = "no spec"


@dataclass
class KernelResult:
    kernel: str
    status: str
    examples: int = 0
    #: the largest relative error seen, with the dtype it was seen in (the tolerance depends on it)
    worst_error: float = 0.0
    worst_dtype: Any = None
    #: why it failed: the exception, as ``Type: message``
    message: str = ""
    #: the smallest failing example hypothesis found (rerun it with ``rerun``)
    case: Case | None = None
    #: the ``lazyops.testing`` function that reruns ``case``
    rerun: str = "check_case"


@dataclass
class ConformanceReport:
    backend: str
    device: str
    max_examples: int
    results: list[KernelResult]
    #: one case per configuration class (``run_conformance(per_class=True)``) rather than ``max_examples`` drawn
    per_class: bool = False

    def by_status(self, status: str) -> list[KernelResult]:
        return [result for result in self.results if result.status == status]

    def kernels(self, status: str) -> list[str]:
        """The names of the kernels whose result is ``status``, in the order they were checked."""
        return [result.kernel for result in self.by_status(status)]

    @property
    def passed(self) -> list[str]:
        return self.kernels(PASSED)

    @property
    def failed(self) -> list[str]:
        return self.kernels(FAILED)

    @property
    def not_exported(self) -> list[str]:
        """The specified kernels the backend does not export (a partial port)."""
        return self.kernels(NOT_EXPORTED)

    @property
    def unchecked(self) -> list[str]:
        """The kernels the backend exports that lazyops has no spec for."""
        return self.kernels(NO_SPEC)

    def __str__(self) -> str:
        cases = "one case per configuration class" if self.per_class else f"up to {self.max_examples} examples"
        lines = [f"lazyops conformance of backend {self.backend!r} on {self.device} ({cases} per kernel):"]
        for result in self.by_status(PASSED):
            worst = ""
            if result.worst_dtype is not None:
                dtype = str(result.worst_dtype).removeprefix("torch.")
                worst = (
                    f", worst relative error {result.worst_error:.1e} "
                    f"({dtype}, tolerance {TOLERANCE[result.worst_dtype]:.0e})"
                )
            lines.append(f"  passed        {result.kernel}: {result.examples} examples{worst}")
        for result in self.by_status(FAILED):
            lines.append(f"  FAILED        {result.kernel}: {result.message}")
            if result.case is not None:
                lines.append(f"                smallest failing case: {result.case}")
                lines.append(f"                rerun it: lazyops.testing.{result.rerun}(factory, {result.case!r})")
        if self.not_exported:
            lines.append(f"  not exported  {', '.join(self.not_exported)}")
        if self.unchecked:
            lines.append(
                f"  unchecked     {', '.join(self.unchecked)} (lazyops.testing has no conformance check for it)"
            )
        return "\n".join(lines)


def default_device(backend: str) -> str:
    """Where ``backend``'s kernels take tensors: its ``default_device()`` hook (``"cpu"`` when it has none)."""
    return _api.default_device(backend)


def check_case(
    factory: Callable[..., Any], case: Case, *, device: str | None = None, max_elements: int | None = None
) -> float:
    """Run one example: build the kernel with ``factory``, call it on ``case``'s inputs, compare with float64.

    For each token count of the case: the kernel's spec draws the inputs (seeded by the case), the float64
    reference computes what the call must produce, a NaN-filled block of the output's size is left free (so an
    element the kernel never writes reads NaN), and the call's results are judged: the returned tensor by relative
    error within the dtype's tolerance (above an absolute floor at the size of the configuration's typical output,
    :func:`output_scales`), each input updated in place element by element, and every element the reference
    leaves as it was must stay bit-identical (rope's features past the rotary dimension, say).

    Returns the worst relative error ``‖out − ref‖ / ‖ref‖`` over the calls; raises ``ConformanceError`` (an
    ``AssertionError``) saying what is wrong (an error over the dtype's tolerance, a NaN, a wrong shape or dtype, an
    in-place tensor not updated).
    """
    return judge_case(factory, case, device=device, max_elements=max_elements)[0]


def judge_case(
    factory: Callable[..., Any], case: Case, *, device: str | None = None, max_elements: int | None = None
) -> tuple[float, Any]:
    """:func:`check_case`, returning the worst relative error together with the dtype it was judged in: the one
    closest to its tolerance. A kernel's results need not share a dtype (the fp8 norms return float8 and update
    their residual in the activations' dtype), and an error means something only beside its own tolerance."""
    import torch

    from lazyops.specs import spec as spec_of_kernel

    spec = spec_of_kernel(case.kernel)
    if spec.judgement == "draws":  # a sampler: judged by what it draws (``_draws``)
        from lazyops.testing._draws import judge_draws

        return judge_draws(factory, case, device=device, max_elements=max_elements)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    max_elements = max_elements or default_max_elements(device)
    config = spec.bind(*case.args, **case.kwargs)
    kernel = case.build(factory)
    draw = Inputs(case.seed, device)
    scales = output_scales(examples(spec), config, case, max_elements)
    worst = 0.0
    worst_dtype = spec.out_dtype(config) if spec.returns == "out" else config.dtype

    def judged(error: float, dtype: Any) -> None:
        nonlocal worst, worst_dtype
        if not dtype.is_floating_point:  # integers are judged exactly: nothing to rank
            return
        if error / TOLERANCE[dtype] > worst / TOLERANCE[worst_dtype]:
            worst, worst_dtype = error, dtype

    for requested in case.tokens:
        tokens = rows(requested, examples(spec).token_elements(config, case.geometry), max_elements)
        drawn = examples(spec).example_inputs(config, tokens, draw, case.geometry)
        expected = dict(zip(spec.results, spec.reference(config, *(float64(arg) for arg in drawn)), strict=True))
        before = {name: drawn[spec.inputs.index(name)].clone() for name in spec.mutates}
        call = lay_out(spec, config, drawn, case.layout, draw)
        args = call.args
        if "out" in expected and call.out is None:
            poison(tuple(expected["out"].shape), spec.out_dtype(config), device)
        returned = kernel(*args) if call.out is None else kernel(*args, out=call.out)
        what = f"M={tokens}"
        if spec.returns == "out":
            if call.out is not None and returned is not call.out:
                raise ConformanceError(f"{what}: {case.kernel} given out= must return that tensor")
            if not isinstance(returned, torch.Tensor):
                raise ConformanceError(f"{what}: a {type(returned).__name__}, expected a tensor")
            leading = args[spec.inputs.index(spec.row_inputs[0])].shape[:-1] if spec.row_inputs else None
            if leading is not None:
                want_shape = (*leading, expected["out"].shape[-1])
                if tuple(returned.shape) != want_shape:
                    raise ConformanceError(
                        f"{what}: shape {tuple(returned.shape)}, expected {want_shape} (the input's leading dimensions)"
                    )
            flat = returned.reshape(expected["out"].shape)
            out_dtype = spec.out_dtype(config)
            judged(
                check_close(
                    flat, expected["out"], out_dtype, what=what, scale=scales["out"], tolerance=spec.tolerance(config)
                ),
                out_dtype,
            )
            if out_dtype == torch.float8_e4m3fn:
                check_fp8_rounding(flat, expected["out"], what)
        else:
            want = tuple(args[spec.inputs.index(name)] for name in spec.returns)
            if not (
                isinstance(returned, tuple)
                and len(returned) == len(want)
                and all(got is arg for got, arg in zip(returned, want, strict=True))
            ):
                raise ConformanceError(
                    f"{what}: {case.kernel} must return its arguments ({', '.join(spec.returns)}), updated in place"
                )
        for name in spec.mutates:
            tensor = args[spec.inputs.index(name)].reshape(before[name].shape)
            # judged in the input's own dtype: the factory's for most, float8 for kv_cache_write's fp8 cache
            stored = before[name].dtype
            relative = TOLERANCE[stored] if name in spec.derived_results else 0.0
            check_each(tensor, expected[name], stored, what=f"{what}: {name}", scale=scales[name], relative=relative)
            judged(check_close(tensor, expected[name], stored, what=f"{what}: {name}", scale=scales[name]), stored)
            unchanged = (float64(before[name]) == expected[name]).cpu()
            if not torch.equal(tensor.cpu()[unchanged], before[name].cpu()[unchanged]):
                raise ConformanceError(f"{what}: {name} changed where the reference leaves it as it was")
        call.check_untouched(what)
    return worst, worst_dtype


def run_conformance(
    backend: str,
    *,
    max_examples: int = 25,
    kernels: Iterable[str] | None = None,
    device: str | None = None,
    max_elements: int | None = None,
    seed: int | None = 0,
    per_class: bool = False,
) -> ConformanceReport:
    """Check every kernel ``backend`` exports against the float64 reference; raise ``ConformanceError`` (an
    ``AssertionError``) on a failure.

    ``backend`` is a registered name (built-in, or third-party through the ``lazyops.backends`` entry point). For
    each kernel: the factory's signature must be the reference's (parameter names, kinds and defaults), then
    hypothesis draws up to ``max_examples`` cases (shapes, dtypes, token counts, seeds) and :func:`check_case`
    runs each, then :func:`~lazyops.testing.check_large_offsets` runs the last with its rows 2**31 elements and more
    apart (views of a 4 GiB buffer only on a CUDA device with 16 GiB free). ``kernels`` limits the check to those
    names. A kernel the backend does not export is listed in the report, not failed: a partial port is a state, not
    an error (pass ``kernels=`` to insist on some). ``device`` defaults to CUDA where torch sees it;
    ``max_elements`` caps an input's size (smaller on the host).

    ``seed`` picks the cases: a seed draws the same ones on every run and machine (with one hypothesis version), so
    a backend's CI passes or fails on its kernels, never on the draw, and a failure reproduces by running again.
    It is 0 unless given; pass other seeds to look further, or None for fresh cases on every run.

    ``per_class=True`` checks one drawn case per configuration class instead of ``max_examples`` drawn ones: a case
    for each dtype the backend serves and each option the spec draws (a window, an fp8 cache, a float32 weight),
    two to four a kernel (:func:`class_cases`), unshrunk. For a backend that compiles each configuration
    (TileLang on a GPU: seconds a program), it is one compile per class rather than one per example.

    Returns the :class:`ConformanceReport` (its ``str`` is a readable table) when nothing failed.
    """
    from lazyops.specs import kernel_names

    specified = kernel_names()

    if backend not in lazyops.backends():
        raise ConfigError(
            f"run_conformance({backend!r}): no backend of that name is registered; known backends: "
            f"{', '.join(lazyops.backends())}"
        )
    reason = _api.unavailable_reason(backend)
    if reason:
        raise BackendError(f"run_conformance: {reason}", backend=backend)
    exported = _api.exports(backend)
    wanted = list(specified) if kernels is None else list(dict.fromkeys(kernels))
    unknown = [kernel for kernel in wanted if kernel not in specified]
    if unknown:
        raise ValueError(
            f"run_conformance(kernels=...): no conformance check for {', '.join(map(repr, unknown))}; "
            f"lazyops.testing checks {', '.join(specified)}"
        )
    device = device or default_device(backend)
    max_elements = max_elements or default_max_elements(device)

    results = []
    for kernel in wanted:
        if kernel not in exported:
            results.append(KernelResult(kernel, NOT_EXPORTED))
            continue
        results.append(_check_kernel(backend, kernel, device, max_elements, max_examples, seed, per_class))
    if kernels is None:
        results += [KernelResult(kernel, NO_SPEC) for kernel in sorted(exported - set(specified))]

    report = ConformanceReport(backend, str(device), max_examples, results, per_class)
    if report.failed:
        raise ConformanceError(str(report))
    return report


def _check_kernel(
    backend: str, kernel: str, device: str, max_elements: int, max_examples: int, seed: int | None, per_class: bool
) -> KernelResult:
    from lazyops.specs import spec

    kernel_spec = spec(kernel)
    try:
        factory = _api.kernel_factory(backend, kernel)
    except Exception as error:  # noqa: BLE001 - it cannot be imported, or its stub is wrong: this kernel's failure
        return KernelResult(kernel, FAILED, message=_one_error(error))
    mismatch = signature_mismatch(factory, kernel_spec, backend)
    if mismatch:
        return KernelResult(kernel, FAILED, message=mismatch)

    result = KernelResult(kernel, PASSED)
    current: list[Case] = []

    def judge(case: Case) -> None:
        current[:] = [case]
        error, dtype = judge_case(factory, case, device=device, max_elements=max_elements)
        result.examples += 1
        # Compared as a share of each dtype's tolerance: a bfloat16 error of 1e-3 is closer to passing than a
        # float32 one of 1e-5 is.
        if dtype not in TOLERANCE:  # integer results (moe_align_tl's ids) are judged exactly: nothing to rank
            return
        if result.worst_dtype is None or error / TOLERANCE[dtype] > result.worst_error / TOLERANCE[result.worst_dtype]:
            result.worst_error, result.worst_dtype = error, dtype

    @hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        database=None,  # a library call should leave no .hypothesis directory behind in the caller's tree
        derandomize=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,  # the report below names the failing case itself
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        # a backend that declines some configurations leaves the rest drawn: filtering them is not a defect
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(case=strategies.cases(kernel, factory))
    def check(case: Case) -> None:
        judge(case)

    if seed is not None:
        check = hypothesis.seed(seed)(check)
    try:
        if per_class:
            for case in class_cases(kernel, factory, seed=seed or 0):
                judge(case)
        else:
            check()
    except Exception as error:  # noqa: BLE001 - whatever the kernel raises is its failure, reported with the case
        result.status = FAILED
        result.message = _one_error(error)
        result.case = current[0] if current else None
    if result.status == PASSED and current:
        _check_offsets_past_int32(factory, current[0], device, result)
    return result


def _check_offsets_past_int32(factory: Callable[..., Any], case: Case, device: str, result: KernelResult) -> None:
    """The last drawn case again, its rows (or unused dimensions) 2**31 elements and more apart
    (:func:`~lazyops.testing.check_large_offsets`; rows that far apart only where the device has the memory)."""
    try:
        check_large_offsets(factory, case, device=device)
    except Exception as error:  # noqa: BLE001 - as above: the kernel's failure, reported with the case
        result.status = FAILED
        result.message = f"offsets past 2**31 elements: {_one_error(error)}"
        result.case = case
        result.rerun = "check_large_offsets"


def _one_error(error: BaseException) -> str:
    """``Type: message`` for the report; an assertion's first line only (what pytest's rewriting appends repeats it)."""
    text = str(error)
    if isinstance(error, AssertionError):
        text = text.partition("\n")[0]
    return f"{type(error).__name__}: {text}".replace("\n", "\n                ")


def signature_mismatch(factory: Callable[..., Any], reference: Any, backend: str = "under test") -> str | None:
    """Why ``factory`` cannot stand for the reference (``reference``: a kernel's spec, or a factory), or None.

    The one signature checker lazyops has (:func:`lazyops._signature.signature_mismatches`): parameter names,
    order, kinds, defaults and annotations, and the kernel the factory returns.
    """
    from lazyops._signature import signature_mismatches
    from lazyops.specs import KernelSpec

    if isinstance(reference, KernelSpec):
        kernel, expected = reference.name, _signature_holder(reference)
    else:
        kernel, expected = getattr(reference, "__name__", "the kernel"), reference
    problems = signature_mismatches(kernel, backend, factory, "lazyops.specs", expected)
    return "; ".join(problems) or None


def _signature_holder(spec: Any) -> Callable[..., Any]:
    """A function that carries ``spec``'s factory signature (what the signature checker reads)."""

    def factory(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    factory.__signature__ = spec.signature()  # type: ignore[attr-defined]
    factory.__module__ = type(spec).__module__
    return factory
