"""The torch reference backend: every kernel, in plain PyTorch, math in float32.

It is the specification of each kernel, the last-resort fallback and the reference every other backend is
tested against (in float64, through the same ``*_reference`` functions). It runs wherever torch runs.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
