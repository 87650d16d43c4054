"""What the two paged-KV-cache kernels share (``kv_cache_write_tl`` and ``paged_attention_tl``): the cache's layout,
the fp8 cache's scales, heads given as their own dimension or packed in a row, and the host reads of index values.

The cache is vLLM's flash layout ("NHD"): ``key_cache[num_blocks, block_size, Hk, D]`` and a ``value_cache`` of the
same shape, contiguous. A token's slot is ``block * block_size + offset``.

The scales of an fp8 cache are one-element float32 tensors passed as keyword arguments (``k_scale=``, ``v_scale=``),
read by the kernel on every launch, so that a CUDA graph replays with whatever they hold. Without an fp8 cache they
are absent: ``None`` (the custom operator's ``Tensor?``; an empty tensor is read as absent too).

A spec here differs from a row kernel's in two ways the generic machinery (``KernelSpec``) does not know, handled
by :class:`PagedSpec`: a query or key may be ``[T, H, D]`` or ``[*T, H*D]``; and index values (block ids, lengths,
slots) are checked by reading them on the host, which is free for CPU tensors and a device synchronisation
elsewhere.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs import _checks as checks
from lazyops.specs._spec import KernelSpec

#: The fp8 cache's dtype and its largest finite value (stored values saturate there).
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
#: The names of the two scale arguments, in the order the operator takes them (after the positional inputs).
SCALES = ("k_scale", "v_scale")
#: The names ``cache_dtype`` accepts for the fp8 cache besides ``torch.float8_e4m3fn``.
FP8_NAMES = ("float8_e4m3fn", "fp8", "fp8_e4m3")


def cache_dtype(factory: str, value: Any, dtype: torch.dtype) -> torch.dtype:
    """The factory's ``cache_dtype``: ``dtype`` when None, else ``dtype`` itself or ``torch.float8_e4m3fn``."""
    if value is None:
        return dtype
    if value is FP8_DTYPE or (isinstance(value, str) and value.lower().removeprefix("torch.") in FP8_NAMES):
        return FP8_DTYPE
    try:
        resolved: torch.dtype | None = arguments.canonical_dtype(factory, value)
    except KernelInputError:
        resolved = None
    if resolved is not dtype:
        raise KernelInputError(
            f"{factory}: cache_dtype={value!r}; the cache holds the factory's dtype ({dtype}, cache_dtype=None) or "
            "torch.float8_e4m3fn (with k_scale and v_scale at every call)"
        )
    return dtype


def absent(scale: Any) -> bool:
    """An absent scale: None, or an empty tensor (the operator's and the kit's spelling of None)."""
    return scale is None or (isinstance(scale, torch.Tensor) and scale.numel() == 0)


def check_scales(label: str, fp8: bool, k_scale: Any, v_scale: Any, device: torch.device) -> None:
    """Both scales one-element float32 tensors beside the cache for an fp8 cache, both absent otherwise."""
    for name, scale in zip(SCALES, (k_scale, v_scale), strict=True):
        if not fp8:
            if not absent(scale) or (scale is not None and scale.dtype is not torch.float32):
                raise KernelInputError(
                    f"{label}: {name} is given but the cache holds the activations' dtype; scales apply to an fp8 "
                    f"cache only (cache_dtype=torch.float8_e4m3fn): pass {name}=None"
                )
            continue
        if scale is None or not isinstance(scale, torch.Tensor) or scale.numel() != 1:
            found = "None" if scale is None else f"shape {tuple(getattr(scale, 'shape', ()))}"
            raise KernelInputError(
                f"{label}: {name} is {found}; an fp8 cache needs {name} as a one-element float32 tensor (its "
                f"dequantisation scale: cache = fp8(x / {name}))"
            )
        checks.check_kind(label, name, scale, torch.float32, device, fixed=True)


def check_cache(
    label: str,
    name: str,
    cache: Any,
    block_size: int,
    heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | None,
) -> None:
    """``[num_blocks, block_size, Hk, D]``, contiguous, of the factory's cache dtype."""
    checks.check_tensor(
        label, name, cache, shape=("num_blocks", block_size, heads, head_dim), dtype=dtype, device=device
    )


def check_head_rows(
    label: str, arg: str, tensor: Any, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device | None = None
) -> None:
    """A token-indexed tensor of ``heads`` heads: ``[T, heads, head_dim]`` (heads contiguous within a token, tokens
    one row stride apart) or ``[*T, heads * head_dim]`` (rows, any leading dimensions, strided rows)."""
    if is_heads_form(tensor, heads, head_dim):
        checks.check_kind(label, arg, tensor, dtype, device)
        tokens, head_step, feature_step = tensor.stride()
        if (
            (head_dim > 1 and feature_step != 1)
            or (heads > 1 and head_step != head_dim)
            or (tensor.shape[0] > 1 and tokens < heads * head_dim)
        ):
            raise KernelInputError(
                f"{label}: {arg} of shape {tuple(tensor.shape)} has strides {tensor.stride()}: the heads of a token "
                f"must be contiguous (stride {head_dim} between heads) and tokens one row stride apart; pass "
                f"{arg}.contiguous()"
            )
        return
    checks.check_rows(label, arg, tensor, width=heads * head_dim, dtype=dtype, device=device)


