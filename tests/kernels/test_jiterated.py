"""The torch backend's jiterator kernels (CUDA and ROCm only), checked where CI can: their CUDA expressions.

``_backends/torch/_jiterated.py`` compiles one CUDA expression per element for ``silu_and_mul`` and both forms of
``gelu_and_mul``. No GPU here, so each expression is read back as Python (``erfcf`` as ``math.erfc``, ``expf`` as
``math.exp``, float literals without their ``f``) and evaluated in float64 against the spec's reference over gates
on [-8, 8], deep into GELU's negative tail where the forms that cancel fail; and the code string is one that
torch's jiterator parses. The kernels themselves run in the H200 conformance (``benchmarks/results``).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from lazyops._backends.torch import gelu_and_mul, silu_and_mul
from lazyops._backends.torch._jiterated import gated, literal
from lazyops.specs.gelu_and_mul import spec as gelu_spec
from lazyops.specs.silu_and_mul import spec as silu_spec

GATES = [g / 8 for g in range(-64, 65) if g]


def as_python(expression: str):
    source = re.sub(r"(\d)f\b", r"\1", expression).replace("erfcf(", "erfc(").replace("expf(", "exp(")
    code = compile(source, "<expression>", "eval")
    return lambda g, u: eval(code, {"erfc": math.erfc, "exp": math.exp}, {"g": g, "u": u})


def reference(spec, **kwargs) -> list[float]:
    x = torch.tensor([[g, 1.5] for g in GATES], dtype=torch.float64)
    (y,) = spec.reference(spec.bind(1, torch.float32, **kwargs), x)
    return y.flatten().tolist()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_the_gelu_expressions_compute_the_spec(approximate: str) -> None:
    evaluate = as_python(gelu_and_mul.FUSED_GELU[approximate])
    for gate, expected in zip(GATES, reference(gelu_spec, approximate=approximate), strict=True):
        assert evaluate(gate, 1.5) == pytest.approx(expected, rel=1e-12), f"gate {gate}"


def test_the_silu_expression_computes_the_spec() -> None:
    evaluate = as_python(silu_and_mul.FUSED_SILU)
    for gate, expected in zip(GATES, reference(silu_spec), strict=True):
        assert evaluate(gate, 1.5) == pytest.approx(expected, rel=1e-12), f"gate {gate}"


def test_the_code_is_one_the_jiterator_parses() -> None:
    kernel = gated("lazyops_test_gated", "g * u")
    assert kernel.kernel_name == "lazyops_test_gated"
    assert "static_cast<float>(gate)" in kernel.code_string and "return static_cast<T>(g * u);" in kernel.code_string


def test_literals_are_exact_float_literals() -> None:
    assert literal(0.5) == "0.5f"
    assert float(literal(-0.7071067811865476)[:-1]) == -0.7071067811865476
