"""layernorm_tl's peers beyond torch eager and torch.compile (which the timing engine derives from the spec).

``PEERS`` maps a row name to ``build(config) -> call``; ``config`` is the spec's (``n``, ``dtype``, ``eps``,
``weight_dtype``). A peer that is not installed raises ``ImportError`` while building, and its row says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def torch_native(config: Any) -> Callable[..., Any]:
    """``F.layer_norm``: torch's own fused op (a float32 weight under 16-bit activations is upcast to ``x``'s
    dtype, as a caller of the native op would have to on CUDA)."""
    from torch.nn import functional

    shape, eps, dtype = (config.n,), config.eps, config.dtype
    return lambda x, weight, bias: functional.layer_norm(x, shape, weight.to(dtype), bias.to(dtype), eps)


def liger(config: Any) -> Callable[..., Any]:
    """liger-kernel's Triton LayerNorm (the statistics in float32, as lazyops computes)."""
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    eps = config.eps
    return lambda x, weight, bias: LigerLayerNormFunction.apply(x, weight, bias, eps)


PEERS = {"F.layer_norm": torch_native, "liger-kernel": liger}
