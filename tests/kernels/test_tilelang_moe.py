"""TileLang's MoE router, token alignment and experts (issue 36) without a GPU: every program lowers to CUDA for Hopper
(sm_90a), and the same programs built for TileLang's C target (``_dialect.CPU``: thread-private tiles, serial loops)
run on the CPU against the torch backend, ids exactly, weights to float32 rounding.

The CPU runs check the programs' arithmetic, indexing and tie-breaking on the spec's drawn inputs (ties, NaN rows,
one expert taking every token, absent experts, block sizes from 1 to 130, expert maps, odd widths); not what only CUDA has (the layouts
TileLang infers, its barriers, its block-wide reductions), which the conformance kit checks on a GPU
(``make gpu-moe-check``). The C target has no 16-bit floats, so the CPU runs take float32: the router's logits are
halves, exact in every dtype, and its 16-bit programs differ only in the load's conversion; the experts' float32
programs run both ways the GPU does, ``T.gemm`` (the 16-bit programs' product) and multiply-adds (float32's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

tilelang = pytest.importorskip("tilelang")

import torch  # noqa: E402
from tvm.target import Target  # noqa: E402

from lazyops._backends.tilelang import fused_moe, moe_align, moe_route  # noqa: E402
from lazyops._backends.tilelang._dialect import CPU  # noqa: E402
from lazyops._backends.torch import fused_moe as torch_fused_moe  # noqa: E402
from lazyops._backends.torch import moe_align as torch_moe_align  # noqa: E402
from lazyops._backends.torch import moe_route as torch_moe_route  # noqa: E402
from lazyops._errors import KernelInputError  # noqa: E402
from lazyops.testing import Inputs  # noqa: E402
from lazyops.testing.cases import examples  # noqa: E402

HOPPER = {"kind": "cuda", "arch": "sm_90a"}
DEEPSEEK = {"scoring": "sigmoid", "n_group": 8, "topk_group": 4, "correction_bias": True, "routed_scaling_factor": 2.5}


def lower(program: Any) -> str:
    target = Target(HOPPER)
    with target:
        source = tilelang.lower(program, target=target).kernel_source
    assert "__global__" in source
    return source


def signature(source: str) -> str:
    start = source.index("__global__")
    return source[start : source.index("{", start)]


def assert_dynamic_tokens(source: str) -> None:
    assert "int64_t M" in signature(source), "the token count must be a 64-bit kernel parameter"


def quiet_compile(program: Any) -> Any:
    from lazyops._backends.tilelang._runtime import quiet_tilelang

    with quiet_tilelang():
        return tilelang.compile(program, target=CPU.target)


# --- moe_route ---------------------------------------------------------------------------------------------------

ROUTES = [
    ((8, 2, torch.bfloat16), {}),
    ((128, 8, torch.bfloat16), {}),
    ((60, 4, torch.float16), {"renormalize": False}),
    ((1, 1, torch.float32), {}),
    ((40, 40, torch.float32), {}),
    ((256, 8, torch.bfloat16), DEEPSEEK),
    ((16, 4, torch.float32), {**DEEPSEEK, "n_group": 16, "topk_group": 8}),
    ((1024, 16, torch.bfloat16), {"scoring": "sigmoid", "n_group": 16, "topk_group": 2}),
]


@pytest.mark.parametrize(("args", "kwargs"), ROUTES, ids=str)
def test_moe_route_lowers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """One kernel for every token count; block-wide maxima and minima (the tie rule: the lowest column holding the
    maximum); the bias read only where configured; sigmoid by ``expf``, softmax by ``exp2f``; no atomics."""
    config = moe_route.spec.bind(*args, **kwargs)
    (build,) = moe_route.programs(config).values()
    source = lower(build())
    assert_dynamic_tokens(source)
    assert ("bias" in signature(source)) == config.correction_bias
    assert "tl::AllReduce<tl::MaxOp" in source and "tl::AllReduce<tl::MinOp" in source
    assert ("exp2f" in source) == (config.scoring == "softmax")
    assert ("expf(" in source) == (config.scoring == "sigmoid")
    body = source[source.index("{", source.index("__global__")) :]
    assert re.search(r"topk_ids(\[| \+)", body) and re.search(r"topk_weights(\[| \+)", body), "both outputs written"
    assert "atomic" not in source.lower()


def test_moe_route_declines_more_experts_than_a_block_holds() -> None:
    assert moe_route.unsupported(moe_route.spec.bind(1024, 8)) is None
    config = moe_route.spec.bind(1025, 8)
    assert "1024 experts" in (moe_route.unsupported(config) or "")
    with pytest.raises(KernelInputError, match="does not serve it"):
        moe_route.programs(config)
    with pytest.raises(KernelInputError, match="does not serve this configuration"):
        moe_route.moe_route_tl(1025, 8)


#: CPU runs: Mixtral's, with NaN rows; no renormalisation; DeepSeek-V3's; groups of one expert with a bias (a
#: group's rank is its one key); groups without a bias; sigmoid without groups, k = E; a single expert.
CPU_ROUTES = [
    ((8, 2), {}, True),
    ((60, 4), {"renormalize": False}, True),
    ((256, 8), DEEPSEEK, True),
    ((16, 4), {**DEEPSEEK, "n_group": 16, "topk_group": 8}, False),
    ((24, 5), {"scoring": "sigmoid", "n_group": 4, "topk_group": 2, "renormalize": False}, True),
    ((3, 3), {"scoring": "sigmoid"}, False),
    ((1, 1), {}, False),
]


@pytest.mark.parametrize(("args", "kwargs", "nan"), CPU_ROUTES, ids=str)
def test_moe_route_program_on_the_cpu_equals_the_torch_backend(
    args: tuple[int, int], kwargs: dict[str, Any], nan: bool
) -> None:
    config = moe_route.spec.bind(*args, torch.float32, **kwargs)
    launch = moe_route.route_launch(config, quiet_compile(moe_route.moe_route_program(config, CPU)))
    reference = torch_moe_route.moe_route_tl(*args, torch.float32, **kwargs)
    for tokens, seed in ((1, 0), (17, 1), (300, 2)):
        logits, weights, ids, bias = examples(moe_route.spec).example_inputs(
            config, tokens, Inputs(seed, "cpu"), {"nan": nan}
        )
        expected_weights, expected_ids = reference(logits, weights.clone(), ids.clone(), correction_bias=bias)
        launch(logits, weights, ids, bias if config.correction_bias else None)
        assert torch.equal(ids, expected_ids), f"{config.label}, {tokens} tokens: ids differ"
        torch.testing.assert_close(weights, expected_weights, equal_nan=True, msg=f"{config.label}, {tokens} tokens")
        if nan:
            assert weights.isnan().any(dim=-1).sum() > 0, "the draw holds NaN rows"


# --- moe_align ---------------------------------------------------------------------------------------------------

ALIGNS = [(128, 8, 64), (1, 1, 1), (256, 8, 16), (1024, 8, 128), (60, 4, 130)]


@pytest.mark.parametrize("args", ALIGNS, ids=str)
@pytest.mark.parametrize("variant", moe_align.VARIANTS)
def test_moe_align_programs_lower(args: tuple[int, int, int], variant: str) -> None:
    """Each of the three launches: one kernel for every token count, no atomics (the order within an expert is the
    assignments' order, as the spec says), and each writes what it owns: the padding and the counts, the prefix (one
    block), the placed ids and the blocks' experts."""
    config = moe_align.spec.bind(*args)
    source = lower(moe_align.programs(config)[variant]())
    assert_dynamic_tokens(source)
    assert "atomic" not in source.lower()
    body = source[source.index("{", source.index("__global__")) :]
    owned = {
        "count": ("sorted_token_ids", "counts"),
        "prefix": ("counts", "bounds", "num_tokens_post_padded"),
        "place": ("sorted_token_ids", "expert_ids"),
    }[variant]
    stores = [line.split(" = ")[0] for line in body.splitlines() if " = " in line]
    for name in owned:
        assert any(re.search(rf"\b{name}\b", store) for store in stores), f"{variant} never writes {name}"
    assert ("blockIdx" in body) == (variant != "prefix")


