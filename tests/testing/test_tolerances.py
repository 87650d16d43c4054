"""The judge's tolerances, tried on many drawn cases: a correct kernel is never refused, a wrong one is.

A correct kernel is the torch backend's (what every other backend is compared with); wrong ones are the same
kernels with every result 1 % off, or built without ``eps``. The cases are the conformance run's own (the spec's
strategy, every calling convention), drawn derandomised, so a run is reproducible. The light version runs in
every run (20 times as many cases under ``HYPOTHESIS_PROFILE=exhaustive``); the heavy one, run under that profile
only, draws 2,000 cases a kernel and dtype, as ``python tests/testing/tolerance_sweep.py`` does for the figures.
"""

from __future__ import annotations

import pytest
import torch
from conformance_seeds import failing_seeds
from tolerance_sweep import off_by, scaled, sweep, takes_eps, torch_factory, without_eps

from hypothesis_profiles import examples, exhaustive
from lazyops import testing
from lazyops.specs import kernel_names, spec
from lazyops.testing import Case
from lazyops.testing._compare import DTYPES

KERNEL_DTYPES = [
    pytest.param(kernel, dtype, id=f"{kernel}-{str(dtype)[6:]}") for kernel in kernel_names() for dtype in DTYPES
]


def check_tolerances(kernel: str, dtype: torch.dtype, cases: int, wrong_cases: int, heavy: bool = False) -> None:
    if spec(kernel).judgement == "draws":
        pytest.skip(
            "a sampler is judged by its draws, with no tolerance: tests/testing/sampling_sweep.py measures its "
            "false failures, tests/kernels/test_sample.py refuses wrong samplers"
        )
    if spec(kernel).judgement == "exact":
        pytest.skip("integer results, judged element by element: no tolerance to try")
    right = sweep(torch_factory(kernel), kernel, dtype, cases)
    assert right.cases == cases
    assert not right.refused, f"{right}; the first refused: {right.refused[0][1]}\n{right.refused[0][0]!r}"

    # Not every case can tell: a softmax case whose rows are all masked has only NaN to compare, and bfloat16
    # rounds a value 1 % up back to within its tolerance of 0.8 % now and then. A conformance run draws 25 cases.
    off = sweep(scaled(kernel, off_by(kernel)), kernel, dtype, wrong_cases)
    assert len(off.refused) >= off.cases / 2, str(off)

    # eps shows only where it is not small beside the row's mean square: in the cases drawn with eps half of it (0.5,
    # and 8.5 for the add-norms, whose residual is drawn 4 times wider), where a forgotten eps is 18 % off.
    if takes_eps(kernel):
        forgets = sweep(without_eps(kernel), kernel, dtype, wrong_cases)
        assert forgets.refused, str(forgets)


@pytest.mark.parametrize(("kernel", "dtype"), KERNEL_DTYPES)
def test_a_correct_kernel_passes_and_a_wrong_one_fails(kernel, dtype):
    check_tolerances(kernel, dtype, cases=examples(30), wrong_cases=examples(15))


@pytest.mark.slow
@pytest.mark.skipif(not exhaustive(), reason="2,000 cases a kernel and dtype: run with HYPOTHESIS_PROFILE=exhaustive")
@pytest.mark.parametrize(("kernel", "dtype"), KERNEL_DTYPES)
def test_a_correct_kernel_passes_every_one_of_many_cases(kernel, dtype):
    check_tolerances(kernel, dtype, cases=2000, wrong_cases=300, heavy=True)


#: Cases the torch backend failed on before the absolute floor: one token of one feature, its gate so negative
#: that the output is 1e-12 to 2e-4 against a scale of 5 to 9. float16 rounds such a value to 0 or a subnormal,
#: and torch's ``F.gelu`` (the backend's 16-bit path on the CPU) cancels in ``1 + erf``.
TINY_OUTPUTS = [
    Case("gelu_and_mul_tl", (1, dtype), {"approximate": approximate}, (1,), seed)
    for dtype in (torch.float16, torch.bfloat16)
    for approximate, seed in [
        ("none", 54),
        ("none", 355),
        ("none", 2578),
        ("none", 207667385),
        ("tanh", 406),
        ("tanh", 1641826583),
    ]
]


def shifted(kernel: str, by: float):
    """The torch backend's ``kernel`` (one that returns its output) with ``by`` added to every element."""
    factory = torch_factory(kernel)

    def wrong_factory(*args, **kwargs):
        right = factory(*args, **kwargs)
        return lambda *inputs: right(*inputs) + by

    return wrong_factory


@pytest.mark.parametrize("case", TINY_OUTPUTS, ids=str)
def test_an_output_near_zero_is_judged_by_its_scale_not_its_size(case):
    assert testing.check_case(torch_factory(case.kernel), case, device="cpu") < testing.TOLERANCE[case.dtype]
    # an error of 1e-4 of the scale is still refused, however small the output
    with pytest.raises(testing.ConformanceError, match="relative error"):
        testing.check_case(shifted(case.kernel, 1e-3), case, device="cpu")


def test_a_wide_softmax_is_still_judged_by_its_values():
    """A float16 softmax over 20000 features has every output near 5e-5, below float16's smallest normal: a floor
    of that size would let any softmax pass. The floor scales with the outputs."""
    case = Case("softmax_tl", (20000, torch.float16), {}, (2,), seed=3, geometry={"mask": "none", "block": 1024})
    assert testing.check_case(torch_factory("softmax_tl"), case, device="cpu") < testing.TOLERANCE[torch.float16]
    with pytest.raises(testing.ConformanceError, match="relative error"):
        testing.check_case(scaled("softmax_tl", 1.01), case, device="cpu")


def test_an_in_place_result_near_zero_is_judged_by_its_scale():
    """``check_each`` allowed float32 rounding relative to the largest element: of a residual of one tiny element
    that is nothing, and a correct float16 sum rounded to a subnormal was refused."""
    ref = torch.tensor([[3e-7]], dtype=torch.float64)  # float16 holds 2.98e-7 (5 subnormal units of 5.96e-8)
    got = ref.to(torch.float16)
    testing.check_each(got, ref, torch.float16, "residual")
    with pytest.raises(testing.ConformanceError, match="residual: 1 of 1 elements off"):
        testing.check_each(got * 2, ref, torch.float16, "residual")
    # given the kernel's scale, an error of 1e-4 of it is refused however small the element
    testing.check_each(got, ref, torch.float16, "residual", scale=4.0)
    with pytest.raises(testing.ConformanceError, match="residual: 1 of 1 elements off"):
        testing.check_each(got + 4e-4, ref, torch.float16, "residual", scale=4.0)


@pytest.mark.slow
@pytest.mark.skipif(not exhaustive(), reason="100 conformance runs a kernel: run with HYPOTHESIS_PROFILE=exhaustive")
@pytest.mark.parametrize("kernel", kernel_names())
def test_a_conformance_run_never_fails_the_torch_backend_whatever_the_seed(kernel):
    """The flake rate the issue measured (4 of 47 runs of gelu_and_mul_tl failed): 100 seeds, no failure."""
    failed = failing_seeds(kernel, range(100))
    assert not failed, failed
