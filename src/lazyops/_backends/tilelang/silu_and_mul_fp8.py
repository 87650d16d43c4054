"""SiLU-and-mul quantized to float8 in TileLang (``lazyops.specs.silu_and_mul_fp8``): ``quant_fp8_tl``'s program
built with a gated input (:func:`lazyops._backends.tilelang.quant_fp8.quant_program`, ``gated=True``), each value read
as ``silu(g) * u`` in ``silu_and_mul_tl``'s own float32 formula (``g / (1 + exp(-g)) * u``), so fused and unfused in
float32 are the same program's arithmetic. Static, per-tensor (two launches), per-token (``scale_ub``) and per-group
scales (row- or column-major, UE8M0), as ``quant_fp8_tl``'s; the same declines (groups narrower than a vector).

What a GPU must still confirm: the kit's cases on the device (``make gpu-tlfp8``), and that nvcc keeps ``expf`` and
the product in the same order as it does in ``silu_and_mul_tl``'s program (both are lowered with ``expf`` in CI).
"""

from collections.abc import Callable
from typing import Any

from lazyops._backends.tilelang import quant_fp8
from lazyops.specs.silu_and_mul_fp8 import SiluAndMulFP8Config, spec


def programs(config: SiluAndMulFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``: ``quant_fp8_tl``'s, with a gated input."""
    return quant_fp8.programs(config)


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=quant_fp8.unsupported)
def silu_and_mul_fp8_tl(config: SiluAndMulFP8Config) -> Callable[..., None]:
    return quant_fp8.quant_launch(config)  # launch(x, scale, scale_ub, out)
