"""Residual add fused with RMSNorm quantized to float8 in TileLang (``lazyops.specs.add_rmsnorm_fp8``), as vLLM's
``fused_add_rms_norm_static_fp8_quant``.

It is the add_rmsnorm program (:func:`lazyops._backends.tilelang.add_rmsnorm.add_rmsnorm_program`) with a float8
output, for the reasons given in :mod:`lazyops._backends.tilelang.rmsnorm_fp8`: one definition, and vector
stores of the float8 values instead of the previous program's one byte at a time (66.4 % of the copy at
M = 32768, issue 12).
"""

from collections.abc import Callable
from typing import Any

from lazyops._backends.tilelang import add_rmsnorm
from lazyops._backends.tilelang._rows import vector_elements
from lazyops._backends.tilelang._runtime import FP8, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec


def programs(config: AddRMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``: add_rmsnorm's, with a float8 output."""
    return add_rmsnorm.programs(config, out_dtype=FP8)


def unsupported(config: AddRMSNormFP8Config) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does): its program stores with a static per-tensor
    scale only; dynamic scales (``scales="token"``, ``"group"``) go on to Triton or torch."""
    if config.scales != "static":
        return f"its program takes a static scale only, not scales={config.scales!r} (Triton and torch serve it)"
    return None


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., None]:
    # launch(x, residual, weight, scale, out): residual is written in place, out written.
    kernel = compiled(config.label, programs(config))["main"]
    return launch_out_of_place(spec, kernel, vector_elements(config.n, tl_dtype(config.dtype)), written=(1,))
