"""RMSNorm quantized to float8 in TileLang (``lazyops.specs.rmsnorm_fp8``): the norm in float32, divided by the
per-tensor scale, converted once with saturation at ±448, as vLLM's ``rms_norm_static_fp8_quant``.

It is the rmsnorm program (:func:`lazyops._backends.tilelang.rmsnorm.rmsnorm_program`) with a float8 output: one
definition, so the two cannot drift apart, and the fp8 form gets what the rmsnorm has (16-byte loads, strided
rows, ``out=``). Its stores are 8 bytes a thread-vector (8 float8 values from 8 bf16 ones): the previous,
separate program clamped by comparisons before converting, which TileLang could not vectorise, so it stored one
byte at a time (41.8 % of the copy at M = 32768, issue 12).
"""

from collections.abc import Callable
from typing import Any

from lazyops._backends.tilelang import rmsnorm
from lazyops._backends.tilelang._rows import vector_elements
from lazyops._backends.tilelang._runtime import FP8, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.rmsnorm_fp8 import RMSNormFP8Config, spec


def programs(config: RMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``: rmsnorm's, with a float8 output."""
    return rmsnorm.programs(config, out_dtype=FP8)


def unsupported(config: RMSNormFP8Config) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does): its program stores with a static per-tensor
    scale only; dynamic scales (``scales="token"``, ``"group"``) go on to Triton or torch."""
    if config.scales != "static":
        return f"its program takes a static scale only, not scales={config.scales!r} (Triton and torch serve it)"
    return None


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., None]:
    # launch(x, weight, scale, out)
    kernel = compiled(config.label, programs(config))["main"]
    return launch_out_of_place(spec, kernel, vector_elements(config.n, tl_dtype(config.dtype)))