def test_moe_align_declines_more_experts_than_a_block_counts() -> None:
    assert moe_align.unsupported(moe_align.spec.bind(1024, 8, 16)) is None
    config = moe_align.spec.bind(1025, 8, 16)
    assert "1024 experts" in (moe_align.unsupported(config) or "")
    with pytest.raises(KernelInputError, match="does not serve it"):
        moe_align.programs(config)


def cpu_aligner(config: Any) -> Callable[..., Any]:
    kernels = {variant: quiet_compile(moe_align.BUILDERS[variant](config, CPU)) for variant in moe_align.VARIANTS}
    return moe_align.align_launch(config, kernels)


#: Qwen3-30B-A3B's (128 experts, 8 a token, blocks of 64); a single expert in blocks of one row; odd sizes with
#: blocks wider than any expert's share.
CPU_ALIGNS = [(128, 8, 64), (1, 1, 1), (40, 3, 130)]


@pytest.mark.parametrize("args", CPU_ALIGNS, ids=str)
def test_moe_align_programs_on_the_cpu_equal_the_torch_backend(args: tuple[int, int, int]) -> None:
    """Every output element for element (each starts as -7, so an element no program writes shows), over token
    counts that fill one chunk partly and several, with every token sent to expert 0 first and with absent (-1)
    experts."""
    config = moe_align.spec.bind(*args)
    launch = cpu_aligner(config)
    reference = torch_moe_align.moe_align_tl(*args)
    draws = [(1, {}), (37, {"absent": True}), (129, {"one_expert": True}), (1000, {"one_expert": True, "absent": True})]
    for seed, (tokens, geometry) in enumerate(draws):
        inputs = examples(moe_align.spec).example_inputs(config, tokens, Inputs(seed, "cpu"), geometry)
        expected = reference(inputs[0], *(output.clone() for output in inputs[1:]))
        got = launch(*inputs)
        for name, out, want in zip(
            ("sorted_token_ids", "expert_ids", "num_tokens_post_padded"), got, expected, strict=True
        ):
            assert torch.equal(out, want), f"{config.label}, {tokens} tokens, {geometry}: {name} differs"


