"""Matrix product in plain PyTorch (the spec: ``lazyops.specs.matmul``).

``torch.mm`` in the input dtype accumulates in float32 (cuBLAS on CUDA, oneDNN or MKL on the CPU). The exception
is a 16-bit product on a CPU without bfloat16/float16 matrix instructions (AVX2 machines): torch falls back to a
scalar loop there, one to two orders of magnitude slower than upcasting both operands and calling float32 GEMM,
so that is what the kernel does on such a CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.matmul import MatmulConfig, spec


def cpu_has_native_gemm(dtype: torch.dtype) -> bool:
    """Whether this CPU multiplies ``dtype`` matrices natively (through oneDNN) rather than in a scalar loop.

    Asked once per factory call (warm-up), never per kernel call. float16: AMX-FP16, or AVX512-FP16 (Sapphire
    Rapids has the latter without the former: there a native float16 ``mm`` of [1, 1024] x [1024, 1024] took 124 µs
    against 238 for the upcast, where an AMD EPYC without either took 2133 against 136; docs/decisions/008).
    """
    if dtype == torch.float32:
        return True
    if dtype == torch.bfloat16:
        probes: tuple[str, ...] = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    else:
        if "avx512_fp16" in cpu_flags():
            return True
        probes = ("_is_amx_fp16_supported",)
    # private probes: where a torch release lacks one, the upcast is the safe answer (correct, maybe slower)
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags Linux lists in ``/proc/cpuinfo`` (torch has no probe for AVX512-FP16); empty where there
    is no such file. Read up to the first CPU's flags line, once per float16 factory call (tens of µs: not cached)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


@spec.implementation(strided_rows=True)
def matmul_tl(config: MatmulConfig) -> Callable[..., torch.Tensor]:
    mm = torch.mm
    dtype = config.dtype
    upcast_on_cpu = not cpu_has_native_gemm(dtype)

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if upcast_on_cpu and a.is_cpu:
            return mm(a.float(), b.float()).type(dtype)
        return mm(a, b)

    return matmul
