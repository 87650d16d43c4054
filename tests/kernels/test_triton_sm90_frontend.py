"""Triton kernels that the interpreter runs but compiled Triton might refuse, compiled for sm_90 on the host.

Triton's interpreter (how CI runs the Triton kernels) broadcasts a loop-carried value whose shape changes inside a
``range`` loop; the compiler refuses it. ``moe_route_tl``'s grouped top-k passed the whole CPU suite that way and
failed its first GPU check (H100, 2026-12-06: "Loop-carried variable allowed has initial type <['1', '64'], int1>
but is re-assigned to <['16', '64'], int1>"). Triton's own compiler (and ptxas) needs no GPU, so each kernel here
is compiled for sm_90 in a fresh interpreter without ``TRITON_INTERPRET``, at the configurations whose code paths
differ: the ones a GPU would compile first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia")

#: Compiles ``module.kernel`` for sm_90 with the constexprs and argument types given as JSON (argv); prints
#: the PTX's line count, the layout conversions of tensors of at least 1024 elements (each goes through shared
#: memory, every thread storing its share: a kernel's whole tile, where a small value's layout was imposed on it)
#: and the SASS's counts by Triton's own cuobjdump (lines, shared stores, barriers, registers, stack bytes), which
#: ``scripts/sampler_sass.py`` prints.
COMPILE = r"""
import importlib, json, math, pathlib, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
module, name, constants, types, warps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5])
kernel = getattr(importlib.import_module(module), name)
signature = {arg: "constexpr" if arg in constants else types[arg] for arg in kernel.arg_names}
built = triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
wide = [
    line for line in built.asm["ttgir"].splitlines() if "convert_layout" in line
    and math.prod(int(d) for d in re.search(r"tensor<((?:\d+x)+)", line.split(":")[-1]).group(1).rstrip("x").split("x")) >= 1024
]
with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
    cubin.write(built.asm["cubin"])
    cubin.flush()
    dump = [str(pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"), cubin.name]
    code = subprocess.run([*dump, "-sass"], check=True, capture_output=True, text=True).stdout
    usage = subprocess.run([*dump, "--dump-resource-usage"], check=True, capture_output=True, text=True).stdout
registers, stack = map(int, re.search(r"REG:(\d+) STACK:(\d+)", usage).groups())
sass = {"lines": code.count("\n"), "shared_stores": len(re.findall(r"\bSTS\b", code)),
        "barriers": len(re.findall(r"\bBAR\b", code)), "registers": registers, "stack": stack}
print(json.dumps({"ptx_lines": built.asm["ptx"].count("\n"), "wide_conversions": wide, "sass": sass}))
"""


def compile_for_sm90(module: str, kernel: str, constants: dict, types: dict, warps: int = 4) -> dict:
    root = Path(__file__).resolve().parents[2]
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    arguments = [module, kernel, json.dumps(constants), json.dumps(types), str(warps)]
    result = subprocess.run(
        [sys.executable, "-c", COMPILE, *arguments], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, f"{module}.{kernel} {constants}: {result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


ROUTE_TYPES = {
    "logits_ptr": "*bf16",
    "weights_ptr": "*fp32",
    "ids_ptr": "*i32",
    "bias_ptr": "*fp32",
    "M": "i32",
    "logits_stride": "i64",
    "weights_stride": "i64",
    "ids_stride": "i64",
    "scaling": "fp32",
}
ROUTE_PLAIN = {"E": 128, "K": 8, "BLOCK_E": 128, "BLOCK_K": 8, "ROWS": 16, "RENORMALIZE": True, "SIGMOID": False}
ROUTE_GROUPED = {"E": 256, "K": 8, "BLOCK_E": 256, "BLOCK_K": 8, "ROWS": 16, "RENORMALIZE": True, "SIGMOID": True}


@pytest.mark.parametrize(
    "constants",
    [
        {**ROUTE_PLAIN, "HAS_BIAS": False, "GROUPS": 1, "TOPK_GROUP": 1, "BLOCK_G": 1},
        # DeepSeek-V3: sigmoid, a correction bias, 4 of 8 groups (the path that failed on the H100)
        {**ROUTE_GROUPED, "HAS_BIAS": True, "GROUPS": 8, "TOPK_GROUP": 4, "BLOCK_G": 8},
    ],
    ids=["softmax", "grouped"],
)
def test_moe_route_compiles_for_sm90(constants: dict) -> None:
    assert compile_for_sm90("lazyops._backends.triton.moe_route", "_moe_route_kernel", constants, ROUTE_TYPES)[
        "ptx_lines"
    ]


SAMPLE_TYPES = {
    "logits_ptr": "*fp32",
    "temperature_ptr": "*fp32",
    "top_k_ptr": "*i64",
    "top_p_ptr": "*fp32",
    "min_p_ptr": "*fp32",
    "seeds_ptr": "*i64",
    "offsets_ptr": "*i64",
    "out_ptr": "*i64",
    "logprob_ptr": "*fp32",
    "top_values_ptr": "*fp32",
    "top_ids_ptr": "*i64",
    "M": "i32",
    "row_stride": "i64",
    "V": "i32",
}


@pytest.mark.parametrize(
    ("block", "rows", "logprob", "top_n", "warps"),
    [(4096, 1, False, 0, 8), (1024, 4, True, 5, 4)],
    ids=["llama3-vocab", "narrow-rows-logprobs"],
)
def test_sample_compiles_for_sm90(block: int, rows: int, logprob: bool, top_n: int, warps: int) -> None:
    """The one-program kernel as sample_tl launches it at Llama 3's vocabulary (blocks of 4096, a row a program) and
    at V = 1000 (4 rows a program, log-probabilities and a top 5). The vocabulary is a run-time ``i32`` argument: one
    binary for every vocabulary of a block size."""
    from lazyops._backends.triton import sample

    constants = {"BLOCK_V": block, "ROWS": rows, "LOGPROB": logprob, "TOP_N": top_n}
    # the 16-way searches' constants, as sample_tl's launch passes them
    constants.update(WAYS=2**sample.SEARCH_BITS, KEY_PASSES=-(-32 // sample.SEARCH_BITS))
    assert sample._sample_kernel.arg_names[-len(constants) :] == list(constants)
    assert compile_for_sm90("lazyops._backends.triton.sample", "_sample_kernel", constants, SAMPLE_TYPES, warps)


SPLIT_TYPES = {
    **{name: "*fp32" for name in ("best_ptr", "z_max_ptr", "total_ptr", "kept_ptr", "won_ptr")},
    **{
        name: "*i64"
        for name in (
            "best_id_ptr",
            "won_id_ptr",
            "out_id_ptr",
            "state_ptr",
            "next_state_ptr",
            "k_state_ptr",
            "top_keys_ptr",
            "top_out_ids_ptr",
        )
    },
    "counts_ptr": "*i32",
    "M": "i32",
}


@pytest.mark.parametrize(
    ("name", "phase", "partials", "out", "top_n"),
    [
        ("_split_scan_kernel", None, None, None, 0),
        ("_split_scan_kernel", None, None, None, 20),
        ("_split_pass_kernel", "KEYS", "*i32", "*i32", 0),
        ("_split_pass_kernel", "FIRST_MASS", "*i32", "*fp32", 0),
        ("_split_pass_kernel", "MASS", "*fp32", "*fp32", 0),
        ("_split_pass_kernel", "DRAW", "*fp32", "*fp32", 0),
        ("_split_finish_kernel", None, None, "*i64", 0),
        ("_split_finish_kernel", None, None, "*i64", 20),
    ],
    ids=["scan", "scan-top-20", "keys", "first-mass", "mass", "draw", "finish", "finish-top-20"],
)
def test_sample_split_path_compiles_for_sm90(name: str, phase: str | None, partials: str, out: str, top_n: int) -> None:
    """The split path's launches as sample_tl passes them at Llama 3's vocabulary: 32 chunks of 4096, a row a
    program (the finish: FINISH_ROWS rows, a row a program when it merges the top n), with no layout conversion of a
    chunk-wide tensor. Triton 3.6 (the H100's, with torch 2.11) gave a row's interval, computed from the partials'
    loads, a layout of its own, broadcast each pivot to the chunk's width in it and converted that through shared
    memory: 16 such conversions in a MASS pass, 44,791 lines of SASS, 110 µs a launch where the scan took 5
    (2026-12-07). ``_row_value`` makes those values scalars. Triton 3.9 (this project's CI) compiles either form
    without the conversions, so here this guards the kernels against newer compilers' regressions, and the device's
    run of this file (``make gpu-check``) against 3.6's; with 3.6's wheel on the path the check fails on the
    kernel without ``_row_value`` (``PYTHONPATH=<triton 3.6> pytest -k split_path_compiles``)."""
    from lazyops._backends.triton import sample

    vocab, block = 128256, 4096
    chunks = -(-vocab // block)
    shape = {"V": vocab, "BLOCK_V": block, "CHUNKS": chunks, "ROWS": 1, "WAYS": 2**sample.SEARCH_BITS}
    finish = {
        "V": vocab,
        "CHUNKS": chunks,
        "ROWS": 1 if top_n else sample.FINISH_ROWS,
        "LOGPROB": True,
        "TOP_N": top_n,
        "CANDIDATES": 1 << (chunks * top_n - 1).bit_length() if top_n else 1,
    }
    constants = {
        "_split_scan_kernel": {**shape, "LOGPROB": True, "TOP_N": top_n},
        "_split_pass_kernel": {**shape, "PHASE": getattr(sample, phase or "KEYS").value},
        "_split_finish_kernel": finish,
    }[name]
    types = {**SAMPLE_TYPES, **SPLIT_TYPES, "partials_ptr": partials or "*i32", "out_ptr": out or "*i64"}
    assert getattr(sample, name).arg_names[-len(constants) :] == list(constants)
    built = compile_for_sm90("lazyops._backends.triton.sample", name, constants, types, 8)
    assert not built["wide_conversions"], "\n".join(built["wide_conversions"])


ALIGN_TYPES = {
    "ids_ptr": "*i32",
    "sorted_ptr": "*i32",
    "expert_ids_ptr": "*i32",
    "post_padded_ptr": "*i32",
    "assignments": "i32",
    "blocks": "i32",
    "blocks_per": "i32",
}


@pytest.mark.parametrize(
    ("experts", "block", "width"),
    # the bound at DeepSeek-V3's experts; one program's tile at Qwen3-30B-A3B's (vLLM's 64-row blocks); odd
    # experts and blocks; blocks wider than a step's rows, fewer blocks a step
    [(256, 16, 2048), (128, 64, 64), (60, 7, 512), (16, 300, 128)],
    ids=["deepseek-v3-2048", "qwen3-64", "odd", "wide-blocks"],
)
def test_moe_align_single_launch_compiles_for_sm90(experts: int, block: int, width: int) -> None:
    """The single launch's kernel with the constants its factory passes on a GPU (the interpreter's tile aside)."""
    from lazyops._backends.triton import moe_align

    constants = {**moe_align.Aligner(experts, 2, block).single_constexprs, "TILE": moe_align.TILE, "WIDTH": width}
    assert set(moe_align._single_kernel.arg_names[-len(constants) :]) == set(constants)
    compiled = compile_for_sm90(
        "lazyops._backends.triton.moe_align", "_single_kernel", constants, ALIGN_TYPES, moe_align.SINGLE_WARPS
    )
    assert compiled["ptx_lines"]
