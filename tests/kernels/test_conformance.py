"""Every specified kernel, in every backend that runs here, against its spec: what the conformance kit checks, and
what a call must refuse.

Parametrized by the kernel list (``lazyops.specs.kernel_names()``) and, through the plugin's ``lazyops_backend``
fixture, by backend: a new kernel or backend is tested here with no test code of its own.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from hypothesis import given

from lazyops import testing
from lazyops._errors import KernelInputError
from lazyops.specs import spec
from lazyops.testing import Case, check_case


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` hold the same bits: ``torch.equal`` but NaN equal to itself (paged attention's example caches
    hold NaN in the slots no sequence reads, so that a kernel reading them fails)."""
    return (
        a.shape == b.shape and a.dtype == b.dtype and torch.equal(*(t.contiguous().view(torch.uint8) for t in (a, b)))
    )


def test_kernel_matches_the_float64_reference(kernels, kernel):
    """Drawn shapes, dtypes and token counts (zero included, several calls per kernel), poisoned outputs, and
    in-place results checked element by element: the kit's check, through the public namespace. Warnings are
    errors: whatever a conformance run warns of lands in every user's test run."""
    factory = kernels.factory(kernel)

    @kernels.settings()
    @given(case=kernels.cases(kernel))
    def check(case: Case) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_case(factory, case, device=kernels.device, max_elements=kernels.max_elements)

    check()


@pytest.mark.parametrize("n", [132, 20000], ids=["one pass", "online"])
def test_a_softmax_row_of_only_minus_inf_warns_nothing(kernels, n):
    """A row that is all ``-inf`` has the softmax NaN, by contract; computing it must not warn in the user's run
    (Triton's interpreter reported the ``-inf - -inf`` it took as numpy's "invalid value encountered in
    subtract")."""
    case = Case("softmax_tl", (n, torch.float16), {}, (3, 1), seed=0, geometry={"mask": "all", "block": 1024})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_case(kernels.factory("softmax_tl"), case, device=kernels.device, max_elements=kernels.max_elements)


def test_factory_signature_is_the_spec(kernels, kernel):
    assert testing.signature_mismatch(kernels.factory(kernel), spec(kernel)) is None


def bad_variants(
    args: tuple[Any, ...], names: tuple[str, ...], free_widths: tuple[str, ...] = ()
) -> dict[str, tuple[Any, ...]]:
    """Calls no kernel may accept, one argument spoilt at a time: a dtype no kernel takes, a wider last dimension
    (a size the factory fixed, or one that disagrees with the other arguments; not for ``free_widths``, inputs whose
    width nothing fixes, as a block table's), a non-contiguous layout."""
    variants = {}
    for index, (name, tensor) in enumerate(zip(names, args, strict=True)):

        def spoilt(value: Any, index: int = index) -> tuple[Any, ...]:
            return (*args[:index], value, *args[index + 1 :])

        variants[f"{name} in float64"] = spoilt(tensor.double())
        if name not in free_widths:
            wider = torch.zeros(*tensor.shape[:-1], tensor.shape[-1] + 1, dtype=tensor.dtype, device=tensor.device)
            variants[f"{name} one wider"] = spoilt(wider)
        if tensor.dim() == 2 and tensor.shape[-1] > 1:
            holder = torch.zeros(*tensor.shape[:-1], 2 * tensor.shape[-1], dtype=tensor.dtype, device=tensor.device)
            holder[..., ::2] = tensor
            variants[f"{name} strided in its last dimension"] = spoilt(holder[..., ::2])
    return variants


def test_bad_calls_are_refused_before_anything_is_written(kernels, kernel):
    names = spec(kernel).inputs
    free_widths = getattr(spec(kernel), "free_widths", ())

    @kernels.drawn_calls(kernel)
    def check(call: Any, args: tuple[Any, ...], case: Case) -> None:
        before = [arg.clone() for arg in args]
        for what, bad in bad_variants(args, names, free_widths).items():
            with pytest.raises(KernelInputError):
                call(*bad)
                pytest.fail(f"{case}: a call with {what} was accepted")
            for name, arg, original in zip(names, args, before, strict=True):
                assert same_bits(arg, original), f"{case}: a refused call ({what}) changed {name}"

    check()


def test_bad_factory_arguments_are_refused(kernels, kernel):
    """A size of zero, a float or a bool for a size, a dtype no kernel takes: refused by the factory."""
    factory = kernels.factory(kernel)

    @kernels.settings(host_examples=3, examples=3)
    @given(case=kernels.cases(kernel))
    def check(case: Case) -> None:
        for index, arg in enumerate(case.args):
            if isinstance(arg, torch.dtype):
                spoilt: tuple[Any, ...] = (torch.int8, torch.float64, "complex64")
            elif isinstance(arg, int) and not isinstance(arg, bool):
                spoilt = (0, -1, float(arg), True)
            else:
                continue
            for bad in spoilt:
                with pytest.raises(KernelInputError):
                    factory(*case.args[:index], bad, *case.args[index + 1 :], **case.kwargs)
                    pytest.fail(f"{case}: argument {index} = {bad!r} was accepted")

    check()


def test_inputs_that_require_grad_are_refused_unless_grad_mode_is_off(kernels, kernel):
    """The kernels are for inference: no backend records an autograd graph, so none may pretend to. Refused before
    anything is written; under ``no_grad`` and ``inference_mode`` the same call runs."""

    @kernels.drawn_calls(kernel)
    def check(call: Any, args: tuple[Any, ...], case: Case) -> None:
        floating = [i for i, arg in enumerate(args) if arg.is_floating_point()]
        for index in floating:
            needing_grad = tuple(
                arg.clone().requires_grad_(i == index) if i in floating else arg for i, arg in enumerate(args)
            )
            before = [arg.detach().clone() for arg in needing_grad]
            with pytest.raises(KernelInputError, match="inference_mode"):
                call(*needing_grad)
            assert all(same_bits(a.detach(), b) for a, b in zip(needing_grad, before, strict=True)), (
                f"{case}: a refused call wrote"
            )
            with torch.no_grad():
                call(*needing_grad)
        with torch.inference_mode():
            call(*(arg.clone() for arg in args))

    check()


def test_tensors_on_another_kind_of_device_are_refused(kernels, kernel):
    if kernels.backend == "torch":
        pytest.skip("the torch backend runs on any device")

    @kernels.drawn_calls(kernel)
    def check(call: Any, args: tuple[Any, ...], case: Case) -> None:
        with pytest.raises(KernelInputError):
            call(*(arg.to(kernels.wrong_device) for arg in args))

    check()
