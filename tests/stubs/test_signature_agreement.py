"""Every backend's factories have the canonical signatures: one stub is true whichever backend serves a kernel.

The canonical signatures are the torch backend's. A backend that drifts (a renamed parameter, another
default, a narrower dtype annotation, a different kernel call) fails here with one sentence per difference naming
the backend, the kernel and the parameter.
"""

from __future__ import annotations

import importlib.util
from typing import Callable

import pytest
import torch

from lazyops._errors import BackendError
from lazyops._registry import BUILTINS, Registry
from lazyops._resolve import LAST_RESORT
from lazyops._signature import signature_mismatches
from lazyops._stubgen import factory

#: The package each built-in backend's kernel modules import, and how to get it.
NEEDS = {
    "triton": ("triton", "pip install 'lazyops[triton]'"),
    "tilelang": ("tilelang", "pip install 'lazyops[tilelang]'"),
}


@pytest.mark.parametrize("backend", [name for name, _, _ in BUILTINS if name != LAST_RESORT])
def test_every_factory_of_a_builtin_backend_has_the_canonical_signature(backend: str):
    package, install = NEEDS[backend]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"backend {backend!r} needs the package {package!r}, which is not installed: {install}")
    registry = Registry.discover()
    try:
        exports = registry[backend].exports()
    except BackendError as error:
        pytest.skip(f"backend {backend!r} cannot list its kernels here: {error}")
    shared = sorted(exports & registry[LAST_RESORT].exports())
    assert shared, f"backend {backend!r} exports none of the torch backend's kernels"
    problems = []
    for kernel in shared:
        canonical = factory(registry, LAST_RESORT, kernel)
        problems += signature_mismatches(kernel, backend, factory(registry, backend, kernel), LAST_RESORT, canonical)
    assert not problems, "\n".join(problems)


# -- the comparison itself, on factories written to disagree ---------------------------------------------------------
def canonical_rmsnorm() -> Callable[..., object]:
    return factory(Registry.discover(), LAST_RESORT, "rmsnorm_tl")


def mismatches(function: Callable[..., object]) -> list[str]:
    return signature_mismatches("rmsnorm_tl", "fake", function, LAST_RESORT, canonical_rmsnorm())


def test_a_factory_written_with_a_callable_return_type_agrees_with_the_protocol():
    def rmsnorm_tl(
        n: int, dtype: torch.dtype | str, eps: float = 1e-6, *, weight_dtype: torch.dtype | str | None = None, weight_offset: float = 0.0
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    assert mismatches(rmsnorm_tl) == []


def test_a_narrower_annotation_is_named_with_the_backend_and_the_parameter():
    def rmsnorm_tl(
        n: int, dtype: torch.dtype, eps: float = 1e-6, *, weight_dtype: torch.dtype | str | None = None, weight_offset: float = 0.0
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    (problem,) = mismatches(rmsnorm_tl)
    assert problem == (
        "backend 'fake', rmsnorm_tl: parameter 'dtype' is annotated torch.dtype; the canonical signature ('torch') has "
        "torch.dtype | str"
    )


def test_a_different_default_a_renamed_parameter_and_another_kernel_call_are_each_named():
    def rmsnorm_tl(
        n: int, dtype: torch.dtype | str, epsilon: float = 1e-5, *, weight_dtype: torch.dtype | str | None = None, weight_offset: float = 0.0
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    problems = mismatches(rmsnorm_tl)
    assert (
        "backend 'fake', rmsnorm_tl: parameter 'eps' is missing (the canonical signature ('torch') has `eps: float = 1e-06`)"
    ) in problems
    assert (
        "backend 'fake', rmsnorm_tl: parameter 'epsilon' is not in the canonical signature ('torch') (it has (n, dtype, eps, "
        "weight_dtype, weight_offset))"
    ) in problems
    assert (
        "backend 'fake', rmsnorm_tl: returns a kernel (torch.Tensor) -> torch.Tensor; the canonical signature ('torch') returns "
        "a kernel (torch.Tensor, torch.Tensor) -> torch.Tensor"
    ) in problems

    def with_default(
        n: int, dtype: torch.dtype | str, eps: float = 1e-5, *, weight_dtype: torch.dtype | str | None = None, weight_offset: float = 0.0
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    assert mismatches(with_default) == [
        "backend 'fake', rmsnorm_tl: parameter 'eps' has default 1e-05; the canonical signature ('torch') has default 1e-06"
    ]


def test_order_and_kind_are_named_and_a_missing_annotation_is_no_disagreement():
    def rmsnorm_tl(
        dtype, n: int, *, eps: float = 1e-6, weight_dtype: torch.dtype | str | None = None, weight_offset: float = 0.0
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    problems = mismatches(rmsnorm_tl)
    assert (
        "backend 'fake', rmsnorm_tl: parameters are in the order (dtype, n, eps, weight_dtype, weight_offset); the "
        "canonical signature ('torch') has (n, dtype, eps, weight_dtype, weight_offset)"
    ) in problems
    assert (
        "backend 'fake', rmsnorm_tl: parameter 'eps' is keyword-only; the canonical signature ('torch') has positional or keyword"
    ) in problems
    # A factory may leave annotations out (third-party ones often do); one it writes must agree.
    assert not any("'dtype' is annotated" in problem for problem in problems)
    assert len(problems) == 2
