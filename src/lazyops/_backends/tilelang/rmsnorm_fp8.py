"""RMSNorm quantized to float8 in TileLang (``lazyops.specs.rmsnorm_fp8``): the norm in float32, divided by the
per-tensor scale, converted once with saturation at ±448, as vLLM's ``rms_norm_static_fp8_quant``.

It is the rmsnorm program (:func:`lazyops._backends.tilelang.rmsnorm.rmsnorm_program`) with a float8 output: one
definition, so the two cannot drift apart, and the fp8 form gets what the rmsnorm has (16-byte loads, strided
rows, ``out=``). Its stores are 8 bytes a thread-vector (8 float8 values from 8 bf16 ones): the previous,
separate program clamped by comparisons before converting, which TileLang could not vectorise, so it stored one
byte at a time (41.8 % of the copy at M = 32768, issue 12).

Dynamic scales (``scales="token"``, ``"group"``: per token or per group, row- or column-major, UE8M0) are two
launches, as Triton's (docs/decisions/013): the rmsnorm program with a float32 output into an ``[M, n]`` buffer,
then ``quant_fp8_tl``'s program (:mod:`lazyops._backends.tilelang.quant_fp8`) on it, so the fused call is the
float32 norm handed to ``quant_fp8_tl`` in float32, bit for bit, by construction. It costs 8 bytes an element more
than one pass would (the buffer written and read); a one-pass program (the group maxima taken from the norm held
in registers) is left to be measured against it on a GPU. Groups narrower than a 16-byte float32 vector (4
columns) are declined, as ``quant_fp8_tl`` declines them.

What a GPU must still confirm (nothing here has run on one; CI lowers every program for sm_90a): the kit's dynamic
cases on the device and the bit-for-bit test against the unfused pair (``make gpu-tlfp8``), and the two launches'
bandwidth against Triton's same pair.
"""

from collections.abc import Callable
from typing import Any

from lazyops._backends.tilelang import quant_fp8, rmsnorm
from lazyops._backends.tilelang._rows import vector_elements
from lazyops._backends.tilelang._runtime import F32, FP8, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.rmsnorm_fp8 import RMSNormFP8Config, spec

#: the prefix of the quantizing launch's variants among a dynamic configuration's programs
QUANT = "quant_"


def programs(config: RMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``: rmsnorm's with a float8 output (a static scale), or with a
    float32 output (``"norm"``) and ``quant_fp8_tl``'s for the float32 norm (dynamic scales)."""
    if config.scales == "static":
        return rmsnorm.programs(config, out_dtype=FP8)
    norm = rmsnorm.programs(config, out_dtype=F32)["main"]
    quant = quant_fp8.programs(config.quant)
    return {"norm": norm, **{QUANT + name: build for name, build in quant.items() if name != "bounded"}}


def unsupported(config: RMSNormFP8Config) -> str | None:
    """Why this backend does not serve ``config`` (``None``: it does): the quantizing program's declines."""
    return None if config.scales == "static" else quant_fp8.unsupported(config.quant)


def norm_then_quant(
    config: Any, kernels: dict[str, Any], norm_spec: Any, written: tuple[int, ...] = ()
) -> Callable[..., None]:
    """``launch(*inputs, scale, out)`` of a dynamic fp8 norm: the norm program (``kernels["norm"]``, launched as
    ``norm_spec``'s kernel) into a float32 ``[M, n]`` buffer, then the quantizing program on it."""
    import torch

    norm = launch_out_of_place(norm_spec, kernels["norm"], vector_elements(config.n, tl_dtype(config.dtype)), written)
    quantize = quant_fp8.quant_launch(
        config.quant, {name.removeprefix(QUANT): kernel for name, kernel in kernels.items() if name != "norm"}
    )
    n = config.n

    def launch(*args: torch.Tensor) -> None:
        *inputs, scale, out = args
        if not inputs[0].shape[0]:
            return
        rows = torch.empty((inputs[0].shape[0], n), dtype=torch.float32, device=out.device)
        norm(*inputs, rows)
        quantize(rows, scale, None, out)

    return launch


@spec.implementation(device_type="cuda", strided_rows=True, writes_out=True, supports=unsupported)
def rmsnorm_fp8_tl(config: RMSNormFP8Config) -> Callable[..., None]:
    # launch(x, weight, scale, out)
    kernels = compiled(config.label, programs(config))
    if config.scales != "static":
        return norm_then_quant(config, kernels, rmsnorm.spec)
    return launch_out_of_place(spec, kernels["main"], vector_elements(config.n, tl_dtype(config.dtype)))
