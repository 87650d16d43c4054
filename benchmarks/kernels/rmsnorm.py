"""rmsnorm_tl's peers beyond torch eager and torch.compile (which the timing engine derives from the spec).

``PEERS`` maps a row name to ``build(config) -> call``; ``config`` is the spec's (``n``, ``dtype``, ``eps``). A
peer that is not installed raises ``ImportError`` while building, and its row says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def torch_native(config: Any) -> Callable[..., Any]:
    """``F.rms_norm``: torch's own op (its CUDA kernel since torch 2.4 fuses the whole norm)."""
    from torch.nn import functional

    shape, eps = (config.n,), config.eps
    return lambda x, weight: functional.rms_norm(x, shape, weight, eps)


def liger(config: Any) -> Callable[..., Any]:
    """liger-kernel's Triton RMSNorm, Llama casting (the inverse RMS in float32, as lazyops computes)."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    eps = config.eps
    return lambda x, weight: LigerRMSNormFunction.apply(x, weight, eps)


PEERS = {"F.rms_norm": torch_native, "liger-kernel": liger}
