"""Offsets past 2**31 elements (issue 27.2): row strides, token counts, products of the two, rope's position times
its width, a GEMM's weight.

On an H200 TileLang's ``rmsnorm_tl`` faulted (illegal memory access, the CUDA context lost) on rows 2**31 + 128
elements apart. Every kernel of every backend now computes such offsets in 64 bits, or refuses the call before
launching it where its launch grid cannot cover it.

Two halves:

- On any machine: a size-1 dimension's stride never reaches a launch in place of the row stride, the views whose
  unused strides pass 2**31 give the reference's answer in every backend that runs here, and the conformance kit's
  check (``lazyops.testing.check_large_offsets``) catches a kernel that narrows its row stride.
- ``-m gpu`` (skipped without CUDA): the calls themselves, on buffers of 4 to 64 GiB, for every kernel of the
  Triton and TileLang backends, judged against the spec's reference. Run on the H200 with
  ``pytest -m gpu tests/kernels/test_large_offsets.py -rA``; each test prints what it ran and the error it measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given

from lazyops import _api, testing
from lazyops._errors import KernelInputError
from lazyops.specs import kernel_names, spec
from lazyops.specs import rmsnorm as rmsnorm_spec
from lazyops.testing import Case, Inputs, check_close, check_each, check_large_offsets
from lazyops.testing._offsets import BEYOND_INT32
from lazyops.testing.cases import examples

GiB = 2**30

# --- on any machine --------------------------------------------------------------------------------------------


class _RecordingLaunch:
    """An rmsnorm launch that records the strides it is handed and computes the reference."""

    def __init__(self) -> None:
        self.strides: list[tuple[int, ...]] = []

    def __call__(self, config: Any) -> Any:
        def launch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
            self.strides += [x.stride(), out.stride()]
            result = rmsnorm_spec.rmsnorm_reference(x.double(), weight.double(), config.eps, config.weight_offset)
            out.copy_(result)

        return launch


def test_a_size_one_dimensions_stride_never_reaches_a_launch_as_the_row_stride() -> None:
    """The spec's wrapper hands a launch ``[rows, width]`` views: leading dimensions of size 1 are dropped with their
    strides, however large (the ``[1, 4, 128]`` view of the issue, its unused batch stride past 2**31), so the launch
    indexes rows by the stride between tokens."""
    record = _RecordingLaunch()
    factory = rmsnorm_spec.spec.implementation(record, strided_rows=True, writes_out=True, backend="offsetsrecord")
    kernel = factory(128, torch.float32)
    weight = torch.randn(128)
    rows = torch.randn(4, 128)
    for shape, strides in [((1, 4, 128), (2**31 + 512, 128, 1)), ((4, 1, 128), (128, 2**32 + 64, 1))]:
        x = rows.as_strided(shape, strides)
        out = torch.empty(4, 128).as_strided(shape, strides)
        record.strides.clear()
        kernel(x, weight, out=out)
        assert record.strides == [(128, 1), (128, 1)], f"{shape} {strides}: the launch was handed {record.strides}"
        expected = rmsnorm_spec.rmsnorm_reference(rows.double(), weight.double(), 1e-6)
        check_close(out.reshape(4, 128), expected, torch.float32, what=f"{shape} {strides}")


def test_views_whose_unused_strides_pass_2_31_give_the_reference(kernels, kernel) -> None:
    """``lazyops.testing.check_large_offsets`` without its 4 GiB layout: a single token whose row stride is 2**31 +
    256 elements, and ``[1, M, ...]`` views whose batch stride is, in every backend that runs here (the rows far
    apart are the ``-m gpu`` tests' below)."""
    if spec(kernel).judgement == "draws":
        pytest.skip("a sampler's judge takes its strided rows itself (lazyops.testing._draws)")
    factory = kernels.factory(kernel)

    @kernels.settings(host_examples=2, examples=4)
    @given(case=kernels.cases(kernel))
    def check(case: Case) -> None:
        assert list(check_large_offsets(factory, case, device=kernels.device, rows_apart=False)) == [
            "one row",
            "unused batch stride",
        ]

    check()


#: What the narrowing kernel below keeps of a row stride: the low 12 bits, as an int32 keeps the low 32.
NARROW_BITS = 12


def narrowing_rmsnorm(config: Any) -> Any:
    """An rmsnorm whose launch addresses row ``i`` at ``i * (stride mod 2**NARROW_BITS)``: the bug of issue 27.2
    (TileLang narrowed a stride to 32 bits) at a size a test can allocate."""

    def launch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
        narrowed = x.as_strided(x.shape, (x.stride(0) % 2**NARROW_BITS, 1))
        result = rmsnorm_spec.rmsnorm_reference(narrowed.double(), weight.double(), config.eps, config.weight_offset)
        out.copy_(result)

    return launch


def test_the_kits_offsets_check_catches_a_kernel_that_narrows_its_row_stride() -> None:
    """The kit's ``rows apart`` layout, at a pitch past 12 bits instead of 31 (so that it fits here): the narrowing
    kernel reads its second row from the wrong place and fails; the torch backend's kernel passes."""
    case = Case("rmsnorm_tl", (64, torch.float32), tokens=(2,), seed=3)
    pitch = 2**NARROW_BITS + 64
    narrowing = rmsnorm_spec.spec.implementation(
        narrowing_rmsnorm, strided_rows=True, writes_out=True, backend="offsetsnarrow"
    )
    with pytest.raises(AssertionError, match=r"rmsnorm_tl, rows apart \(stride 4160\): relative error"):
        check_large_offsets(narrowing, case, device="cpu", pitch=pitch, rows_apart=True)
    errors = check_large_offsets(_api.kernel_factory("torch", "rmsnorm_tl"), case, pitch=pitch, rows_apart=True)
    assert list(errors) == ["one row", "unused batch stride", "rows apart"]


def test_a_row_that_cancels_is_judged_by_the_cases_scale_not_its_own() -> None:
    """``matmul_tl(1, 129)``'s one output is a dot product of 129 random terms; at this seed it cancels to a small
    value, where float32's rounding of the terms is all a correct product's error. The torch backend's conformance
    run failed here (seed 23: 1.87e-5 against 1e-5): the layouts were floored by their own one output. They are
    judged by the case's output scales now, as ``check_case`` judges."""
    case = Case("matmul_tl", (1, 129, torch.float32), tokens=(1, 1), seed=1633872610)
    errors = check_large_offsets(_api.kernel_factory("torch", "matmul_tl"), case, device="cpu", rows_apart=False)
    assert list(errors) == ["one row", "unused batch stride"]


def test_a_kernel_failing_the_offsets_check_fails_the_conformance_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_conformance`` runs the check after a kernel's drawn cases, and a failure there fails the kernel, with
    the function that reruns it."""
    from lazyops.testing import _conformance

    def fails(factory: Any, case: Case, **options: Any) -> dict[str, float]:
        raise AssertionError(f"{case.kernel}, one row (stride {BEYOND_INT32}): relative error 1 > 1e-05 (float32)")

    monkeypatch.setattr(_conformance, "check_large_offsets", fails)
    with pytest.raises(AssertionError) as failure:
        testing.run_conformance("torch", kernels=["softmax_tl"], max_examples=1, seed=0, device="cpu")
    report = str(failure.value)
    assert "FAILED        softmax_tl: offsets past 2**31 elements: AssertionError: softmax_tl, one row" in report
    assert "rerun it: lazyops.testing.check_large_offsets(factory, Case(kernel='softmax_tl'" in report


# --- on a GPU ----------------------------------------------------------------------------------------------------
# Each test names its backend, kernel and layout in its id, prints what it measured (``-rA`` shows it) and says in
# its failure which call failed and how. A kernel that faults loses the process's CUDA context: the tests after it
# are then skipped, naming the one that faulted, rather than failing with its error.

GPU_BACKENDS = ("triton", "tilelang")
ROW_KERNELS = tuple(name for name in kernel_names() if name not in ("rope_tl", "matmul_tl"))
_context_lost: list[str] = []


def gpu_factory(backend: str, kernel: str) -> Any:
    """``backend``'s factory of ``kernel``, or a skip saying why it cannot run here."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if _context_lost:
        pytest.skip(f"the CUDA context was lost by an earlier test ({_context_lost[0]}); rerun this one alone")
    reason = _api.unavailable_reason(backend)
    if reason:
        pytest.skip(reason)
    if kernel not in _api.backend(backend).manifest():
        pytest.skip(f"backend {backend!r} has not ported {kernel}: resolution takes it from another")
    return _api.kernel_factory(backend, kernel)


def need_free(nbytes: float, what: str) -> None:
    free, _ = torch.cuda.mem_get_info()
    if free < nbytes:
        pytest.skip(f"{what} needs {nbytes / GiB:.0f} GiB free on the GPU; {free / GiB:.1f} GiB are")


@contextlib.contextmanager
def on_gpu(what: str) -> Iterator[None]:
    """Run a call and wait for it; a CUDA error (the kernel faulted) is re-raised naming ``what``, and remembered."""
    try:
        yield
        torch.cuda.synchronize()
    except RuntimeError as error:
        if "CUDA" in str(error) or "illegal" in str(error):
            _context_lost.append(f"{what}: {str(error).splitlines()[0]}")
        raise RuntimeError(f"{what}: {error}") from error


@pytest.fixture(autouse=True)
def _release_gpu_memory() -> Iterator[None]:
    yield
    if torch.cuda.is_available() and not _context_lost:
        torch.cuda.empty_cache()


def bf16_case(kernel: str, *args: Any, tokens: int = 2) -> Case:
    """``kernel`` at its spec's engine-sized configuration in bfloat16 (or at ``args``)."""
    example = examples(spec(kernel)).benchmark(torch.bfloat16)
    return Case(kernel, args or example.args, {} if args else example.kwargs, (tokens,), 0, example.geometry)


@pytest.mark.gpu
@pytest.mark.parametrize("pitch", (BEYOND_INT32, 2**32 + 256), ids=("2**31+256", "2**32+256"))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_every_kernel_takes_rows_2_31_elements_apart(backend: str, kernel: str, pitch: int) -> None:
    """(``kernel``: every kernel, tests/kernels/conftest.py.) The conformance kit's check at the engine-sized bfloat16 configuration: two tokens ``pitch`` elements apart
    (every token-indexed input and out= side by side in one 4 or 8 GiB buffer), one token whose row stride is
    ``pitch``, ``[1, M, ...]`` views whose batch stride is. 2**32 + 256 is the stride an int32 narrows to 256: a
    kernel narrowing it would not fault but read the wrong row."""
    factory = gpu_factory(backend, kernel)
    need_free(4 * pitch + 2 * GiB, f"rows {pitch} elements apart")
    case = bf16_case(kernel)
    with on_gpu(f"{backend} {kernel}, rows {pitch} elements apart"):
        try:
            errors = check_large_offsets(factory, case, device="cuda", pitch=pitch, rows_apart=True)
        except AssertionError as failure:
            raise AssertionError(f"backend {backend!r}: {failure}") from None
    print(f"{backend} {kernel} ({case}), stride {pitch}: " + "; ".join(f"{k} {e:.1e}" for k, e in errors.items()))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ("rmsnorm_tl", "rmsnorm_fp8_tl"))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_the_issues_calls(backend: str, name: str) -> None:
    """Issue 27.2's calls: ``rmsnorm_tl(128, torch.bfloat16)`` on ``as_strided(buf, (2, 128), (2**31 + 128, 1))``
    (out= laid out alike), on a ``[1, 3, 128]`` view whose batch stride is 2**31 + 128, and the same for
    ``rmsnorm_fp8_tl``."""
    factory = gpu_factory(backend, name)
    need_free(8 * GiB, "rows 2**31 + 128 elements apart")
    case = Case(name, (128, torch.bfloat16), tokens=(2,))
    with on_gpu(f"{backend} {name}, rows 2**31 + 128 elements apart"):
        try:
            errors = check_large_offsets(factory, case, device="cuda", pitch=2**31 + 128, rows_apart=True)
        except AssertionError as failure:
            raise AssertionError(f"backend {backend!r}: {failure}") from None
    print(
        f"{backend} {name}(128, bfloat16), stride 2**31 + 128: " + "; ".join(f"{k} {e:.1e}" for k, e in errors.items())
    )


