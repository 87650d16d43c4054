"""add_rmsnorm_tl's peers beyond torch eager and torch.compile (which the timing engine derives from the spec).

torch has no fused add-and-norm op; liger-kernel has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def liger(config: Any) -> Callable[..., Any]:
    """liger-kernel's fused add + RMSNorm. It writes the sum to a new tensor instead of into ``residual``: the
    same bytes moved, so its GB/s compare with the in-place kernels'."""
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    eps = config.eps
    return lambda x, residual, weight: LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps)[0]


PEERS = {"liger-kernel": liger}
