"""lazyops.transformers.patch on a tiny random model of every family it knows (2 layers, hidden 64, built here, no
download): logits against the stock model's within the kit's tolerance in float32 and bf16, greedy tokens equal in
float32, unpatch giving the stock outputs back exactly, and the report naming every patched module."""

from __future__ import annotations

import json

import pytest
import torch

from lazyops.testing import TOLERANCE, relative_error

transformers = pytest.importorskip("transformers")
patching = pytest.importorskip("lazyops.transformers")

SMALL = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
HEADS = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256}
#: ``config.model_type`` → (config class, model class, options): each family's own traits switched on.
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"rms_norm_eps": 1e-5}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 5}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {
            "sliding_window": 5,
            "attn_logit_softcapping": 20.0,
            "final_logit_softcapping": 30.0,
            "query_pre_attn_scalar": 16,
        },
    ),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"sliding_window": 5, "query_pre_attn_scalar": 16}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1},
    ),
}
PROMPTS = torch.tensor([[1, 7, 42, 9, 3, 11, 5, 2, 8, 64, 100], [17, 33, 90, 4, 19, 20, 21, 22, 23, 5, 6]])


def tiny(family: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    config_class, model_class, options = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SMALL, **HEADS, **options)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():  # Gemma's norms start at zero weight (1 + w): give them, and every norm, some spread
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.normal_(0.0, 0.3)
    return model.to(dtype)


def logits(model: torch.nn.Module, ids: torch.Tensor = PROMPTS, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, **kwargs).logits


