"""The torch backend: every kernel in plain PyTorch, the platform default on the CPU and the last-resort fallback.

It runs wherever torch runs. Each kernel's definition (and float64 test oracle) is its spec in ``lazyops.specs``;
the modules here are the implementations that run.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)


def default_device() -> str:
    """A CUDA device when torch sees one, else the host: the reference runs wherever its tensors are."""
    import torch  # here, not at the top: importing a backend package stays cheap

    return "cuda" if torch.cuda.is_available() else "cpu"
