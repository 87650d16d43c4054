"""SiLU-and-mul quantized to float8 (``lazyops.specs.silu_and_mul_fp8``): ``quant_fp8_tl``'s kernel compiled with
``UP``, each value read as ``silu(g) * u`` (``silu_and_mul_tl``'s float32 formula) where it reads ``x``."""

from __future__ import annotations

from collections.abc import Callable

from lazyops._backends.triton._common import launch_device
from lazyops._backends.triton.quant_fp8 import _quant_fp8_kernel, quant_launch
from lazyops.specs.silu_and_mul_fp8 import SiluAndMulFP8Config, spec


@spec.implementation(device_type=launch_device(_quant_fp8_kernel), strided_rows=True, writes_out=True)
def silu_and_mul_fp8_tl(config: SiluAndMulFP8Config) -> Callable[..., None]:
    return quant_launch(config)  # launch(x, scale, scale_ub, out)
