"""A GEMM sweep's candidate as TileLang's ``Tile``: how ``gemm_decode_sweep.py`` and ``gemm_large_sweep.py``
turn the tilings they time into the backend's own."""

from __future__ import annotations

from typing import Any


def tilelang_tile(candidate: Any) -> Any:
    """``lazyops._backends.tilelang.matmul.Tile`` of ``candidate`` (its ``block_m``, ``block_n``, ``block_k``,
    ``num_stages``, ``num_warps``, ``shared_epilogue``, and ``warp_policy`` and ``persistent`` where it has them):
    ``num_warps`` 4 is one warpgroup of 128 consumer threads."""
    from lazyops._backends.tilelang import matmul as tilelang_matmul

    return tilelang_matmul.Tile(
        candidate.block_m,
        candidate.block_n,
        candidate.block_k,
        candidate.num_stages,
        32 * candidate.num_warps,
        getattr(candidate, "warp_policy", "square"),
        candidate.shared_epilogue,
        getattr(candidate, "persistent", 0),
    )
