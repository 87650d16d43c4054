"""GELU-and-mul in TileLang, the gate of GeGLU MLPs: ``gelu(x[:, :n]) * x[:, n:]``, exact (erf) or tanh."""

# No ``from __future__ import annotations``: TileLang evaluates the T.Tensor annotations of a prim_func,
# and string annotations could not see the builder's local sizes and dtypes.

from collections.abc import Callable
from typing import Any

import tilelang.language as T

from lazyops._backends.tilelang._rows import next_power_of_two, vector_elements
from lazyops._backends.tilelang._runtime import F32, INDEX, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.gelu_and_mul import (
    ERFC_COEFFICIENTS,
    SQRT_HALF,
    TANH_CUBIC,
    TANH_LINEAR,
    GeluAndMulConfig,
    spec,
)

#: Outputs one thread block writes: 256 threads at 16 values each, enough bytes in flight per block to stream.
TILE = 4096
THREADS = 256
MAX_BLOCK_COLS = 1024


def gelu_and_mul_program(n: int, dtype: str, tanh: bool) -> Any:
    """The TileLang program ``main(x[M, 2n], y[M, n])`` for a dynamic token count ``M``: a block covers
    ``block_rows`` tokens by ``block_cols`` features, the gate and the up projection read side by side."""
    cols = min(next_power_of_two(n), MAX_BLOCK_COLS)
    rows = TILE // cols
    col_blocks = -(-n // cols)
    M = T.dynamic("M", INDEX)
    # Row strides: multiples of `vec` elements (the launch copies other layouts), so rows take 16-byte vectors.
    x_stride, y_stride = T.dynamic("x_stride, y_stride", INDEX)
    vec = vector_elements(n, dtype)

    # The forms that do not cancel for negative gates (lazyops.specs.gelu_and_mul): 1 + tanh(u) = 2 sigmoid(2u),
    # and for the erf form, with E = erfc(|g| / sqrt 2), gelu(g) = max(g, 0) - |g| E / 2 (= g E / 2 for g < 0 and
    # g (1 - E / 2) for g > 0). TileLang has no erfc, CUDA's erfcf through call_extern and a select on the sign
    # both stop the loop's vectorization (2-byte loads instead of 16-byte ones), so E comes from the spec's
    # rational approximation as one expression, max and abs: nvcc finds the repeated subexpressions.
    def erfc_of_nonnegative(a: Any) -> Any:
        t = T.float32(1) / (T.float32(1) + T.float32(0.5) * a)
        polynomial = T.float32(ERFC_COEFFICIENTS[-1])
        for coefficient in reversed(ERFC_COEFFICIENTS[:-1]):
            polynomial = polynomial * t + T.float32(coefficient)
        return t * T.exp(polynomial - a * a)

    def gelu(gate: Any) -> Any:
        if tanh:
            twice_u = gate * (T.float32(TANH_LINEAR) + T.float32(TANH_CUBIC) * gate * gate)
            return gate / (T.float32(1) + T.exp(-twice_u))
        size = T.abs(gate)
        return T.max(gate, T.float32(0)) - T.float32(0.5) * size * erfc_of_nonnegative(size * T.float32(SQRT_HALF))

    @T.prim_func
    def main(x: T.StridedTensor((M, 2 * n), (x_stride, 1), dtype), y: T.StridedTensor((M, n), (y_stride, 1), dtype)):
        T.assume(x_stride % vec == 0)
        T.assume(y_stride % vec == 0)
        # One grid dimension: the token blocks on the second stopped at 65535 (262140 tokens of 1024 features or
        # more); the blocks keep their order, a token block's feature blocks side by side.
        with T.Kernel(T.ceildiv(M, rows) * col_blocks, threads=THREADS) as block:
            by = block // col_blocks
            bx = block % col_blocks
            for i, j in T.Parallel(rows, cols):
                row = by * rows + i
                col = bx * cols + j
                if row < M and col < n:
                    gate = T.cast(x[row, col], F32)
                    up = T.cast(x[row, n + col], F32)
                    y[row, col] = T.cast(gelu(gate) * up, dtype)

    return main


def programs(config: GeluAndMulConfig) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``, by variant."""
    return {"main": lambda: gelu_and_mul_program(config.n, tl_dtype(config.dtype), config.approximate == "tanh")}


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True)
def gelu_and_mul_tl(config: GeluAndMulConfig) -> Callable[..., None]:
    kernel = compiled(config.label, programs(config))["main"]
    return launch_out_of_place(spec, kernel, vector_elements(config.n, tl_dtype(config.dtype)))
