"""The TileLang backend: every kernel written in TileLang's CUDA dialect, compiled once per static configuration.

A factory builds its kernel's TileLang program (a ``prim_func`` whose token count ``M`` is a dynamic size, so one
compiled kernel serves every ``M``), compiles it for the visible GPU and returns a thin launcher that checks its
arguments first. Compiled kernels are cached in memory per configuration and on disk by TileLang itself
(``TILELANG_CACHE_DIR``, ``~/.tilelang/cache`` by default), so a second process pays no compile time.

TileLang kernels need an NVIDIA GPU (sm_80 or newer); Hopper (sm_90) gets TMA copies and wgmma in the GEMM. This
package imports neither torch nor tilelang until a kernel module is loaded, so probing it stays cheap.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)


def default_device() -> str:
    """The GPU: the kernels are compiled for the visible NVIDIA device."""
    return "cuda"


# Defined beside the compile cache, which checks it too; imported here because the core looks for it on the
# backend package. Importing _runtime is cheap: it imports neither torch nor tilelang at module level.
from lazyops._backends.tilelang._runtime import unavailable_reason as unavailable_reason  # noqa: E402