def greedy(model: torch.nn.Module, ids: torch.Tensor = PROMPTS, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_tokens_and_unpatch_in_float32(family):
    model = tiny(family)
    stock_logits, stock_tokens = logits(model), greedy(model)
    report = patching.patch(model)
    try:
        assert relative_error(logits(model), stock_logits) <= TOLERANCE[torch.float32]
        assert torch.equal(greedy(model), stock_tokens)
    finally:
        patching.unpatch(model)
    assert torch.equal(logits(model), stock_logits)  # exactly: every module's own forward again
    assert torch.equal(greedy(model), stock_tokens)
    kernels = report.kernels()
    layers = [path for path in kernels if path.endswith("self_attn")]
    assert len(layers) == 2 and all(kernels[path] == "rope_tl+paged_attention_tl" for path in layers)
    assert all(row.backend == "torch" and row.reason == "selected" for row in report.patched)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_in_bfloat16(family):
    model = tiny(family, torch.bfloat16)
    stock = logits(model)
    reference = logits(tiny(family)).float()  # float32 weights: what both are judged by
    patching.patch(model)
    ours = logits(model)
    # the kit's tolerance, or the stock model's own bf16 error where that is larger: a model chains many roundings
    assert relative_error(ours.float(), reference) <= max(
        TOLERANCE[torch.bfloat16], 1.5 * relative_error(stock.float(), reference)
    )


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_padded_batches_give_the_stock_tokens(family):
    """Left padding, as generate pads prompts of different lengths: each row's padded keys and queries skipped."""
    model = tiny(family)
    ids = PROMPTS.clone()
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    ids[0, :4] = 0
    stock = greedy(model, ids, attention_mask=mask)
    patching.patch(model)
    assert torch.equal(greedy(model, ids, attention_mask=mask), stock)


def test_the_report_names_every_patched_module_and_prints_as_a_table_and_json():
    model = tiny("llama")
    report = patching.patch(model)
    norms = [path for path, module in model.named_modules() if type(module).__name__ == "LlamaRMSNorm"]
    assert set(norms) <= {row.path for row in report.patched}
    assert report.kernels()["model.layers.1.post_attention_layernorm"] == "add_rmsnorm_tl"
    assert report.kernels()["model.layers.0.mlp"] == "silu_and_mul_tl"
    text = str(report)
    assert "model.layers.1.self_attn" in text and "paged_attention_tl" in text and "selected" in text
    payload = json.loads(report.to_json())
    assert payload["family"] == "llama" and len(payload["rows"]) == len(report.rows)
    assert patching.report(model) is report


def test_an_unknown_block_and_an_unknown_family_are_named_not_skipped():
    class Mystery(torch.nn.Module):
        def forward(self, x):
            return x

    model = tiny("llama")
    model.model.layers[1].mlp = Mystery()
    report = patching.patch(model)
    (row,) = [row for row in report.stock if row.path == "model.layers.1.mlp"]
    assert row.module == "Mystery" and "not a module of llama" in row.detail
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    other = patching.patch(transformers.GPT2LMHeadModel(config))
    assert not other.patched and "'gpt2' is not one lazyops.transformers knows" in other.stock[0].detail


@pytest.mark.parametrize(
    ("family", "block"), [("mixtral", "MixtralSparseMoeBlock"), ("qwen3_moe", "Qwen3MoeSparseMoeBlock")]
)
def test_the_moe_block_runs_on_the_moe_kernels_and_the_report_names_it(family, block):
    import lazyops

    report = patching.patch(tiny(family))
    moe = [row for row in report.rows if row.module == block]
    assert len(moe) == 4  # 2 layers, each the router and the experts
    assert {row.kernel for row in moe} == {"moe_route_tl", "fused_moe_tl"} <= set(lazyops.kernels())
    assert all(row.patched for row in moe)


def test_kernels_limits_what_is_patched_and_a_misspelt_one_is_refused():
    model = tiny("llama")
    report = patching.patch(model, kernels=["rmsnorm_tl"], attention=False)
    assert {row.kernel for row in report.patched} == {"rmsnorm_tl"}
    assert model.model.layers[0].self_attn.config._attn_implementation != "lazyops"
    patching.unpatch(model)
    with pytest.raises(ValueError, match="did you mean 'rope_tl'"):
        patching.patch(model, kernels=["rope"])
    with pytest.raises(ValueError, match="not patched"):
        patching.unpatch(model)


def test_strict_mode_refuses_what_the_backend_lacks_and_changes_nothing(monkeypatch):
    """A backend that lacks a kernel the model needs: strict, the patch names the module and the kernel; the model
    is untouched. (The built-ins export every kernel, so the chain is made to lack rope_tl.)"""
    import lazyops

    model = tiny("llama")
    stock = logits(model)
    real_which = lazyops.which

    def lacking_rope(name, *args, **kwargs):
        if name == "rope_tl":
            raise lazyops.KernelUnavailableError("rope_tl", "mybackend", ("torch",), "mybackend lacks rope_tl")
        return real_which(name, *args, **kwargs)

    monkeypatch.setattr(lazyops, "which", lacking_rope)
    with pytest.raises(
        lazyops.KernelUnavailableError, match=r"model.layers.0.self_attn \(LlamaAttention\) needs rope_tl"
    ):
        patching.patch(model)
    assert patching.report(model) is None and torch.equal(logits(model), stock)


def test_a_half_ported_backend_reports_the_rest_inherited(monkeypatch):
    import lazyops

    real_which = lazyops.which

    def half(name, *args, **kwargs):
        found = real_which(name, *args, **kwargs)
        if name == "rope_tl":
            found.reason = "inherited"
        return found

    monkeypatch.setattr(lazyops, "which", half)
    report = patching.patch(tiny("llama"))
    assert {row.reason for row in report.patched if row.kernel == "rope_tl"} == {"inherited"}


def test_import_transformers_inside_the_package_is_the_real_one():
    import lazyops.transformers._attention as attention

    assert attention.__name__ == "lazyops.transformers._attention"
    assert transformers.__name__ == "transformers" and hasattr(transformers, "AttentionInterface")


def test_compiled_patched_model_is_one_graph():
    model = tiny("llama")
    stock = logits(model, use_cache=False)
    patching.patch(model)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    assert relative_error(logits(compiled, use_cache=False), stock) <= TOLERANCE[torch.float32]


def test_generate_batch_matches_transformers_paged_eager():
    """Continuous batching with lazyops' attention (and kernels) against transformers' own paged eager attention."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from transformers import GenerationConfig

    model = tiny("llama")
    prompts = [[1, 7, 42, 9, 3], [5, 11], [2, 8, 64, 100, 17, 33, 90, 4, 19, 20, 21, 22, 23]]
    config = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)
    # a small cache (its default is sized from the free memory), one request's prompt never split over batches
    batching = ContinuousBatchingConfig(num_blocks=8, max_batch_tokens=64)

    def tokens(model: torch.nn.Module) -> list[list[int]]:
        with torch.no_grad():
            outputs = model.generate_batch(
                inputs=prompts, generation_config=config, continuous_batching_config=batching, progress_bar=False
            )
        return [outputs[key].generated_tokens for key in sorted(outputs, key=lambda k: int(str(k).split("_")[-1]))]

    model.set_attn_implementation("paged|eager" if _paged_prefix() else "eager")
    stock = tokens(model)
    patching.patch(model)
    assert tokens(model) == stock


def _paged_prefix() -> bool:
    """transformers before 5.23 takes ``paged|`` names on load; later ones keep only ``paged|eager``."""
    return "paged|sdpa" in transformers.AttentionInterface._global_mapping


def test_the_paged_variant_is_registered_where_transformers_asks_for_it():
    patching.register_attention()
    assert {"lazyops", "paged|lazyops"} <= set(transformers.AttentionInterface._global_mapping)
