"""A Hugging Face model on lazyops kernels in one call, and which kernel runs in each layer.

    import lazyops.transformers
    report = lazyops.transformers.patch(model)   # norms, gated MLP, rope, attention (and MoE blocks) in place
    report.print()                               # per module: the kernel, its backend and why (lazyops.which)
    lazyops.transformers.unpatch(model)          # the stock model again

Needs ``pip install 'lazyops[transformers]'``. ``import lazyops`` never imports this package (nor torch nor
transformers); ``import lazyops.transformers`` imports both. The attention implementation is registered with
transformers' ``AttentionInterface`` as ``"lazyops"`` (``"paged|lazyops"`` for continuous batching where
transformers asks for that variant), so ``from_pretrained(..., attn_implementation="lazyops")`` works too, after
:func:`register_attention`.
"""

from __future__ import annotations

from lazyops.transformers._attention import register as register_attention
from lazyops.transformers._patch import patch, report, unpatch
from lazyops.transformers._report import Report, Row

__all__ = ["Report", "Row", "patch", "register_attention", "report", "unpatch"]
