"""What Triton makes of the sampler's kernels at Llama 3's vocabulary (V = 128256, float32, blocks of 4096, a row a
program, 8 warps: the launches a GPU runs), compiled for sm_90 on the host with whichever Triton is installed, no GPU
needed: each kernel's lines of SASS, shared-memory stores and barriers, registers, stack, and its layout conversions
of tensors of 1,024 elements or more. Issue 37, decision 015: under Triton 3.6 (the H100's, with torch 2.11) the split
path's pass kernel converted a chunk-wide tile through shared memory once a pivot and took 110 µs a launch; this
shows it, and that the fix holds, without a device.

    python scripts/sampler_sass.py                                        # this project's Triton
    pip install --target /tmp/t36 --no-deps triton==3.6.0
    PYTHONPATH=/tmp/t36 python scripts/sampler_sass.py                    # the device's Triton
    python scripts/sampler_sass.py --kernels scan,keys                    # some of them
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
#: name -> (kernel, its constexprs beyond the shape's, the partials' and outputs' pointer types)
KERNELS = {
    "one-program": ("_sample_kernel", {}, None),
    "scan": ("_split_scan_kernel", {"LOGPROB": True, "TOP_N": 0}, ("*i32", "*i64")),
    "keys": ("_split_pass_kernel", {"PHASE": "KEYS"}, ("*i32", "*i32")),
    "first-mass": ("_split_pass_kernel", {"PHASE": "FIRST_MASS"}, ("*i32", "*fp32")),
    "mass": ("_split_pass_kernel", {"PHASE": "MASS"}, ("*fp32", "*fp32")),
    "draw": ("_split_pass_kernel", {"PHASE": "DRAW"}, ("*fp32", "*fp32")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--kernels", default=",".join(KERNELS), help=f"comma list of {', '.join(KERNELS)}")
    options = parser.parse_args()
    unknown = [name for name in options.kernels.split(",") if name not in KERNELS]
    if unknown:
        parser.error(f"--kernels {','.join(unknown)}: not among {', '.join(KERNELS)}")
    sys.path[:0] = [str(CHECKOUT / "src"), str(CHECKOUT / "tests" / "kernels")]
    import triton
    from test_triton_sm90_frontend import SAMPLE_TYPES, SPLIT_TYPES, compile_for_sm90  # the launches' types

    from lazyops._backends.triton import sample

    ways = 2**sample.SEARCH_BITS
    shape = {"V": 128256, "BLOCK_V": 4096, "CHUNKS": 32, "ROWS": 1, "WAYS": ways}
    print(f"Triton {triton.__version__}, sm_90, 8 warps, V = 128256 in blocks of 4096, a row a program")
    print("| kernel | SASS lines | shared stores | barriers | registers, stack | wide conversions |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in options.kernels.split(","):
        function, extra, pointers = KERNELS[name]
        if pointers is None:  # the one-program kernel: the vocabulary at run time
            constants = {"BLOCK_V": 4096, "ROWS": 1, "LOGPROB": False, "TOP_N": 0, "WAYS": ways}
            constants["KEY_PASSES"] = -(-32 // sample.SEARCH_BITS)
            types = SAMPLE_TYPES
        else:
            phase = {"PHASE": getattr(sample, extra["PHASE"]).value} if "PHASE" in extra else extra
            constants = {**shape, **phase}
            types = {**SAMPLE_TYPES, **SPLIT_TYPES, "partials_ptr": pointers[0], "out_ptr": pointers[1]}
        built = compile_for_sm90("lazyops._backends.triton.sample", function, constants, types, 8)
        sass = built["sass"]
        print(
            f"| {name} | {sass['lines']:,} | {sass['shared_stores']:,} | {sass['barriers']} |",
            f"{sass['registers']}, {sass['stack']} B | {len(built['wide_conversions'])} |",
        )


if __name__ == "__main__":
    main()
