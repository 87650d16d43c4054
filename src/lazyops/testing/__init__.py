"""The conformance kit: how every backend's kernels are checked, for backend authors to check theirs the same way.

One reference per kernel, in its spec (``lazyops.specs``): the kernel's definition and, computed here in float64,
the yardstick every backend is measured against. Nothing in this package re-implements the math.

- :func:`run_conformance` (``run_conformance("mybackend")``) checks every kernel a registered backend exports and
  raises :class:`ConformanceError` (an ``AssertionError``, raised even under ``python -O``) listing what failed;
  with the ``lazyops_backend`` fixture of the pytest plugin, one test checks every backend that runs on the
  machine.
- :func:`check_case` runs one example (a :class:`Case`) of one kernel against a factory.
- :func:`class_cases` draws one case per configuration class (each dtype, each option set away from its default):
  ``run_conformance(per_class=True)`` checks those, one compile each where a backend compiles per configuration.
- :func:`check_large_offsets` runs one example with its rows, or its unused batch dimension, 2**31 elements or
  more apart: what a kernel computing offsets in 32 bits gets wrong (the kit runs it after each kernel's cases).
- :data:`REFERENCES` maps each kernel to its float64 reference; :mod:`lazyops.testing.strategies` holds the
  hypothesis strategies (shapes, dtypes, token counts, whole cases).
- Each kernel's reference lives in its spec (``lazyops.specs.rmsnorm``...), its cases, inputs and traffic in its
  examples (``lazyops.testing.cases.rmsnorm``...): the kit holds the judging, the specs what is judged.

This package imports torch and hypothesis (``pip install 'lazyops[test]'``); ``import lazyops`` never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazyops.testing import strategies
from lazyops.testing._case import Case, Layout
from lazyops.testing._classes import class_cases, classes_of
from lazyops.testing._compare import (
    DTYPES,
    TOLERANCE,
    ConformanceError,
    Inputs,
    check_close,
    check_each,
    poison,
    relative_error,
    rows,
)
from lazyops.testing._conformance import (
    ConformanceReport,
    KernelResult,
    check_case,
    default_device,
    run_conformance,
    signature_mismatch,
)
from lazyops.testing._offsets import check_large_offsets
from lazyops.testing.cases import examples

__all__ = [
    "DTYPES",
    "REFERENCES",
    "TOLERANCE",
    "Case",
    "ConformanceError",
    "ConformanceReport",
    "Inputs",
    "KernelResult",
    "Layout",
    "check_case",
    "check_close",
    "check_each",
    "check_large_offsets",
    "class_cases",
    "classes_of",
    "default_device",
    "examples",
    "poison",
    "reference",
    "relative_error",
    "rows",
    "run_conformance",
    "signature_mismatch",
    "strategies",
]


def reference(kernel: str) -> Callable[..., Any]:
    """The float64 reference of ``kernel``: ``reference("rmsnorm_tl")(x, weight, n=..., dtype=..., eps=...)``.

    It takes the kernel call's tensors and the factory's arguments, and returns what the call must produce (the
    returned tensor, then each input it updates in place), computed in float64.
    """
    from lazyops.specs import spec

    kernel_spec = spec(kernel)

    def float64_reference(*tensors: Any, **factory_arguments: Any) -> Any:
        import torch

        config = kernel_spec.bind(**factory_arguments)
        results = kernel_spec.reference(
            config, *(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in tensors)
        )
        return results[0] if len(results) == 1 else results

    float64_reference.__name__ = f"{kernel.removesuffix('_tl')}_reference"
    return float64_reference


def _references() -> dict[str, Callable[..., Any]]:
    from lazyops.specs import kernel_names

    return {kernel: reference(kernel) for kernel in kernel_names()}


#: ``{kernel: float64 reference}`` for every specified kernel (see :func:`reference`).
REFERENCES: dict[str, Callable[..., Any]] = _references()
