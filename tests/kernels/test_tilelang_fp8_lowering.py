"""Issue 35's TileLang fp8 programs lower to CUDA for Hopper (sm_90a) on a machine without a GPU.

What CI can know of them: every variant a factory compiles builds for each scale kind, TileLang's passes accept it,
and the CUDA shows what the design relies on: one kernel for every token count; the hardware's saturating float8
conversion (``cvt.rn.satfinite``: ±448, NaN kept) stored as vectors, no clamp; a block-wide maximum that skips NaN for
the dynamic scales; the scale's strides as kernel parameters (row- and column-major take one program); an integer
``atomicMax`` for the per-tensor scale; the UE8M0 carry; and for the GEMM, TMA loads feeding fp8 ``wgmma`` with a
float32 accumulator promoted every 128 slice. Whether the kernels compute the right numbers is the GPU's to check
(``make gpu-tlfp8``): nothing here has run on one.
"""

from __future__ import annotations

import re

import pytest

tilelang = pytest.importorskip("tilelang")

import torch  # noqa: E402
from tvm.target import Target  # noqa: E402

from lazyops._backends.tilelang import (  # noqa: E402
    add_rmsnorm_fp8,
    matmul_fp8,
    quant_fp8,
    rmsnorm_fp8,
    silu_and_mul_fp8,
)

HOPPER = {"kind": "cuda", "arch": "sm_90a"}


def lower(program) -> str:
    target = Target(HOPPER)
    with target:
        source = tilelang.lower(program, target=target).kernel_source
    assert "__global__" in source
    return source


def signature(source: str) -> str:
    start = source.index("__global__")
    return source[start : source.index("{", start)]


def assert_dynamic_tokens(source: str) -> None:
    assert re.search(r"\bint(64_t)? M\b", signature(source)), "the token count must be a kernel parameter"


def assert_saturating_vector_stores(source: str) -> None:
    assert "fp8_e4_t* __restrict__ y" in signature(source)
    assert "__nv_cvt_float2_to_fp8x2" in source and "__NV_SATFINITE" in source
    assert re.search(r"\*\(fp8_e4_(4|8)_t\*\)\(y \+ ", source), "the float8 values must be stored as vectors"
    assert not re.search(r"\by\[[^\]]*\] = ", source), "no float8 value may be stored on its own"


QUANT_CONFIGS = [
    (4096, torch.bfloat16, "static", {}),
    (4096, torch.float16, "tensor", {}),
    (4096, torch.bfloat16, "token", {}),
    (1000, torch.float32, "token", {}),
    (40000, torch.bfloat16, "token", {}),
    (4096, torch.bfloat16, "group", {}),
    (7168, torch.bfloat16, "group", {"column_major": True, "ue8m0": True}),
    (512, torch.float32, "group", {"group_size": 16}),
]


@pytest.mark.parametrize(("n", "dtype", "scales", "options"), QUANT_CONFIGS)
@pytest.mark.parametrize("gated", [False, True])
def test_quant_programs_lower_with_saturating_vector_stores(n, dtype, scales, options, gated) -> None:
    module = silu_and_mul_fp8 if gated else quant_fp8
    config = module.spec.bind(n, dtype, scales, **options)
    variants = {name: lower(build()) for name, build in module.programs(config).items()}
    assert set(variants) == {"main"} | {"token": {"bounded"}, "tensor": {"reduce"}}.get(scales, set())
    for name, source in variants.items():
        assert_dynamic_tokens(source)
        if name == "reduce":  # the per-tensor scale's first launch: the block maxima into one int32 by atomicMax
            assert "AtomicMax((&(amax_bits[0]))" in source and "fp8_e4_t" not in source.split("{", 1)[1]
            continue
        assert_saturating_vector_stores(source)
        assert ("expf" in source) == gated
    main = variants["main"]
    dynamic = scales in ("token", "group")
    # the dynamic scales' block maximum, NaN skipped (a NaN compares unequal to itself) before the reduction
    # (a narrow group lies within one thread: no block reduction there)
    assert ("tl::AllReduce<tl::MaxOp" in main) == (dynamic and options.get("group_size", 128) >= 128)
    if dynamic:
        assert " != " in main and "fabsf(" in main, "the maximum must skip NaN"
        for stride in ("scale_row", "scale_group") if scales == "group" else ("scale_row",):
            assert f"int64_t {stride}" in signature(main), "the scale's layout must be a run-time stride"
    assert ("8388607" in main) == bool(options.get("ue8m0")), "UE8M0: the mantissa carried into the exponent"
    if scales == "token":
        assert "ub[0]" in variants["bounded"] and "ub[0]" not in main


