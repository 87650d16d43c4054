"""The kernels' contracts: one module per kernel (``lazyops.specs.rmsnorm``...), each with its ``spec``.

A spec (:class:`KernelSpec`) holds everything about a kernel that is not a backend's own: the factory's signature,
docstring and argument normalisation, the checks every call passes before anything is written, the float64
reference, the conformance examples and the traffic model. Backends build their public factories from it with
``spec.implementation``; the conformance kit, the tests, the benchmarks and the stub generator read the kernel list
and everything else from here, so a new kernel is one spec module plus one module per backend.

The kernel list is the torch backend's manifest (``lazyops/_backends/torch/__init__.pyi``): the reference
implements every kernel, so the kernels it declares are the kernels there are, read without importing anything.
"""

from __future__ import annotations

import importlib
import os

from lazyops._manifest import read_manifest
from lazyops.specs._arguments import RowConfig
from lazyops.specs._params import Fixed, Other, Out, Rows
from lazyops.specs._spec import Example, KernelSpec, Traffic  # no torch: only under TYPE_CHECKING there

__all__ = [
    "Example",
    "Fixed",
    "KernelSpec",
    "Other",
    "Out",
    "RowConfig",
    "Rows",
    "Traffic",
    "has_spec",
    "kernel_names",
    "spec",
]


_kernel_names: tuple[str, ...] | None = None  # the manifest is a file of the installed package: read once


def kernel_names() -> tuple[str, ...]:
    """Every kernel lazyops specifies, sorted: the names the torch backend declares in its stub."""
    global _kernel_names
    if _kernel_names is None:
        stub = os.path.join(os.path.dirname(os.path.dirname(__file__)), "_backends", "torch", "__init__.pyi")
        _kernel_names = tuple(sorted(read_manifest(stub)))
    return _kernel_names


def has_spec(kernel: str) -> bool:
    return kernel in kernel_names()


def spec(kernel: str) -> KernelSpec:
    """The spec of ``kernel`` (``"rmsnorm_tl"``); a ``KeyError`` naming the specified kernels otherwise."""
    if not has_spec(kernel):
        raise KeyError(f"lazyops specifies no kernel {kernel!r}; it specifies {', '.join(kernel_names())}")
    return importlib.import_module(f"lazyops.specs.{kernel.removesuffix('_tl')}").spec  # type: ignore[no-any-return]
