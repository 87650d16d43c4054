"""``patch`` and ``unpatch``: a loaded model's modules put on lazyops kernels in place, and taken back.

Everything is decided and built before anything is changed (each configuration resolved by ``lazyops.which``, each
kernel built), so a refusal (strict mode, a configuration no backend serves) leaves the model as it was; the
changes are then applied, each with its undo, which ``unpatch`` runs in reverse.
"""

from __future__ import annotations

import copy
import difflib
import functools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

import lazyops
from lazyops.transformers import _attention, _modules, _moe
from lazyops.transformers._families import ACTIVATIONS, FAMILIES, STOCK_BY_DESIGN, Family
from lazyops.transformers._report import Report, Row

#: What ``kernels=`` may name, by the role it patches.
KERNELS = {
    "rmsnorm_tl": "norm",
    "add_rmsnorm_tl": "layer",
    "silu_and_mul_tl": "mlp",
    "gelu_and_mul_tl": "mlp",
    "rope_tl": "rope",
    "paged_attention_tl": "attention",
    "moe_route_tl": "moe",
    "fused_moe_tl": "moe",
}
STATE = "_lazyops_patch"
#: Rope's replaced functions, by modeling module: ``[stock function, models patched]``.
_ROPE: dict[str, list[Any]] = {}


@dataclass
class Change:
    apply: Callable[[], None]
    undo: Callable[[], None]


@dataclass
class Plan:
    report: Report
    changes: list[Change] = field(default_factory=list)


def patch(model: torch.nn.Module, *, kernels: Iterable[str] | None = None, attention: bool = True) -> Report:
    """Put ``model``'s modules on lazyops kernels, in place, and say which kernel runs where.

    ``model`` is a loaded Hugging Face model of a family lazyops knows (Llama, Mistral, Qwen2, Qwen3, Gemma 2 and 3,
    Mixtral, Qwen3-MoE): its RMSNorms (``rmsnorm_tl``; in Llama-style layers the residual add with the
    post-attention norm, ``add_rmsnorm_tl``), gated MLPs (``silu_and_mul_tl``, Gemma's ``gelu_and_mul_tl``), rope
    (``rope_tl``), attention (``paged_attention_tl``, through transformers' ``AttentionInterface``) and MoE blocks
    (``moe_route_tl`` and ``fused_moe_tl``, where lazyops has them). ``kernels``: only those kernel names;
    ``attention=False``: leave attention as the model has it. A family or module lazyops does not know stays as it
    is and is named in the returned :class:`Report`. Each configuration resolves as ``lazyops.which`` says (the
    backend selected, a plan, strict mode: a kernel the chain lacks raises ``KernelUnavailableError`` naming the
    module, and nothing is changed). Undone by :func:`unpatch`. For inference: a kernel refuses inputs that require
    grad while grad mode is on.
    """
    if getattr(model, STATE, None) is not None:
        raise RuntimeError(f"{type(model).__name__} is already patched by lazyops; unpatch(model) first")
    chosen = _chosen(kernels, attention)
    plan = _plan(model, chosen)
    applied: list[Change] = []
    try:
        for change in plan.changes:
            change.apply()
            applied.append(change)
    except BaseException:
        for change in reversed(applied):
            change.undo()
        raise
    setattr(model, STATE, plan)
    return plan.report


def unpatch(model: torch.nn.Module) -> None:
    """Give ``model`` its stock modules back (what :func:`patch` changed, in reverse)."""
    plan = getattr(model, STATE, None)
    if plan is None:
        raise ValueError(f"{type(model).__name__} is not patched by lazyops (nothing to undo)")
    for change in reversed(plan.changes):
        change.undo()
    delattr(model, STATE)


def report(model: torch.nn.Module) -> Report | None:
    """The report of ``model``'s patch in force, or None."""
    plan = getattr(model, STATE, None)
    return None if plan is None else plan.report


