"""The torch backend: every kernel in plain PyTorch, the platform default on the CPU and the last-resort fallback.

It runs wherever torch runs. Each kernel's definition (and float64 test oracle) is its spec in ``lazyops.specs``;
the modules here are the implementations that run.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
