"""The patched forwards: what a module runs once :func:`lazyops.transformers.patch` has put it on lazyops.

Each is installed on the instance (``module.forward``), never on the class, so one model's patch touches no other
model; rope, which Hugging Face calls as a module-level function (``modeling_llama.apply_rotary_pos_emb``), is the
one exception, replaced in its modeling module while any model of that family is patched (counted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import lazyops


class Kernels:
    """One kernel configuration of ``lazyops.<name>``, built per activation dtype (the factory's second argument):
    the model's dtype at patch time, another if the model is cast later."""

    def __init__(self, name: str, first: Any, *rest: Any, **options: Any) -> None:
        self.name, self.first, self.rest, self.options = name, first, rest, options
        self.built: dict[torch.dtype, Any] = {}

    def arguments(self, dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.first, dtype, *self.rest), self.options

    def which(self, dtype: torch.dtype) -> Any:
        args, options = self.arguments(dtype)
        return lazyops.which(self.name, *args, **options)

    def __call__(self, dtype: torch.dtype) -> Any:
        kernel = self.built.get(dtype)
        if kernel is None:
            args, options = self.arguments(dtype)
            kernel = self.built[dtype] = getattr(lazyops, self.name)(*args, **options)
        return kernel


def norm(module: Any, offset: float) -> Kernels:
    """``rmsnorm_tl`` of a Hugging Face RMSNorm (``variance_epsilon`` or ``eps``; Gemma's ``offset`` 1)."""
    eps = getattr(module, "variance_epsilon", None)
    eps = module.eps if eps is None else eps
    weight = module.weight
    return Kernels("rmsnorm_tl", weight.numel(), float(eps), weight_dtype=weight.dtype, weight_offset=offset)


def norm_forward(module: Any, kernels: Kernels) -> Callable[..., Any]:
    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        kernel = kernels(hidden_states.dtype)
        if (
            hidden_states.dim() == 4
            and not hidden_states.is_contiguous()
            and hidden_states.transpose(1, 2).is_contiguous()
        ):
            # a per-head norm of [B, H, S, D] heads transposed from the projection's [B, S, H, D] (Gemma 3's)
            return kernel(hidden_states.transpose(1, 2), module.weight).transpose(1, 2)  # type: ignore[no-any-return]
        return kernel(hidden_states, module.weight)  # type: ignore[no-any-return]

    return forward


def add_norm(norm_module: Any, offset: float) -> Kernels:
    plain = norm(norm_module, offset)
    return Kernels("add_rmsnorm_tl", plain.first, *plain.rest, **plain.options)


def pre_norm_layer_forward(layer: Any, fused: Kernels) -> Callable[..., Any]:
    """A Llama-style decoder layer whose first residual add runs inside ``add_rmsnorm_tl`` with the post-attention
    norm. The attention's output takes the sum (it is fresh; the layer's input, which callers may keep, is not
    written). Every keyword goes to the attention as the stock layer passes it."""
    post = layer.post_attention_layernorm

    def forward(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if args:
            raise TypeError(
                f"{type(layer).__name__} patched by lazyops takes its arguments after hidden_states by keyword, as "
                "transformers passes them; got positional ones"
            )
        attended, _ = layer.self_attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)
        normed = fused(attended.dtype)(hidden_states, attended, post.weight)  # attended becomes the residual
        out = layer.mlp(normed)
        return attended + (out[0] if isinstance(out, tuple) else out)  # type: ignore[no-any-return]

    return forward


def gated(module: Any, kernel: str, approximate: str | None) -> Kernels:
    size = module.gate_proj.weight.shape[0]
    return Kernels(kernel, size, approximate) if approximate is not None else Kernels(kernel, size)


def mlp_unsupported(module: Any) -> str | None:
    """Why a gated MLP's projections cannot be packed into one ``[2I, H]`` weight: only plain ``nn.Linear`` without
    bias, on one device and dtype (quantised or offloaded layers keep their own forward)."""
    projections = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(type(p) is torch.nn.Linear and p.bias is None for p in projections):
        return "its projections are not bias-free torch.nn.Linear (quantised or adapted layers keep their forward)"
    gate, up = projections[0].weight, projections[1].weight  # type: ignore[union-attr]
    if gate.device != up.device or gate.dtype != up.dtype or gate.device.type == "meta":
        return f"gate_proj and up_proj are on {gate.device}/{gate.dtype} and {up.device}/{up.dtype}"
    if getattr(module, "_hf_hook", None) is not None or getattr(projections[0], "_hf_hook", None) is not None:
        return "accelerate moves its weights (offloading hooks)"
    return None


def pack_gate_up(module: Any) -> Callable[[], None]:
    """``gate_proj`` and ``up_proj`` made views of one ``[2I, H]`` buffer (``lazyops_gate_up``, not saved): one GEMM
    instead of two, no second copy of the weights. Returns the undo, which gives each its own tensor back."""
    gate, up = module.gate_proj, module.up_proj
    size = gate.weight.shape[0]
    with torch.no_grad():
        packed = torch.cat([gate.weight, up.weight])
    module.register_buffer("lazyops_gate_up", packed, persistent=False)
    flags = gate.weight.requires_grad, up.weight.requires_grad
    gate.weight = torch.nn.Parameter(packed[:size], requires_grad=flags[0])
    up.weight = torch.nn.Parameter(packed[size:], requires_grad=flags[1])

    def undo() -> None:
        with torch.no_grad():
            gate.weight = torch.nn.Parameter(gate.weight.detach().clone(), requires_grad=flags[0])
            up.weight = torch.nn.Parameter(up.weight.detach().clone(), requires_grad=flags[1])
        del module.lazyops_gate_up

    return undo


def mlp_forward(module: Any, kernels: Kernels) -> Callable[..., Any]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        gate_up = torch.nn.functional.linear(x, module.lazyops_gate_up)
        return module.down_proj(kernels(x.dtype)(gate_up))  # type: ignore[no-any-return]

    return forward


def rope(head_dim: int) -> Kernels:
    return Kernels("rope_tl", head_dim, True)


def rotary_function(stock: Callable[..., Any]) -> Callable[..., Any]:
    """A drop-in ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``: ``q[B, H, S, D]`` and ``k`` rotated in
    place by ``rope_tl`` (on their ``[B, S, H, D]`` layout, the projections' own), with the model's ``cos``/``sin``
    ``[B, S, D]`` as the cache of one row per token: whatever the rope type (linear, llama3, yarn, dynamic), the
    numbers are the model's. ``stock`` is the function it replaces, named in the error where a call is not of that
    form."""
    by_head_dim: dict[int, Kernels] = {}

    def apply_rotary_pos_emb(
        q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1, **_: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, _heads, tokens, head_dim = q.shape
        if unsqueeze_dim != 1 or cos.shape[-1] != head_dim or cos.dim() != 3:
            raise ValueError(
                f"lazyops rope: {stock.__module__}.apply_rotary_pos_emb called with cos {tuple(cos.shape)}, "
                f"unsqueeze_dim={unsqueeze_dim} for queries {tuple(q.shape)}; lazyops takes [batch, tokens, head_dim] "
                "with unsqueeze_dim=1: patch(model, kernels=...) without rope_tl leaves the model's own"
            )
        kernels = by_head_dim.get(head_dim)
        if kernels is None:
            kernels = by_head_dim[head_dim] = rope(head_dim)
        half = head_dim // 2
        table = torch.cat([cos[..., :half], sin[..., :half]], -1).expand(batch, tokens, head_dim)
        table = table.reshape(batch * tokens, head_dim).float()
        positions = torch.arange(batch * tokens, device=q.device).view(batch, tokens)
        kernels(q.dtype)(positions, q.transpose(1, 2), k.transpose(1, 2), table)
        return q, k

    apply_rotary_pos_emb.lazyops_stock = stock  # type: ignore[attr-defined]
    apply_rotary_pos_emb.lazyops_kernels = by_head_dim  # type: ignore[attr-defined]
    return apply_rotary_pos_emb
