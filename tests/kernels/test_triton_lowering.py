"""What Triton makes of the fp8 norm for a Hopper, read without a GPU: the kernel compiled to PTX for sm_90.

Triton compiles for a GPU target on a machine without one (its wheel ships ptxas), but only in an interpreter
that did not decorate the kernels for ``TRITON_INTERPRET`` (which the kernel tests set here): so in a fresh one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

SRC = Path(__file__).resolve().parents[2] / "src"

COMPILE = textwrap.dedent(
    """
    import json, re, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from lazyops._backends.triton.rmsnorm import _rmsnorm_kernel

    found = {}
    for quantize in (False, True):
        signature = {
            "x_ptr": "*bf16", "w_ptr": "*bf16", "scale_ptr": "*fp32", "y_ptr": "*fp8e4nv" if quantize else "*bf16",
            "M": "i32", "x_row_stride": "i32", "y_row_stride": "i32", "eps": "fp32", "offset": "fp32",
            "N": "constexpr", "BLOCK_N": "constexpr", "ROWS": "constexpr", "SINGLE_PASS": "constexpr",
            "QUANTIZE": "constexpr", "EXACT_ROUNDING": "constexpr",
        }
        constants = {"N": 4096, "BLOCK_N": 4096, "ROWS": 1, "SINGLE_PASS": True, "QUANTIZE": quantize,
                     "EXACT_ROUNDING": False}
        aligned = {(index,): [["tt.divisibility", 16]] for index in (0, 1, 3, 5, 6)}
        source = ASTSource(_rmsnorm_kernel, signature, constants, attrs=aligned)
        ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]
        found[str(quantize)] = {
            "stores": sorted(set(re.findall(r"st\\.global[.\\w]*", ptx))),
            "load_strides": sorted({int(step) for step in re.findall(r"add\\.s64\\s+%rd\\d+, %rd\\d+, (\\d+);", ptx)}),
        }
    json.dump(found, sys.stdout)
    """
)


def test_the_fp8_norm_keeps_its_16_bit_loads_coalesced_on_hopper() -> None:
    """A float8 output must not make each thread's two 16-byte bf16 loads adjacent (16 bytes apart: half of every
    sector a warp's load touches); they stay 4096 bytes apart as for a bf16 output, the fp8 stores 8 bytes a
    thread (``_fp8.store_columns``)."""
    import json

    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), environment.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", COMPILE], capture_output=True, text=True, env=environment, timeout=300, check=False
    )
    if done.returncode != 0 and "ptxas" in done.stderr and "not found" in done.stderr:
        pytest.skip("this Triton wheel ships no ptxas")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found["False"]["stores"] == ["st.global.v4.b32"]
    assert found["True"]["stores"] == ["st.global.v2.b32"]
    for quantize in ("False", "True"):
        assert 4096 in found[quantize]["load_strides"], found
        assert 16 not in found[quantize]["load_strides"], found