# --- fused_moe ---------------------------------------------------------------------------------------------------

EXPERTS = [
    ((2048, 768, 128, 8, torch.bfloat16), {}),
    ((4096, 14336, 8, 2, torch.float16), {"activation": "gelu"}),
    ((17, 15, 3, 2, torch.bfloat16), {}),
    ((64, 100, 8, 2, torch.float32), {"global_experts": 20}),
]


@pytest.mark.parametrize(("args", "kwargs"), EXPERTS, ids=str)
@pytest.mark.parametrize("variant", ["gate_up", "down"])
def test_fused_moe_gemms_lower(args: tuple[Any, ...], kwargs: dict[str, Any], variant: str) -> None:
    """Both grouped GEMMs: one kernel for every token count; in half precision ``wgmma``, the weight's tiles by TMA
    where its rows are whole 16-byte vectors (else element loads, no TMA); float32 on CUDA cores, no tensor-core
    instruction (TF32 would round the operands); the rows read through the sorted ids, no atomics."""
    config = fused_moe.spec.bind(*args, **kwargs)
    source = lower(fused_moe.programs(config)[variant]())
    assert_dynamic_tokens(source)
    weight, width = ("w13", config.hidden) if variant == "gate_up" else ("w2", config.intermediate)
    if config.dtype == torch.float32:
        assert "mma" not in source.replace("mbarrier", "")
    else:
        assert "wgmma" in source
        assert (f"tma_load({weight}_desc" in source) == fused_moe.aligned_rows(width, fused_moe.tl_dtype(config.dtype))
    assert "sorted_token_ids" in signature(source) and "expert_ids" in signature(source)
    assert "atomic" not in source.lower()


def test_fused_moe_compiles_the_alignment_with_its_row_blocks_and_declines_what_it_declines() -> None:
    config = fused_moe.spec.bind(2048, 768, 128, 8, torch.bfloat16)
    assert list(fused_moe.programs(config)) == [*moe_align.VARIANTS, "gate_up", "down"]
    assert fused_moe.align_config(config).block_size == fused_moe.BLOCK_M
    declined = fused_moe.spec.bind(16, 16, 1025, 2, torch.bfloat16)
    assert "1024 experts" in (fused_moe.unsupported(declined) or "")
    with pytest.raises(KernelInputError, match="does not serve this configuration"):
        fused_moe.fused_moe_tl(16, 16, 1025, 2, torch.bfloat16)


