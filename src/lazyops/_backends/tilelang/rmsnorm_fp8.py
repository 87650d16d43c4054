"""RMSNorm quantized to float8 in TileLang (``lazyops.specs.rmsnorm_fp8``): the norm in float32, divided by the
per-tensor scale, converted once with saturation at ±448, as vLLM's ``rms_norm_static_fp8_quant``.

It is the rmsnorm program (:func:`lazyops._backends.tilelang.rmsnorm.rmsnorm_program`) with a float8 output: one
definition, so the two cannot drift apart, and the fp8 form gets what the rmsnorm has (16-byte loads, strided
rows, ``out=``). Its stores are 8 bytes a thread-vector (8 float8 values from 8 bf16 ones): the previous,
separate program clamped by comparisons before converting, which TileLang could not vectorise, so it stored one
byte at a time (41.8 % of the copy at M = 32768, issue 12).

Dynamic scales (``scales="token"``, ``"group"``: per token or per group, row- or column-major, UE8M0), rows held
in registers (``n <= 16384``): one pass. The same program computes the norm as it would store it in float32, stages
it in shared memory and re-reads it as ``[rows * groups, group_size]`` segments, takes each segment's NaN-free
maximum by a block reduction, writes the scale and stores ``norm / scale`` with the saturating conversion
(:func:`lazyops._backends.tilelang._fp8.dynamic_store`): the float32 values and the arithmetic of the unfused pair
(the norm in float32, then ``quant_fp8_tl``'s program), so the two agree bit for bit where the sum of squares is
added in the same order: float32 inputs. A 16-bit row is laid over the threads by its own 16-byte vectors, the
float32 ``rmsnorm_tl`` of the upcast row by float32's, so there the sums differ by a few float32 ulps (``n *
2**-24`` relative at most), the scales by as much, and a float8 value by one step only where the norm lies that
close to a rounding boundary (``tests/kernels/test_fp8_norm_scales.py``). 8 bytes an element fewer than the pair.
Wider rows (streamed, read twice) are two launches, as Triton's (docs/decisions/013): the rmsnorm program with a
float32 output into an ``[M, n]`` buffer, then ``quant_fp8_tl``'s program on it. Groups narrower
than a 16-byte float32 vector (4 columns) are declined, as ``quant_fp8_tl`` declines them.

What a GPU must still confirm (nothing here has run on one; CI lowers every program for sm_90a): the kit's dynamic
cases on the device and the bit-for-bit test against the unfused pair (``make gpu-tlfp8``: that nvcc keeps the
norm's float32 expression as the plain program's, no contraction), and the one pass's bandwidth against Triton's
two launches.
"""

from collections.abc import Callable
from typing import Any

from lazyops._backends.tilelang import quant_fp8, rmsnorm
from lazyops._backends.tilelang._rows import plan_rows, vector_elements
from lazyops._backends.tilelang._runtime import F32, FP8, compiled, launch_out_of_place, tl_dtype
from lazyops.specs.rmsnorm_fp8 import RMSNormFP8Config, spec

#: the prefix of the quantizing launch's variants among a dynamic configuration's programs
QUANT = "quant_"


def programs(config: RMSNormFP8Config) -> dict[str, Callable[[], Any]]:
    """The programs the factory compiles for ``config``: rmsnorm's with a float8 output (a static scale, or dynamic
    scales in the same pass where rows are held in registers), or with a float32 output (``"norm"``) and
    ``quant_fp8_tl``'s for the float32 norm (dynamic scales of wider rows)."""
    if config.scales == "static":
        return rmsnorm.programs(config, out_dtype=FP8)
    if one_pass(config):
        return rmsnorm.programs(config, out_dtype=FP8, dynamic=dynamic_options(config))
    norm = rmsnorm.programs(config, out_dtype=F32)["main"]
    quant = quant_fp8.programs(config.quant)
    return {"norm": norm, **{QUANT + name: build for name, build in quant.items() if name != "bounded"}}


def one_pass(config: Any) -> bool:
    """Whether a dynamic configuration's scales are computed in the norm's own pass (its rows held in registers)."""
    return plan_rows(config.n, tl_dtype(config.dtype)).resident


def dynamic_options(config: Any) -> tuple[int, bool]:
    """``(group_size, ue8m0)`` of the one-pass program: a token's scale is a group of the whole row."""
    return (config.group_size if config.scales == "group" else config.n), config.ue8m0


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
    multiple = vector_elements(config.n, tl_dtype(config.dtype))
    if config.scales == "static":
        return launch_out_of_place(spec, kernels["main"], multiple)
    if one_pass(config):  # the scale is written too: copied back if the launch had to copy it
        return launch_out_of_place(spec, kernels["main"], multiple, written=(2,))
    return norm_then_quant(config, kernels, rmsnorm.spec)
