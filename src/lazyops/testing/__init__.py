"""The conformance kit: how every backend's kernels are checked, for backend authors to check theirs the same way.

One reference, used three ways: the torch backend's ``*_reference`` functions are the kernels' definition, the
last-resort fallback, and (here, in float64) the yardstick every backend is measured against. Nothing in this
package re-implements the math.

- :func:`run_conformance` (``run_conformance("mybackend")``) checks every kernel a registered backend exports and
  raises ``AssertionError`` listing what failed; with the ``lazyops_backend`` fixture of the pytest plugin, one
  test checks every backend that runs on the machine.
- :func:`check_case` runs one example (a :class:`Case`) of one kernel against a factory.
- :data:`REFERENCES` maps each kernel to its float64 reference; :mod:`lazyops.testing.strategies` holds the
  hypothesis strategies (shapes, dtypes, token counts, whole cases).
- One module per kernel (``lazyops.testing.rmsnorm``...) holds that kernel's cases, reference and comparison.

This package imports torch and hypothesis (``pip install 'lazyops[test]'``); ``import lazyops`` never imports it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from lazyops.testing import add_rmsnorm, matmul, rmsnorm, rope, silu_and_mul, softmax, strategies
from lazyops.testing._case import Case
from lazyops.testing._compare import DTYPES, TOLERANCE, Inputs, check_close, check_each, poison, relative_error, rows
from lazyops.testing._conformance import (
    ConformanceReport,
    KernelResult,
    check_case,
    default_device,
    run_conformance,
    signature_mismatch,
)

__all__ = [
    "Case",
    "ConformanceReport",
    "DTYPES",
    "Inputs",
    "KernelResult",
    "REFERENCES",
    "SPECS",
    "TOLERANCE",
    "check_case",
    "check_close",
    "check_each",
    "default_device",
    "poison",
    "relative_error",
    "rows",
    "run_conformance",
    "signature_mismatch",
    "spec",
    "strategies",
]

#: Each kernel's conformance module: ``cases()``, ``reference(...)`` (float64), ``check(factory, case, ...)``,
#: ``reference_factory`` (the torch factory, whose signature every backend shares).
SPECS: dict[str, ModuleType] = {
    module.KERNEL: module for module in (add_rmsnorm, matmul, rmsnorm, rope, silu_and_mul, softmax)
}

#: ``{kernel: float64 reference}``: each takes the kernel call's tensors (and the factory's static configuration
#: the math needs, such as ``eps``) and returns what the kernel must return, in float64.
REFERENCES: dict[str, Callable[..., Any]] = {kernel: module.reference for kernel, module in SPECS.items()}


def spec(kernel: str) -> ModuleType:
    """The conformance module of ``kernel``; a ``KeyError`` naming the kernels that have one otherwise."""
    try:
        return SPECS[kernel]
    except KeyError:
        raise KeyError(f"lazyops.testing has no conformance check for {kernel!r}; it has {', '.join(sorted(SPECS))}") from None