def cpu_experts(config: Any, tensor_cores: bool) -> Callable[..., Any]:
    alignment = fused_moe.align_config(config)
    kernels = {variant: quiet_compile(moe_align.BUILDERS[variant](alignment, CPU)) for variant in moe_align.VARIANTS}
    kernels["gate_up"] = quiet_compile(fused_moe.gate_up_program(config, CPU, tensor_cores))
    kernels["down"] = quiet_compile(fused_moe.down_program(config, CPU, tensor_cores))
    return fused_moe.fused_moe_launch(config, kernels)


#: CPU runs: weights of whole 16-byte rows (the TMA copies) with both products; odd widths (element loads) with
#: GELU; an expert map with absent experts; a rank holding fewer experts than a token's top_k.
CPU_EXPERTS = [
    ((64, 100, 8, 2), {}, True),
    ((64, 100, 8, 2), {}, False),
    ((17, 15, 3, 2), {"activation": "gelu"}, True),
    ((16, 32, 4, 3), {"global_experts": 9}, True),
    ((16, 32, 1, 2), {"global_experts": 23}, True),
]


@pytest.mark.parametrize(("args", "kwargs", "tensor_cores"), CPU_EXPERTS, ids=str)
def test_fused_moe_programs_on_the_cpu_equal_the_torch_backend(
    args: tuple[int, ...], kwargs: dict[str, Any], tensor_cores: bool
) -> None:
    """float32 to its rounding, over token counts of one block and of many, with every token sent to expert 0 first
    (one expert's many blocks) and without."""
    config = fused_moe.spec.bind(*args, torch.float32, **kwargs)
    launch = cpu_experts(config, tensor_cores)
    reference = torch_fused_moe.fused_moe_tl(*args, torch.float32, **kwargs)
    for seed, (tokens, geometry) in enumerate([(1, {}), (37, {"one_expert": True}), (200, {})]):
        x, w13, w2, weights, ids, expert_map = examples(fused_moe.spec).example_inputs(
            config, tokens, Inputs(seed, "cpu"), geometry
        )
        expert_map = expert_map if config.global_experts else None
        expected = reference(x, w13, w2, weights, ids, expert_map=expert_map)
        got = launch(x, w13, w2, weights, ids, expert_map)
        # float32 sums in another order: to its rounding at the scale of the outputs (hundreds here)
        scale = float(expected.abs().max())
        message = f"{config.label}, {tokens} tokens, {geometry}"
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * scale, msg=message)


# --- the engine's call ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["moe_route_tl", "moe_align_tl", "fused_moe_tl"])
def test_the_engine_call_passes_through_the_frames_test_call_depth_allows(name: str) -> None:
    """tests/kernels/test_call_depth.py counts TileLang's frames on a GPU only; here the same count, the engine's
    kernel (``spec.implementation``'s routes) around the launch of the programs built for the C target (what a GPU
    launches instead is the compiled executable, no lazyops frame)."""
    from test_call_depth import PLAIN_FRAMES, UNTRIMMED_FRAMES, lazyops_frames

    from lazyops.specs import spec
    from lazyops.specs._engine import kernel_of

    kernel_spec = spec(name)
    config = kernel_spec.bind(*examples(kernel_spec).benchmark(torch.float32).args)
    if name == "moe_route_tl":
        launch = moe_route.route_launch(config, quiet_compile(moe_route.moe_route_program(config, CPU)))
    elif name == "moe_align_tl":
        launch = cpu_aligner(config)
    else:  # Qwen3-30B-A3B's experts cut to 256 wide, as test_call_depth cuts them
        config = kernel_spec.bind(256, 256, 128, 8, torch.float32)
        launch = cpu_experts(config, tensor_cores=False)
    kernel = kernel_of(kernel_spec, config, launch, "tilelang", None, strided_rows=False, writes_out=False)
    inputs = examples(kernel_spec).example_inputs(config, 1, Inputs(0, "cpu"), {})
    with torch.inference_mode():
        kernel(*inputs)
        frames = lazyops_frames(lambda: kernel(*inputs))
    assert len(frames) <= UNTRIMMED_FRAMES.get((name, "tilelang"), PLAIN_FRAMES), frames