#: More rows than 32 bits count, and not a whole number of any kernel's row blocks.
MANY_ROWS = 2**31 + 1000


def judge_rows(kernel: str, config: Any, args: list[Any], out: Any, before: dict[int, Any], sample: Any) -> float:
    """The rows ``sample`` of a call's results against the reference computed from those rows of its inputs
    (``before``: the token-indexed inputs' sampled rows as they were before the call)."""
    kernel_spec = spec(kernel)
    rows_in = [before.get(index, arg) for index, arg in enumerate(args)]
    floats = [arg.double() if arg.is_floating_point() else arg for arg in rows_in]
    expected = dict(zip(kernel_spec.results, kernel_spec.reference(config, *floats), strict=True))
    what = f"{kernel}, {args[0].shape[0]} rows, rows {int(sample[0])}..{int(sample[-1])} sampled"
    error = 0.0
    if "out" in expected:
        error = check_close(out[sample], expected["out"], kernel_spec.out_dtype(config), what=what)
    for name in kernel_spec.mutates:
        written = args[kernel_spec.inputs.index(name)][sample]
        check_each(written, expected[name], config.dtype, what=f"{what}: {name}")
    return error


@pytest.mark.gpu
@pytest.mark.parametrize("name", ROW_KERNELS)
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_row_kernels_take_more_than_2_31_rows(backend: str, name: str) -> None:
    """``2**31 + 1000`` rows of 2 features (8 to 16 GiB a tensor): the row index and its products in 64 bits. The
    rows around 2**31, and the first and last, against the reference. (A 32-bit row index wraps there and reads and
    writes 2**31 rows before the tensor; TileLang's gated kernels laid their row blocks along the grid's second
    dimension, 65535 blocks, and were not launched at all.)"""
    factory = gpu_factory(backend, name)
    kernel_spec = spec(name)
    config = kernel_spec.bind(2, torch.bfloat16)
    fixed = list(examples(kernel_spec).example_inputs(config, 1, Inputs(0, "cuda"), {}))
    rows = [kernel_spec.inputs.index(row_input) for row_input in kernel_spec.row_inputs]
    out_dtype = kernel_spec.out_dtype(config)
    out_bytes = MANY_ROWS * kernel_spec.out_shape(config, *fixed)[-1] * out_dtype.itemsize
    need_free(sum(MANY_ROWS * fixed[i].shape[1] * 2 for i in rows) + out_bytes + 2 * GiB, f"{MANY_ROWS} rows")
    generator = torch.Generator("cuda").manual_seed(0)
    args = list(fixed)
    for index in rows:
        shape = (MANY_ROWS, fixed[index].shape[1])
        args[index] = torch.randn(shape, generator=generator, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(kernel_spec.out_shape(config, *args), dtype=out_dtype, device="cuda").fill_(float("nan"))
    sample = torch.cat(
        [torch.arange(0, 64), torch.arange(2**31 - 2048, 2**31 + 1000), torch.arange(MANY_ROWS - 64, MANY_ROWS)]
    ).cuda()
    before = {index: args[index][sample].clone() for index in rows}
    with on_gpu(f"{backend} {name}, {MANY_ROWS} rows"):
        factory(2, torch.bfloat16)(*args, out=out)
    try:
        error = judge_rows(name, config, args, out, before, sample)
    except AssertionError as failure:
        raise AssertionError(f"backend {backend!r}: {failure}") from None
    print(f"{backend} {name}(2, bfloat16), {MANY_ROWS} rows: sampled rows' relative error {error:.1e}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ("silu_and_mul_tl", "gelu_and_mul_tl"))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gated_kernels_take_a_quarter_million_tokens(backend: str, name: str) -> None:
    """262144 + 8 tokens of 4096 features (4 GiB in): TileLang's gated kernels put 4 tokens a block along the grid's
    second dimension, whose 65535 blocks end at 262140 tokens; now every block lies along the first."""
    factory = gpu_factory(backend, name)
    need_free(8 * GiB, "262152 tokens of 4096 features")
    config = spec(name).bind(4096, torch.bfloat16)
    tokens = 2**18 + 8
    x = torch.randn(
        tokens, 2 * 4096, generator=torch.Generator("cuda").manual_seed(0), dtype=torch.bfloat16, device="cuda"
    )
    out = torch.full((tokens, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
    sample = torch.arange(tokens - 4096, tokens, device="cuda")
    before = {0: x[sample].clone()}
    with on_gpu(f"{backend} {name}, {tokens} tokens of 4096"):
        factory(4096, torch.bfloat16)(x, out=out)
    try:
        error = judge_rows(name, config, [x], out, before, sample)
    except AssertionError as failure:
        raise AssertionError(f"backend {backend!r}: {failure}") from None
    print(f"{backend} {name}(4096, bfloat16), {tokens} tokens: last 4096 rows' relative error {error:.1e}")


@pytest.mark.gpu
@pytest.mark.parametrize("positions_dtype", (torch.int64, torch.int32))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_rope_reads_a_cache_past_2_31_elements(backend: str, positions_dtype: torch.dtype) -> None:
    """A bfloat16 cache of 2**24 + 64 rows of 128 (2**31 + 8192 elements): positions near its end, times its width,
    pass 2**31 (the row strides past 2**31 are the kit's test above)."""
    factory = gpu_factory(backend, "rope_tl")
    need_free(12 * GiB, "a rope cache of 2**31 + 8192 elements")
    cache_rows = 2**24 + 64
    config = spec("rope_tl").bind(128, torch.bfloat16)
    generator = torch.Generator("cuda").manual_seed(0)
    cache = torch.randn(cache_rows, 128, generator=generator, dtype=torch.bfloat16, device="cuda")
    positions = torch.tensor([cache_rows - 1, cache_rows - 64, 2**24, 3], dtype=positions_dtype, device="cuda")
    tokens = positions.shape[0]
    query = torch.randn(tokens, 32 * 128, generator=generator, dtype=torch.bfloat16, device="cuda")
    key = torch.randn(tokens, 8 * 128, generator=generator, dtype=torch.bfloat16, device="cuda")
    # the reference on the four cache rows used, renumbered (a float64 copy of the whole cache would take 16 GiB)
    expected = spec("rope_tl").reference(
        config, torch.arange(tokens, device="cuda"), query.double(), key.double(), cache[positions.long()].double()
    )
    with on_gpu(f"{backend} rope_tl, cache of {cache_rows} rows"):
        factory(128, torch.bfloat16)(positions, query, key, cache)
    try:
        check_each(query, expected[0], torch.bfloat16, what=f"rope_tl, positions {positions.tolist()}: query")
        check_each(key, expected[1], torch.bfloat16, what=f"rope_tl, positions {positions.tolist()}: key")
    except AssertionError as failure:
        raise AssertionError(f"backend {backend!r}: {failure}") from None
    print(
        f"{backend} rope_tl(128, bfloat16), positions {positions.tolist()} of a {cache_rows}-row cache: as the reference"
    )


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_rope_refuses_more_tokens_than_one_launch_takes(backend: str) -> None:
    """2**31 tokens: a block (TileLang) or program (Triton) per token is one more than a grid's first dimension
    holds. Refused with the way out, before anything is written."""
    factory = gpu_factory(backend, "rope_tl")
    tokens = 2**31
    need_free(tokens * (4 + 2 * 2 * 2) + 2 * GiB, f"{tokens} tokens")
    positions = torch.zeros(tokens, dtype=torch.int32, device="cuda")
    query = torch.zeros(tokens, 2, dtype=torch.bfloat16, device="cuda")
    key = torch.zeros(tokens, 2, dtype=torch.bfloat16, device="cuda")
    cache = torch.ones(1, 2, dtype=torch.bfloat16, device="cuda")
    refused = pytest.raises(KernelInputError, match="query has 2147483648 rows, more than the 2147483647")
    with on_gpu(f"{backend} rope_tl, {tokens} tokens"), refused as refusal:
        factory(2, torch.bfloat16)(positions, query, key, cache)
    assert int(query.abs().max()) == 0 and int(key.abs().max()) == 0, "a refused call wrote query or key"
    print(f"{backend} rope_tl, {tokens} tokens: {refusal.value}")


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", (2, 300))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_matmul_reads_a_weight_of_more_than_2_31_elements(backend: str, tokens: int) -> None:
    """``[tokens, 65600] @ [65600, 32768]``: a weight of 2**31 + 2**21 elements (4 GiB), its k-steps past 2**31
    elements into it; the decode programs at 2 tokens, the tiled ones at 300."""
    n, k = 32768, 65600
    factory = gpu_factory(backend, "matmul_tl")
    need_free(20 * GiB, "a weight of 2**31 + 2**21 elements")
    generator = torch.Generator("cuda").manual_seed(0)
    b = torch.randn(k, n, generator=generator, dtype=torch.bfloat16, device="cuda")
    a = torch.randn(tokens, k, generator=generator, dtype=torch.bfloat16, device="cuda")
    expected = (a.float() @ b.float()).double()  # float32 on CUDA cores (torch does not use TF32 for it by default)
    with on_gpu(f"{backend} matmul_tl(n={n}, k={k}), {tokens} tokens"):
        out = factory(n, k, torch.bfloat16)(a, b)
    try:
        error = check_close(out, expected, torch.bfloat16, what=f"matmul_tl(n={n}, k={k}), {tokens} tokens")
    except AssertionError as failure:
        raise AssertionError(f"backend {backend!r}: {failure}") from None
    print(f"{backend} matmul_tl(n={n}, k={k}), {tokens} tokens: relative error {error:.1e}")


@pytest.mark.gpu
def test_tilelang_matmul_refuses_more_row_blocks_than_its_grid_holds() -> None:
    """TileLang's tiled GEMM lays its row blocks of 128 along the grid's second dimension: 65535 blocks, 8388480
    rows. One more is refused with the way out; Triton's GEMM (one grid dimension) computes it."""
    rows = 65535 * 128 + 1
    tilelang = gpu_factory("tilelang", "matmul_tl")
    generator = torch.Generator("cuda").manual_seed(0)
    a = torch.randn(rows, 16, generator=generator, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(16, 16, generator=generator, dtype=torch.bfloat16, device="cuda")
    refused = pytest.raises(KernelInputError, match=f"a has {rows} rows, more than the 8388480")
    with on_gpu(f"tilelang matmul_tl, {rows} rows"), refused as refusal:
        tilelang(16, 16, torch.bfloat16)(a, b)
    print(f"tilelang matmul_tl(16, 16), {rows} rows: {refusal.value}")
    triton = gpu_factory("triton", "matmul_tl")
    with on_gpu(f"triton matmul_tl, {rows} rows"):
        out = triton(16, 16, torch.bfloat16)(a, b)
    error = check_close(out[-4096:], (a[-4096:].double() @ b.double()), torch.bfloat16, what=f"triton, {rows} rows")
    print(f"triton matmul_tl(16, 16), {rows} rows: last 4096 rows' relative error {error:.1e}")


@pytest.mark.gpu
def test_triton_matmul_takes_rows_up_to_its_limit_and_refuses_more() -> None:
    """Triton's GEMM indexes rows in 32 bits (in 64 its 128 x 128 tile took 255 registers, not 183): ``[2**31 - 128,
    1] @ [1, 1]`` (4 GiB in, 4 out), the most it takes, is computed, its last tiles against the reference; one row
    more is refused with the way out."""
    from lazyops._backends.triton.matmul import MAX_ROWS

    factory = gpu_factory("triton", "matmul_tl")
    need_free(16 * GiB, f"a GEMM of {MAX_ROWS} rows")
    generator = torch.Generator("cuda").manual_seed(0)
    a = torch.randn(MAX_ROWS + 1, 1, generator=generator, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(1, 1, generator=generator, dtype=torch.bfloat16, device="cuda")
    matmul = factory(1, 1, torch.bfloat16)
    refused = pytest.raises(KernelInputError, match=f"a has {MAX_ROWS + 1} rows, more than the {MAX_ROWS}")
    with on_gpu(f"triton matmul_tl(1, 1), {MAX_ROWS + 1} rows"), refused as refusal:
        matmul(a, b)
    print(f"triton matmul_tl(1, 1), {MAX_ROWS + 1} rows: {refusal.value}")
    a = a[:MAX_ROWS]
    with on_gpu(f"triton matmul_tl(1, 1), {MAX_ROWS} rows"):
        out = matmul(a, b)
    sample = torch.arange(MAX_ROWS - 4096, MAX_ROWS, device="cuda")
    error = check_close(out[sample], a[sample].double() @ b.double(), torch.bfloat16, what=f"{MAX_ROWS} rows")
    print(f"triton matmul_tl(1, 1), {MAX_ROWS} rows: last 4096 rows' relative error {error:.1e}")
