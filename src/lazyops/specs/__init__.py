"""The kernels' contracts: one module per kernel (``lazyops.specs.rmsnorm``...), each with its ``spec``.

A spec (:class:`KernelSpec`) holds everything about a kernel that is not a backend's own: the factory's signature,
docstring and argument normalisation, the checks every call passes before anything is written and the float64
reference. Backends build their public factories from it with ``spec.implementation``; the conformance kit, the
tests, the benchmarks and the stub generator read the kernel list from here, and each kernel's examples from
``lazyops.testing.cases``, so a new kernel is one spec module, one examples module and one module per backend.

The kernel list is ``lazyops.specs._kernels.KERNELS``, plain data the specs own, read without importing anything.
"""

from __future__ import annotations

import importlib

from lazyops.specs._params import Fixed, FromTokens, Out, RowConfig, Rows, Tensor
from lazyops.specs._spec import Example, KernelSpec, Traffic  # no torch: only under TYPE_CHECKING there

__all__ = [
    "Example",
    "Fixed",
    "FromTokens",
    "KernelSpec",
    "Out",
    "RowConfig",
    "Rows",
    "Tensor",
    "Traffic",
    "has_spec",
    "kernel_names",
    "spec",
]


def kernel_names() -> tuple[str, ...]:
    """Every kernel lazyops specifies, sorted (``lazyops.specs._kernels``)."""
    from lazyops.specs._kernels import KERNELS

    return KERNELS


def has_spec(kernel: str) -> bool:
    return kernel in kernel_names()


def spec(kernel: str) -> KernelSpec:
    """The spec of ``kernel`` (``"rmsnorm_tl"``); a ``KeyError`` naming the specified kernels otherwise."""
    if not has_spec(kernel):
        raise KeyError(f"lazyops specifies no kernel {kernel!r}; it specifies {', '.join(kernel_names())}")
    return importlib.import_module(f"lazyops.specs.{kernel.removesuffix('_tl')}").spec  # type: ignore[no-any-return]
