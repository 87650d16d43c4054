"""Timing lazyops' kernels: the engine behind ``lazyops bench``, ``lazyops tune`` and the scripts in ``benchmarks/``
(``lazyops.bench.engine``). Nothing here is imported by ``import lazyops`` or by resolving a kernel."""