@pytest.mark.parametrize(
    "make",
    [
        lambda: quant_fp8.quant_program(4096, "bfloat16", "group", 128, ue8m0=True),
        lambda: quant_fp8.quant_program(40000, "float16", "token", 128, bounded=True),
        lambda: quant_fp8.quant_program(14336, "bfloat16", "static", 128, gated=True),
    ],
)
def test_token_counts_and_row_strides_reach_the_quant_programs_in_64_bits(make) -> None:
    """As every row program (issue 27, tests/kernels/test_tilelang_lowering.py): ``M`` and the row strides are 64-bit
    parameters and no row index is computed from a 32-bit block index; the grid is one-dimensional (groups along it
    too), so no 65535-block limit."""
    source = lower(make())
    for name in ("M", "x_stride", "y_stride"):
        assert f"int64_t {name}" in signature(source)
    assert "(int)blockIdx" not in source and "blockIdx.y" not in source


def test_a_gated_program_reads_the_gate_and_the_up_projection_in_vectors() -> None:
    config = silu_and_mul_fp8.spec.bind(14336, torch.bfloat16, "group")
    source = lower(quant_fp8.quant_program(config.n, "bfloat16", "group", 128, gated=True))
    assert "x_stride" in signature(source)
    assert len(re.findall(r"\*\(uint4\*\)\(x \+ ", source)) >= 2, "gate and up: a 16-byte vector each"


@pytest.mark.parametrize("group_size", [1, 2])
def test_groups_narrower_than_a_vector_are_declined_and_resolve_elsewhere(group_size: int) -> None:
    config = quant_fp8.spec.bind(64, torch.float32, "group", group_size=group_size)
    assert "narrower than a 16-byte vector" in quant_fp8.quant_fp8_tl.lazyops_supports(config)
    assert (
        quant_fp8.quant_fp8_tl.lazyops_supports(quant_fp8.spec.bind(64, torch.bfloat16, "group", group_size=8)) is None
    )


@pytest.mark.parametrize("module", [rmsnorm_fp8, add_rmsnorm_fp8])
@pytest.mark.parametrize(
    ("n", "scales", "options"),
    [
        (4096, "token", {}),
        (7168, "group", {"column_major": True, "ue8m0": True}),
        (1000, "group", {"group_size": 8}),
        (14336, "token", {}),
    ],
)
def test_fp8_norms_dynamic_scales_of_resident_rows_are_one_pass(module, n, scales, options) -> None:
    """The norm's float32 values staged in shared memory, re-read as segments, their NaN-free maxima reduced, the
    scales written where the layout's strides say, the quotients stored with the saturating conversion: one
    program, no float32 buffer."""
    config = module.spec.bind(n, torch.bfloat16, 1e-6, scales=scales, **options)
    assert module.unsupported(config) is None
    (name,) = module.programs(config)
    source = lower(module.programs(config)[name]())
    assert_dynamic_tokens(source)
    assert_saturating_vector_stores(source)
    assert "__shared__" in source or "buf_dyn_shmem" in source, "the norm is staged in shared memory"
    assert source.count("tl::AllReduce<tl::SumOp") >= 1 and " != " in source and "fabsf(" in source
    assert "int64_t scale_row" in signature(source)
    if scales == "group" and n // options.get("group_size", 128) > 1:
        assert "int64_t scale_group" in signature(source)
    assert ("8388607" in source) == bool(options.get("ue8m0"))
    if module is add_rmsnorm_fp8:
        assert "residual" in signature(source)


@pytest.mark.parametrize("module", [rmsnorm_fp8, add_rmsnorm_fp8])
def test_fp8_norms_dynamic_scales_of_streamed_rows_are_the_float32_norm_then_the_quantizing_program(module) -> None:
    config = module.spec.bind(40960, torch.bfloat16, 1e-6, scales="group", column_major=True)
    variants = {name: lower(build()) for name, build in module.programs(config).items()}
    assert set(variants) == {"norm", "quant_main"}  # no scale_ub for the norms: no bounded variant compiled
    norm, quant = variants["norm"], variants["quant_main"]
    assert "float* __restrict__ y" in signature(norm) and "scale" not in signature(norm)
    assert "const float* __restrict__ x" in signature(quant)
    assert_saturating_vector_stores(quant)
    assert "tl::AllReduce<tl::MaxOp" in quant


def test_the_static_fp8_norms_keep_their_program() -> None:
    for module in (rmsnorm_fp8, add_rmsnorm_fp8):
        config = module.spec.bind(4096, torch.bfloat16, 1e-6)
        (name,) = module.programs(config)
        assert name == "main" and "const float* __restrict__ scale" in signature(lower(module.programs(config)[name]()))


GEMM_CONFIGS = [
    (4096, 4096, torch.bfloat16, "tensor"),
    (14336, 4096, torch.bfloat16, "rowwise"),
    (4096, 14336, torch.float16, "block"),
    (300, 129, torch.float32, "block"),
    (17, 100, torch.bfloat16, "rowwise"),
]


