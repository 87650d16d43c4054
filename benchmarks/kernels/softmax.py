"""softmax_tl's peers beyond torch eager and torch.compile (which the timing engine derives from the spec)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def torch_native(config: Any) -> Callable[..., Any]:
    """``torch.softmax`` in the input dtype: torch's own kernel (float32 math inside, like lazyops)."""
    import torch

    return lambda x: torch.softmax(x, dim=-1)


def liger(config: Any) -> Callable[..., Any]:
    """liger-kernel's Triton softmax over the last dimension."""
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return LigerSoftmaxFunction.apply


PEERS = {"torch.softmax": torch_native, "liger-kernel": liger}
