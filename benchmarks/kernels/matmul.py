"""matmul_tl's peers beyond torch eager and torch.compile (which the timing engine derives from the spec).

The generic eager peer computes the GEMM in float32, as the spec defines it; an engine's real peer is cuBLAS in
the input dtype (float32 accumulation inside), which is what the GEMM goals are measured against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def cublas(config: Any) -> Callable[..., Any]:
    """``a @ b`` in the input dtype: cuBLAS on CUDA (TF32 off, torch's default for float32)."""
    return lambda a, b: a @ b


PEERS = {"cuBLAS (a @ b)": cublas}