@pytest.mark.parametrize(("n", "k", "dtype", "scales"), GEMM_CONFIGS)
def test_matmul_fp8_feeds_fp8_wgmma_and_promotes_each_slice_to_float32(n, k, dtype, scales) -> None:
    config = matmul_fp8.spec.bind(n, k, dtype, scales)
    for name, build in matmul_fp8.programs(config).items():
        tile = matmul_fp8.TILES[name]
        source = lower(build())
        assert_dynamic_tokens(source)
        wgmma = re.findall(
            r"wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, tl::DataType::(\w+)", source
        )
        assert wgmma and set(wgmma) == {"kFloat32"}, "fp8 operands, float32 accumulation"
        if k % 16 == 0:
            assert "tma_load(a_desc" in source and "tma_load(b_desc" in source
        # the tile's consumer warpgroups (TMA adds producer threads to them)
        assert int(re.search(r"__launch_bounds__\((\d+)", source).group(1)) >= tile.threads
        # the slice's product lands in a fragment of its own, read and added to the accumulator after every slice
        promotion = source[source.index("wgmma_ss<") :]
        for fragment in ("part", "acc"):
            assert re.search(rf"\*\(float[24]\*\)\({fragment} \+ ", promotion), f"{fragment} read after the wgmma"
        if scales == "block":
            assert "int sa_row" in signature(source), "scale_a row- or column-major: its strides at run time"
            assert "row_scales" in promotion and "scale_b[" in promotion
        dtype_name = {torch.bfloat16: "bfloat16_t", torch.float16: "half_t", torch.float32: "float"}[dtype]
        assert f"{dtype_name}* __restrict__ c" in signature(source)
        assert "bias" in signature(source)


def test_matmul_fp8_tiles_come_from_the_shapes_and_fit_a_hopper_block() -> None:
    for tile in matmul_fp8.TILES.values():
        assert tile.block_n == tile.block_k == 128, "the weight block: one block scale a tile and a slice"
        assert tile.shared_bytes() <= 227 * 1024 - 8 * 1024
        assert tile.threads == 128 * (tile.block_m // 64), "a warpgroup per 64 rows"
    assert matmul_fp8.SMALL.block_m == matmul_fp8.SMALL_MAX_M


# --- the launches, with stand-in kernels on the CPU ----------------------------------------------------------------


class _Recorder:
    """Stands in for a compiled program: records each call's tensors under its variant's name."""

    def __init__(self, calls: list[tuple[str, tuple[torch.Tensor, ...]]], name: str) -> None:
        self.calls, self.name = calls, name

    def __call__(self, *args: torch.Tensor) -> None:
        self.calls.append((self.name, args))


def _launch(config, names):
    calls: list[tuple[str, tuple[torch.Tensor, ...]]] = []
    return quant_fp8.quant_launch(config, {name: _Recorder(calls, name) for name in names}), calls


def test_a_per_tensor_scale_reduces_into_a_zeroed_buffer_then_quantizes_with_it() -> None:
    launch, calls = _launch(quant_fp8.spec.bind(64, torch.bfloat16, "tensor"), ("main", "reduce"))
    x, scale, out = torch.zeros(3, 64, dtype=torch.bfloat16), torch.zeros(1), torch.empty(3, 64, dtype=torch.uint8)
    launch(x, scale, None, out)
    (first, reduce_args), (second, main_args) = calls
    assert (first, second) == ("reduce", "main")
    assert reduce_args[3] is main_args[3] and reduce_args[3].dtype == torch.int32, "one amax buffer for the pair"
    launch(x, scale, None, out)
    assert calls[2][1][3] is not reduce_args[3], "a fresh zeroed maximum every call"


def test_scale_ub_takes_the_bounded_program_and_an_empty_one_does_not() -> None:
    launch, calls = _launch(quant_fp8.spec.bind(64, torch.float32, "token"), ("main", "bounded"))
    x, scale, out = torch.zeros(3, 64), torch.zeros(3, 1), torch.empty(3, 64, dtype=torch.uint8)
    ub = torch.full((1,), 2.0)
    launch(x, scale, ub, out)
    launch(x, scale, torch.empty(0), out)
    launch(x, scale, None, out)
    assert [name for name, _ in calls] == ["bounded", "main", "main"]
    assert calls[0][1][2] is ub and calls[1][1][2].shape == (1,) and calls[1][1][2].dtype == torch.float32
    launch(x[:0], scale[:0], None, out[:0])
    assert len(calls) == 3, "no launch without tokens"


def test_column_major_scales_reach_the_program_as_the_callers_view() -> None:
    launch, calls = _launch(
        quant_fp8.spec.bind(64, torch.bfloat16, "group", group_size=16, column_major=True), ["main"]
    )
    x, out = torch.zeros(5, 64, dtype=torch.bfloat16), torch.empty(5, 64, dtype=torch.uint8)
    scale = torch.zeros(4, 5).t()  # written in place: its strides are the program's
    launch(x, scale, None, out)
    assert calls[0][1][1] is scale