def _chosen(kernels: Iterable[str] | None, attention: bool) -> set[str]:
    if isinstance(kernels, str):
        kernels = [kernels]
    names = set(KERNELS) if kernels is None else set(kernels)
    for name in sorted(names - set(KERNELS)):
        near = difflib.get_close_matches(name, KERNELS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(
            f"patch(kernels=...): {name!r} is not a kernel lazyops.transformers patches{hint} "
            f"(known: {', '.join(KERNELS)})"
        )
    return names if attention else names - {"paged_attention_tl"}


def _dtype(model: torch.nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _plan(model: Any, chosen: set[str]) -> Plan:
    config = model.config
    model_type = str(getattr(config, "model_type", "?"))
    family = FAMILIES.get(model_type)
    plan = Plan(Report(model_type))
    if family is None:
        known = ", ".join(sorted(FAMILIES))
        detail = f"model family {model_type!r} is not one lazyops.transformers knows ({known}): left as it is"
        plan.report.rows.append(Row("", type(model).__name__, detail=detail))
        return plan
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    planner = _Planner(plan, family, text_config, _dtype(model), chosen)
    for path, module in model.named_modules():
        planner.visit(path, module)
    planner.unknown_blocks(model)
    return plan


class _Planner:
    def __init__(self, plan: Plan, family: Family, config: Any, dtype: torch.dtype, chosen: set[str]) -> None:
        self.plan, self.family, self.config, self.dtype, self.chosen = plan, family, config, dtype, chosen
        self.fused: dict[str, Row] = {}  # post-attention norms whose add fuses into their layer

    def row(self, path: str, module: Any, kernel: str, resolution: Any, detail: str = "") -> None:
        if resolution.declined:
            declined = "; ".join(f"{backend} declines: {why}" for backend, why in resolution.declined)
            detail = f"{detail}; {declined}" if detail else declined
        self.plan.report.rows.append(
            Row(path, type(module).__name__, kernel, resolution.backend, resolution.reason, detail)
        )

    def stock(self, path: str, module: Any, detail: str) -> None:
        self.plan.report.rows.append(Row(path, type(module).__name__, detail=detail))

    def resolve(self, path: str, module: Any, kernel: str, ask: Callable[[], Any]) -> Any:
        """``ask()`` (a ``lazyops.which``), its refusal named after the module that needs the kernel."""
        try:
            return ask()
        except lazyops.KernelUnavailableError as error:
            message = (
                f"{path} ({type(module).__name__}) needs {kernel}: {error}; "
                f"patch(model, kernels=[...]) without {kernel} leaves it stock"
            )
            raise lazyops.KernelUnavailableError(error.kernel, error.backend, error.available_in, message) from error

    def visit(self, path: str, module: Any) -> None:
        role = self.family.role(type(module).__name__)
        if role == "norm" and "rmsnorm_tl" in self.chosen:
            self.norm(path, module)
        elif role == "mlp" and self.chosen & {"silu_and_mul_tl", "gelu_and_mul_tl"}:
            self.mlp(path, module)
        elif role == "attention":
            self.attention(path, module)
        elif role == "layer" and self.family.pre_norm and "add_rmsnorm_tl" in self.chosen:
            self.layer(path, module)
        elif role == "moe" and self.chosen & {"moe_route_tl", "fused_moe_tl"}:
            self.moe(path, module)

    def norm(self, path: str, module: Any) -> None:
        kernels = _modules.norm(module, self.family.norm_offset)
        resolution = self.resolve(path, module, "rmsnorm_tl", lambda: kernels.which(self.dtype))
        fused = self.fused.pop(path, None)
        if fused is not None:  # what runs for it is its layer's add_rmsnorm_tl
            self.plan.report.rows.append(fused)
        else:
            self.row(path, module, "rmsnorm_tl", resolution)
        kernels(self.dtype)
        self.plan.changes.append(_forward(module, _modules.norm_forward(module, kernels)))

    def layer(self, path: str, layer: Any) -> None:
        post = getattr(layer, "post_attention_layernorm", None)
        if post is None or not all(hasattr(layer, name) for name in ("input_layernorm", "self_attn", "mlp")):
            self.stock(path, layer, "not the norm, attention, add, norm, MLP, add layer lazyops fuses")
            return
        kernels = _modules.add_norm(post, self.family.norm_offset)
        resolution = self.resolve(path, layer, "add_rmsnorm_tl", lambda: kernels.which(self.dtype))
        norm_path = f"{path}.post_attention_layernorm" if path else "post_attention_layernorm"
        detail = "the layer's residual add fused into this norm"
        if resolution.declined:
            detail += "; " + "; ".join(f"{b} declines: {why}" for b, why in resolution.declined)
        self.fused[norm_path] = Row(
            norm_path, type(post).__name__, "add_rmsnorm_tl", resolution.backend, resolution.reason, detail
        )
        kernels(self.dtype)
        self.plan.changes.append(_forward(layer, _modules.pre_norm_layer_forward(layer, kernels)))

    def mlp(self, path: str, module: Any) -> None:
        activation = getattr(self.config, "hidden_activation", None) or getattr(self.config, "hidden_act", None)
        kernel, approximate = ACTIVATIONS.get(str(activation), (None, None))
        problem = _modules.mlp_unsupported(module)
        if kernel is None:
            self.stock(path, module, f"activation {activation!r} has no lazyops gated kernel (silu, gelu do)")
            return
        if kernel not in self.chosen:
            return
        if problem:
            self.stock(path, module, problem)
            return
        kernels = _modules.gated(module, kernel, approximate)
        resolution = self.resolve(path, module, kernel, lambda: kernels.which(self.dtype))
        self.row(path, module, kernel, resolution, "gate_proj and up_proj packed into one GEMM")
        kernels(self.dtype)
        forward = _modules.mlp_forward(module, kernels)
        undo_pack: list[Callable[[], None]] = []

        def apply() -> None:
            undo_pack.append(_modules.pack_gate_up(module))
            module.forward = forward

        def undo() -> None:
            module.__dict__.pop("forward", None)
            while undo_pack:
                undo_pack.pop()()

        self.plan.changes.append(Change(apply, undo))

    def attention(self, path: str, module: Any) -> None:
        if "rope_tl" in self.chosen:
            self.rope(path, module)
        if "paged_attention_tl" not in self.chosen:
            return
        if hasattr(module, "sinks"):
            self.stock(path, module, "attention sinks: paged_attention_tl has none")
            return
        args, options = _attention.configuration(module, self.dtype, _attention.BLOCK)
        resolution = self.resolve(
            path, module, "paged_attention_tl", lambda: lazyops.which("paged_attention_tl", *args, **options)
        )
        self.row(path, module, "paged_attention_tl", resolution, "attention implementation 'lazyops'")
        for block in (_attention.BLOCK, 1):  # regular caches, continuous batching: built before any compile traces
            _attention.kernel(module, self.dtype, block, options["sliding_window"], options["softcap"], None)
        stock_config = module.config
        own = copy.copy(stock_config)
        # the internal field: the property's setter would also rename the sub-configs the copy shares
        own._attn_implementation_internal = _attention.NAME

        def apply() -> None:
            _attention.register()
            module.config = own

        def undo() -> None:
            module.config = stock_config

        self.plan.changes.append(Change(apply, undo))

    def rope(self, path: str, module: Any) -> None:
        modeling = sys.modules.get(type(module).__module__)
        stock = getattr(modeling, "apply_rotary_pos_emb", None)
        if stock is None:
            self.stock(path, module, f"{type(module).__module__} has no apply_rotary_pos_emb to replace")
            return
        head_dim = int(module.head_dim)
        kernels = _modules.rope(head_dim)
        resolution = self.resolve(path, module, "rope_tl", lambda: kernels.which(self.dtype))
        self.row(path, module, "rope_tl", resolution, f"{modeling.__name__}.apply_rotary_pos_emb replaced")  # type: ignore[union-attr]
        kernels(self.dtype)
        name = modeling.__name__  # type: ignore[union-attr]

        def apply() -> None:
            entry = _ROPE.get(name)
            if entry is None:
                entry = _ROPE[name] = [modeling.apply_rotary_pos_emb, 0]  # type: ignore[union-attr]
                modeling.apply_rotary_pos_emb = _modules.rotary_function(entry[0])  # type: ignore[union-attr]
            modeling.apply_rotary_pos_emb.lazyops_kernels.setdefault(head_dim, kernels)  # type: ignore[union-attr]
            entry[1] += 1

        def undo() -> None:
            entry = _ROPE[name]
            entry[1] -= 1
            if entry[1] == 0:
                modeling.apply_rotary_pos_emb = entry[0]  # type: ignore[union-attr]
                del _ROPE[name]

        self.plan.changes.append(Change(apply, undo))

    def moe(self, path: str, block: Any) -> None:
        missing = _moe.missing()
        if missing:
            detail = f"{' and '.join(missing)} not in this lazyops: transformers' experts run"
            self.stock(path, block, detail)
            return
        for kernel, (args, options) in _moe.configurations(block, self.dtype).items():
            resolution = self.resolve(path, block, kernel, functools.partial(lazyops.which, kernel, *args, **options))
            self.row(path, block, kernel, resolution)
        self.plan.changes.append(_forward(block, _moe.forward(block, self.dtype)))

    def unknown_blocks(self, model: torch.nn.Module) -> None:
        """Each module a decoder layer holds (or a ``layers`` list holds in a layer's place) that is neither one of
        the family's nor stock by design: named, never skipped in silence."""
        for path, module in model.named_modules():
            if self.family.role(type(module).__name__) != "layer" and not path.endswith("layers"):
                continue
            for name, child in module.named_children():
                kind = type(child).__name__
                if self.family.role(kind) is None and not kind.endswith(STOCK_BY_DESIGN):
                    where = f"{path}.{name}" if path else name
                    self.stock(where, child, f"not a module of {self.family.name} that lazyops knows: left as it is")


def _forward(module: Any, forward: Callable[..., Any]) -> Change:
    """``module.forward`` replaced on the instance (the class, shared by other models, untouched)."""

    def apply() -> None:
        module.forward = forward

    def undo() -> None:
        module.__dict__.pop("forward", None)

    return Change(apply, undo)
