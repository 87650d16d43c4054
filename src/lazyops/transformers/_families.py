"""The model families :func:`lazyops.transformers.patch` knows: their module classes, by name, and what differs.

Hugging Face names a family's classes after it (``LlamaRMSNorm``, ``Qwen3MoeSparseMoeBlock``) in every version
this package reads (transformers 5.17 to 5.25), so a family is its class prefix and its traits; a class is matched
by name, never imported, so that a family whose modeling module is absent costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One model family: ``prefix`` names its classes; ``norm_offset`` is Gemma's ``1 + weight``; ``pre_norm``:
    its decoder layer is Llama's (norm, attention, add, norm, MLP, add), whose first add fuses into the second norm
    (``add_rmsnorm_tl``); Gemma's layers norm each sublayer's output before the add, and stay as they are."""

    name: str
    prefix: str
    norm_offset: float = 0.0
    pre_norm: bool = True
    moe: bool = False

    def role(self, class_name: str) -> str | None:
        """``"norm"``, ``"mlp"``, ``"attention"``, ``"layer"`` or ``"moe"`` for one of this family's module classes."""
        suffix = class_name.removeprefix(self.prefix) if class_name.startswith(self.prefix) else None
        return ROLES.get(suffix) if suffix is not None else None


ROLES = {
    "RMSNorm": "norm",
    "MLP": "mlp",
    "Attention": "attention",
    "DecoderLayer": "layer",
    "SparseMoeBlock": "moe",
}

#: By ``config.model_type``. Gemma 3's text model is ``gemma3_text``; ``gemma3`` is the multimodal one, whose
#: language model has the same classes (its vision tower is reported as stock).
FAMILIES = {
    family.name: family
    for family in (
        Family("llama", "Llama"),
        Family("mistral", "Mistral"),
        Family("qwen2", "Qwen2"),
        Family("qwen3", "Qwen3"),
        Family("gemma2", "Gemma2", norm_offset=1.0, pre_norm=False),
        Family("gemma3_text", "Gemma3", norm_offset=1.0, pre_norm=False),
        Family("gemma3", "Gemma3", norm_offset=1.0, pre_norm=False),
        Family("mixtral", "Mixtral", moe=True),
        Family("qwen3_moe", "Qwen3Moe", moe=True),
    )
}

#: What a family's layers hold beside the modules lazyops patches, left as they are on purpose: the projections
#: (cuBLAS's GEMMs), the embeddings, the rotary embedding (its cos/sin feed ``rope_tl``), the MoE block's parts.
STOCK_BY_DESIGN = ("Linear", "Embedding", "Dropout", "ModuleList", "RotaryEmbedding", "Experts", "TopKRouter")

#: ``hidden_act`` / ``hidden_activation`` → the gated kernel and its ``approximate``.
ACTIVATIONS = {
    "silu": ("silu_and_mul_tl", None),
    "swish": ("silu_and_mul_tl", None),
    "gelu": ("gelu_and_mul_tl", "none"),
    "gelu_pytorch_tanh": ("gelu_and_mul_tl", "tanh"),
    "gelu_new": ("gelu_and_mul_tl", "tanh"),
}
