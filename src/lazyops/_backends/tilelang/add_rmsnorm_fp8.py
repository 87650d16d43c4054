"""Residual add fused with RMSNorm quantized to float8 in TileLang (``lazyops.specs.add_rmsnorm_fp8``), as vLLM's
``fused_add_rms_norm_static_fp8_quant``.

It is the add_rmsnorm program (:func:`lazyops._backends.tilelang.add_rmsnorm.add_rmsnorm_program`) with a float8
output, for the reasons given in :mod:`lazyops._backends.tilelang.rmsnorm_fp8`: one definition, and vector
stores of the float8 values instead of the previous program's one byte at a time (66.4 % of the copy at
M = 32768, issue 12). Dynamic scales (per token, per group), as the rmsnorm's
(:mod:`lazyops._backends.tilelang.rmsnorm_fp8`): one pass where rows are held in registers (the scales from the
norm of the float32 sum, the residual updated as ever), else the add_rmsnorm program with a float32 output, then
``quant_fp8_tl``'s program on it; the same declines, and the same that a GPU must still confirm
(``make gpu-tlfp8``).
"""

from collections.abc import Callable
from typing import Any

from lazyops._backends.tilelang import add_rmsnorm, quant_fp8
from lazyops._backends.tilelang._rows import vector_elements
from lazyops._backends.tilelang._runtime import F32, FP8, compiled, launch_out_of_place, tl_dtype
from lazyops._backends.tilelang.rmsnorm_fp8 import QUANT, dynamic_options, norm_then_quant, one_pass
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec


def programs(config: AddRMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``: add_rmsnorm's with a float8 output (a static scale, or
    dynamic scales in the same pass where rows are held in registers), or with a float32 output (``"norm"``) and
    ``quant_fp8_tl``'s for the float32 norm (dynamic scales of wider rows)."""
    if config.scales == "static":
        return add_rmsnorm.programs(config, out_dtype=FP8)
    if one_pass(config):
        return add_rmsnorm.programs(config, out_dtype=FP8, dynamic=dynamic_options(config))
    norm = add_rmsnorm.programs(config, out_dtype=F32)["main"]
    quant = quant_fp8.programs(config.quant)
    return {"norm": norm, **{QUANT + name: build for name, build in quant.items() if name != "bounded"}}


def unsupported(config: AddRMSNormFP8Config) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does): the quantizing program's declines."""
    return None if config.scales == "static" else quant_fp8.unsupported(config.quant)


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., None]:
    # launch(x, residual, weight, scale, out): residual is written in place, out written.
    kernels = compiled(config.label, programs(config))
    multiple = vector_elements(config.n, tl_dtype(config.dtype))
    if config.scales == "static":
        return launch_out_of_place(spec, kernels["main"], multiple, written=(1,))
    if one_pass(config):  # residual and the scale written
        return launch_out_of_place(spec, kernels["main"], multiple, written=(1, 3))
    return norm_then_quant(config, kernels, add_rmsnorm.spec, written=(1,))
