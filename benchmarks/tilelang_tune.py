"""Sweep the TileLang kernels' block shapes on a GPU: the numbers behind the defaults in ``_rows`` and ``matmul``.

    python benchmarks/tilelang_tune.py [--out DIR]

Compiles each variant straight from its program (bypassing the factories' caches), times it with
``triton.testing.do_bench`` (median) at hidden size 4096 in bfloat16, and writes ``tilelang_tune.md`` into DIR
(``$OUT`` when set).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    import tilelang
    import triton.testing

    from lazyops._backends.tilelang import add_rmsnorm, matmul, rmsnorm, softmax
    from lazyops._backends.tilelang._rows import plan_rows

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    n, dtype = 4096, "bfloat16"
    row_programs = {
        "rmsnorm": lambda plan: rmsnorm.rmsnorm_program(n, dtype, 1e-6, plan),
        "add_rmsnorm": lambda plan: add_rmsnorm.add_rmsnorm_program(n, dtype, 1e-6, plan),
        "softmax": lambda plan: softmax.softmax_program(n, dtype, plan),
    }
    variants: list[tuple[str, object, object]] = []
    for name, make in row_programs.items():
        for vectors in (1, 2, 4):
            plan = plan_rows(n, dtype, vectors)
            variants.append((name, f"{vectors} vector(s)/thread, {plan.threads} threads", make(plan)))
    tiles = [
        matmul.Tile(128, 128, 64, 3, 256),
        matmul.Tile(128, 256, 64, 3, 256),
        matmul.Tile(128, 256, 64, 4, 256),
        matmul.Tile(64, 64, 64, 4, 128),
        matmul.Tile(64, 128, 64, 4, 128),
        matmul.Tile(64, 64, 128, 3, 128),
        matmul.Tile(64, 256, 64, 4, 256),
    ]
    for tile in tiles:
        variants.append(("matmul", tile, matmul.matmul_program(4096, 4096, dtype, tile)))
    kernels = tilelang.par_compile([program for _, _, program in variants], target="cuda", ignore_error=True)

    def bench(fn) -> float:
        return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")) * 1e3

    lines = ["# TileLang block-shape sweep (bf16, hidden 4096; µs, medians of do_bench)", ""]
    lines += ["| kernel | variant | M | µs | rate |", "| --- | --- | --- | --- | --- |"]
    weight = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for (name, variant, _), kernel in zip(variants, kernels):
        if kernel is None:
            lines.append(f"| {name} | {variant} | - | failed to compile | |")
            continue
        token_counts = (1, 128, 1024, 8192) if name == "matmul" else (1024, 8192, 32768)
        for m in token_counts:
            x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            y = torch.empty_like(x)
            if name == "rmsnorm":
                us, rate = bench(lambda: kernel(x, weight, y)), 2 * x.numel() * 2
            elif name == "add_rmsnorm":
                residual = torch.randn_like(x)
                us, rate = bench(lambda: kernel(x, residual, weight, y)), 4 * x.numel() * 2
            elif name == "softmax":
                us, rate = bench(lambda: kernel(x, y)), 2 * x.numel() * 2
            else:
                c = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)
                us = bench(lambda: kernel(x, b, c))
                lines.append(f"| {name} | {variant} | {m} | {us:.1f} | {2 * m * 4096 * 4096 / us / 1e6:.0f} TFLOP/s |")
                continue
            lines.append(f"| {name} | {variant} | {m} | {us:.1f} | {rate / us / 1e3:.0f} GB/s |")
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tilelang_tune.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
