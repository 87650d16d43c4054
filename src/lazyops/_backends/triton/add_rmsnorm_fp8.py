"""Residual add fused with RMSNorm quantized to float8 (``lazyops.specs.add_rmsnorm_fp8``): ``add_rmsnorm``'s
kernel compiled with ``QUANTIZE``. Dynamic scales: the same kernel's float32 norm (the residual updated as ever),
then ``quant_fp8_tl``'s kernel on it (``quant_fp8.quantize_after``)."""

from __future__ import annotations

from collections.abc import Callable

from lazyops._backends.triton._common import launch_device
from lazyops._backends.triton.add_rmsnorm import _add_rmsnorm_kernel, add_norm_launch
from lazyops._backends.triton.quant_fp8 import quantize_after
from lazyops.specs.add_rmsnorm_fp8 import AddRMSNormFP8Config, spec


@spec.implementation(device_type=launch_device(_add_rmsnorm_kernel), strided_rows=True, writes_out=True)
def add_rmsnorm_fp8_tl(config: AddRMSNormFP8Config) -> Callable[..., None]:
    if config.scales != "static":
        # launch(x, residual, weight, scale, out)
        return quantize_after(config.quant, add_norm_launch(config, quantize=False))
    return add_norm_launch(config, quantize=True)  # launch(x, residual, weight, scale, out)