def is_heads_form(tensor: Any, heads: int, head_dim: int) -> bool:
    """``[T, heads, head_dim]`` rather than rows ``[*T, heads * head_dim]`` (for one head the two coincide)."""
    shape: Any = getattr(tensor, "shape", ())
    return len(shape) == 3 and shape[1] == heads and shape[2] == head_dim


def token_count(tensor: Any, heads: int, head_dim: int) -> int:
    """``T``: the tokens of a ``[T, H, D]`` or ``[*T, H*D]`` tensor."""
    shape = tensor.shape
    if is_heads_form(tensor, heads, head_dim):
        return int(shape[0])
    return math.prod(shape[:-1])


def token_rows(tensor: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """The ``[T, heads * head_dim]`` view of a checked ``[T, H, D]`` or ``[*T, H*D]`` tensor (itself when 2-D)."""
    if tensor.dim() == 2:
        return tensor
    return tensor.view(token_count(tensor, heads, head_dim), heads * head_dim)


def reads_values(tensor: torch.Tensor, validate: bool) -> bool:
    """Whether the index values of ``tensor`` are checked: on the host always (reading them there costs nothing),
    elsewhere when the factory was given ``validate=True`` (the read synchronises the device, which an engine's
    decode step must not do, nor a CUDA graph's capture); never for tensors without values (meta, the fake tensors
    ``torch.compile`` traces with)."""
    if tensor.is_meta or checks._is_fake(tensor):  # the one test for a fake tensor lazyops has
        return False
    return tensor.device.type == "cpu" or validate


def host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the host, as int64 (a synchronising copy for a device tensor)."""
    return tensor.detach().to("cpu", torch.int64)


class PagedSpec(KernelSpec):
    """A spec whose call takes the fp8 cache's scales as keyword arguments (``k_scale=``, ``v_scale=``: declared
    ``Other(..., keyword=True)``, absent as ``None``) and token-indexed tensors as ``[T, H, D]`` or ``[*T, H*D]``."""

    #: ``(inputs name, heads attribute of the config)`` of each token-indexed input (``("query", "num_heads")``)
    head_inputs: tuple[tuple[str, str], ...] = ()

    def rows(self, config: Any, *args: Any) -> tuple[Any, ...]:
        """Each token-indexed input as ``[T, H*D]`` rows, whether given as ``[T, H, D]`` or ``[*T, H*D]``."""
        laid = list(args)
        for name, heads in self.head_inputs:
            index = self.inputs.index(name)
            laid[index] = token_rows(laid[index], getattr(config, heads), config.head_dim)
        return tuple(laid)

    def tokens(self, config: Any, *args: Any) -> int:
        """``T`` of the first token-indexed input, ``[T, H, D]`` or ``[*T, H*D]``."""
        name, heads = self.head_inputs[0]
        return token_count(args[self.inputs.index(name)], getattr(config, heads), config.head_dim)

    def check_aliasing(self, config: Any, *args: Any) -> None:
        """The caches written in place share no element with another input, whatever its dtype (absent scales
        skipped)."""
        from lazyops.specs._checks import overlap

        inputs = self.inputs
        for name in self.mutates:
            written = args[inputs.index(name)]
            for other_name, other in zip(inputs, args, strict=True):
                if other_name == name or absent(other):
                    continue
                if overlap(written, other):
                    raise KernelInputError(
                        f"{config.label}: {name} overlaps {other_name} in memory; {name} is written in place, so "
                        "they must not share elements: pass separate tensors"
                    )

    def check_out(self, config: Any, out: Any, *args: Any) -> None:
        """:meth:`KernelSpec.check_out` for an output of heads (``[T, H, D]`` or ``[*T, H*D]``, rows strided or
        not), absent scales left out of the overlap comparisons."""
        name, heads = self.head_inputs[0]
        label = config.label
        check_head_rows(
            label, "out", out, getattr(config, heads), config.head_dim, self.out_dtype(config), args[0].device
        )
        expected = self.out_shape(config, *args)
        if tuple(out.shape) != tuple(expected):
            raise KernelInputError(
                f"{label}: out has shape {tuple(out.shape)}; this call writes {tuple(expected)} ({name}'s shape; pass "
                "out=None to have the kernel allocate it)"
            )
        if checks._is_fake(out):  # a traced call: no memory to compare (the compiler tracks aliasing)
            return
        for other, arg in zip(self.inputs, args, strict=True):
            if not absent(arg) and checks.overlap(out, arg):
                raise KernelInputError(
                    f"{label}: out overlaps {other} in memory; the kernel would read what it has already written: "
                    "pass a separate buffer"
                )

    def out_rows(self, config: Any, out: torch.Tensor) -> torch.Tensor:
        """``out`` as ``[T, H*D]`` rows, whether given as ``[T, H, D]`` (rows strided or not) or ``[*T, H*D]``."""
        return token_rows(out, getattr(config, self.head_inputs[0][1]), config.head_dim)
