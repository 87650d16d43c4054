"""The torch backend's CPU matmul: a 16-bit ``mm`` in its own dtype where the CPU multiplies that dtype natively,
both operands upcast to float32 GEMM where torch would fall back to a scalar loop.

Which CPU takes which route is decided once per factory from the CPU's features (``cpu_has_native_gemm``); each route
is checked here on this machine by forcing it, against the float64 product, at sizes small enough for the scalar
loop.
"""

from __future__ import annotations

import pytest
import torch

from lazyops._backends.torch import matmul as torch_matmul
from lazyops.testing import TOLERANCE


def relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected).norm() / expected.norm())


@pytest.fixture
def features(monkeypatch):
    """Sets what the CPU reports: its /proc/cpuinfo flags and torch's private probes."""

    def set_features(flags: set[str], probes: set[str]) -> None:
        monkeypatch.setattr(torch_matmul, "cpu_flags", lambda: frozenset(flags))
        for probe in ("_is_amx_fp16_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported"):
            monkeypatch.setattr(torch.cpu, probe, lambda probe=probe: probe in probes, raising=False)

    return set_features


def test_float16_is_native_with_avx512_fp16_or_amx_fp16_only(features) -> None:
    features(set(), set())
    assert not torch_matmul.cpu_has_native_gemm(torch.float16)
    features({"avx512f", "avx512_bf16", "amx_bf16"}, {"_is_avx512_bf16_supported", "_is_amx_tile_supported"})
    assert not torch_matmul.cpu_has_native_gemm(torch.float16)
    features({"avx512f", "avx512_fp16"}, set())
    assert torch_matmul.cpu_has_native_gemm(torch.float16)
    features(set(), {"_is_amx_fp16_supported"})
    assert torch_matmul.cpu_has_native_gemm(torch.float16)


def test_bfloat16_is_native_with_avx512_bf16_or_amx_and_float32_always(features) -> None:
    features(set(), set())
    assert not torch_matmul.cpu_has_native_gemm(torch.bfloat16)
    assert torch_matmul.cpu_has_native_gemm(torch.float32)
    features(set(), {"_is_avx512_bf16_supported"})
    assert torch_matmul.cpu_has_native_gemm(torch.bfloat16)
    features(set(), {"_is_amx_tile_supported"})
    assert torch_matmul.cpu_has_native_gemm(torch.bfloat16)


def test_the_flags_are_read_from_this_machine() -> None:
    flags = torch_matmul.cpu_flags()
    assert isinstance(flags, frozenset)
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            listed = any(line.startswith("flags") for line in cpuinfo)
    except OSError:
        listed = False
    assert bool(flags) == listed


@pytest.mark.parametrize("native", [True, False], ids=["native", "upcast"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_both_routes_meet_the_tolerance(monkeypatch, native, dtype) -> None:
    monkeypatch.setattr(torch_matmul, "cpu_has_native_gemm", lambda _dtype: native)
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(7, 96, generator=generator).to(dtype)
    b = torch.randn(96, 80, generator=generator).to(dtype)
    result = torch_matmul.matmul_tl(80, 96, dtype)(a, b)
    assert result.dtype == dtype and result.shape == (7, 80)
    assert relative(result, a.double() @ b.double()) <= TOLERANCE[dtype]
