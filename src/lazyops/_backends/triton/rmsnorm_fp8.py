"""RMSNorm quantized to float8 (``lazyops.specs.rmsnorm_fp8``): ``rmsnorm``'s kernel compiled with ``QUANTIZE``
(the norm in float32, divided by the per-tensor scale, saturated to ±448 and converted once). Dynamic scales: the
same kernel's float32 norm, then ``quant_fp8_tl``'s kernel on it (``quant_fp8.quantize_after``)."""

from __future__ import annotations

from collections.abc import Callable

from lazyops._backends.triton._common import launch_device
from lazyops._backends.triton.quant_fp8 import quantize_after
from lazyops._backends.triton.rmsnorm import _rmsnorm_kernel, norm_launch
from lazyops.specs.rmsnorm_fp8 import RMSNormFP8Config, spec


@spec.implementation(device_type=launch_device(_rmsnorm_kernel), strided_rows=True, writes_out=True)
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., None]:
    if config.scales != "static":
        return quantize_after(config.quant, norm_launch(config, quantize=False))  # launch(x, weight, scale, out)
    return norm_launch(config, quantize=True)  # launch(x, weight, scale, out)
