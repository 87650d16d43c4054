"""The examples of every kernel, one module per kernel (``lazyops.testing.cases.rmsnorm``...), found by name.

A kernel's contract (``lazyops.specs.<kernel>``) says what the kernel is; its examples module says what it is
tried on: the conformance cases (hypothesis), the inputs of one call, the batch geometry, the traffic model and
the benchmark's configuration. The contract never imports this package; this package reads the contract.
"""

from __future__ import annotations

import importlib
import importlib.util

from lazyops.specs import spec as spec_named
from lazyops.specs._spec import Example, KernelSpec, Traffic
from lazyops.testing.cases._base import Examples

__all__ = ["Example", "Examples", "Traffic", "examples"]

_found: dict[str, Examples] = {}


def examples(kernel: str | KernelSpec) -> Examples:
    """The examples of ``kernel`` (a name, ``"rmsnorm_tl"``, or its spec): the ``examples`` object of
    ``lazyops.testing.cases.<kernel>``, read once; a spec object other than the registered one (a test's variant)
    gets its kernel's examples class around it. A kernel without that module is a ``LookupError`` naming it."""
    spec = spec_named(kernel) if isinstance(kernel, str) else kernel
    found = _found.get(spec.name)
    if found is None:
        module = f"{__name__}.{spec.name.removesuffix('_tl')}"
        if importlib.util.find_spec(module) is None:
            raise LookupError(
                f"{spec.name} has no examples: no module {module}; write one with an `examples` object (an "
                "Examples subclass around the spec: cases() and benchmark() at least), as CONTRIBUTING.md's "
                "'Adding a kernel' says"
            )
        found = importlib.import_module(module).examples
        _found[spec.name] = found
    return found if found.spec is spec else type(found)(spec)
