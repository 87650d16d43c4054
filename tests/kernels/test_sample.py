"""sample_tl beyond the drawn conformance cases: each logits kind with each parameter mix in every backend, rows
walked in several blocks, the backends' draws agreeing, and the draws judge refusing samplers that are wrong.

Every case is fixed (its seed too), so each test passes or fails on every run alike.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lazyops._backends.torch.sample import sample_tl as torch_sample
from lazyops._errors import KernelInputError
from lazyops.testing import Case, ConformanceError, check_case
from lazyops.testing._draws import LOGITS, PARAMS

#: Small vocabularies (the Triton interpreter runs each in a second or two): one block, and one past a power of 2.
VOCABS = (100, 257)


@pytest.mark.parametrize("logits", LOGITS)
def test_each_kind_of_logits_with_each_parameter_mix(kernels, logits):
    factory = kernels.factory("sample_tl")
    for index, params in enumerate(PARAMS):
        if kernels.backend != "torch" and kernels.on_host and (index + LOGITS.index(logits)) % 2:
            continue  # the Triton interpreter takes half the pairs, alternating (seconds a case)
        vocab = VOCABS[index % 2]
        dtype = (torch.float32, torch.bfloat16, torch.float16)[index % 3]
        case = Case("sample_tl", (vocab, dtype), {}, (9, 1), seed=index, geometry={"logits": logits, "params": params})
        check_case(factory, case, device=kernels.device)


def test_rows_wider_than_a_block(kernels):
    """Triton walks a row past 4096 entries in blocks (the greedy argmax and the race carried across them)."""
    factory = kernels.factory("sample_tl")
    case = Case("sample_tl", (4500, torch.float32), {}, (3,), seed=7, geometry={"logits": "peaked", "params": "mixed"})
    check_case(factory, case, device=kernels.device, max_elements=20_000)


def test_greedy_ties_go_to_the_lowest_id(kernels):
    kernel = kernels.factory("sample_tl")(8, torch.float32)
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0, 2.0, -1.0, 0.0, 2.0]] * 2, device=kernels.device)
    zeros, ones = torch.zeros(2, device=kernels.device), torch.ones(2, device=kernels.device)
    ints = torch.tensor([0, 5], dtype=torch.int64, device=kernels.device)
    # row 0 greedy; row 1 top-k of 1 at temperature 1: the four tied maxima are all kept (ties at the k-th value)
    temperature = torch.tensor([0.0, 1.0], device=kernels.device)
    top_k = torch.tensor([0, 1], dtype=torch.int64, device=kernels.device)
    tokens = kernel(logits, temperature, top_k, ones, zeros, ints, ints).cpu().tolist()
    assert tokens[0] == 1
    assert tokens[1] in (1, 3, 4, 7)


def test_the_backends_draw_the_same_tokens(kernels):
    """The hash is the same in every backend, so for the same float32 inputs the tokens agree (on this fixed draw;
    a near tie between two tokens' races could part them by a rounding)."""
    if kernels.backend == "torch":
        pytest.skip("the torch backend is the one compared with")
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(64, 300, generator=generator) * 2
    temperature = torch.full((64,), 0.8)
    top_k = torch.randint(0, 50, (64,), generator=generator)
    top_p = torch.full((64,), 0.9)
    min_p = torch.full((64,), 0.02)
    seeds = torch.randint(0, 2**62, (64,), generator=generator)
    offsets = torch.arange(64)
    args = (logits, temperature, top_k, top_p, min_p, seeds, offsets)
    want = torch_sample(300, torch.float32)(*args)
    got = kernels.factory("sample_tl")(300, torch.float32)(*(arg.to(kernels.device) for arg in args)).cpu()
    assert torch.equal(got, want)


def test_the_many_way_search_keeps_the_bisections_keys(kernels, monkeypatch):
    """Triton's 16-way search for the top-k and top-p thresholds ends on the keys its 2-way form (``SEARCH_BITS =
    1``, a bisection) ends on, so the two draw the same tokens: tied, masked and wide logits, top-k and top-p mixed,
    two blocks a row."""
    if kernels.backend != "triton":
        pytest.skip("Triton's search")
    from lazyops._backends.triton import sample as triton_sample

    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(48, 300, generator=generator) * 3
    logits[16:32] = torch.randint(-3, 3, (16, 300), generator=generator).float()
    logits[32:] = logits[32:].masked_fill(torch.rand(16, 300, generator=generator) < 0.8, float("-inf"))
    temperature = torch.tensor([0.5, 1.0, 2.0]).repeat(16)
    top_k = torch.tensor([0, 1, 3, 50, 299, 400]).repeat(8)
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.05]).repeat(12)
    min_p = torch.tensor([0.0, 0.0, 0.1]).repeat(16)
    seeds = torch.randint(0, 2**62, (48,), generator=generator)
    args = tuple(arg.to(kernels.device) for arg in (logits, temperature, top_k, top_p, min_p, seeds, torch.arange(48)))
    monkeypatch.setattr(triton_sample, "TILE", 256)  # two blocks a row on a GPU too
    monkeypatch.setattr(triton_sample, "SEARCH_BITS", 1)
    want = kernels.factory("sample_tl")(300, torch.float32)(*args).cpu()
    monkeypatch.undo()
    monkeypatch.setattr(triton_sample, "TILE", 256)
    got = kernels.factory("sample_tl")(300, torch.float32)(*args).cpu()
    assert torch.equal(got, want)


def test_two_vocabularies_of_a_block_size_share_a_binary(kernels, monkeypatch):
    """The one-program kernel takes the vocabulary at run time, unspecialized: V = 208 (a multiple of 16, which
    Triton would specialize) and V = 250, one block of 256 on a GPU (128 in the interpreter), launch it under one key
    of Triton's kernel cache, so a GPU compiles it once for both (the GPU conformance draws vocabularies of 2 to
    300). Both rows lie 256 apart: the row stride is specialized (a multiple of 16 or not), as in every row kernel.
    The keys are Triton's own, its binder's and ``compute_cache_key``'s for sm_90, computed on the host from the
    arguments each launch passed: the interpreter compiles nothing, so no cache of its own can show them."""
    if kernels.backend != "triton":
        pytest.skip("Triton's binaries")
    if str(kernels.device) != "cpu":  # the keys come from Triton's internals, whose signatures move between versions
        pytest.skip("a check of the interpreter's launches on the host; on a GPU, make gpu-check's time shows it")
    pytest.importorskip("triton.backends.nvidia")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature

    from lazyops._backends.triton import sample as triton_sample

    launches: list[tuple[tuple, dict, dict]] = []

    class Recorded(triton_sample.Launcher):
        def __call__(self, grid: tuple[int, ...], *args: Any) -> None:
            if self.kernel is triton_sample._sample_kernel:
                launches.append((args, self.constexprs, self.options))
            super().__call__(grid, *args)

    monkeypatch.setattr(triton_sample, "Launcher", Recorded)
    monkeypatch.setattr(triton_sample, "SPLIT_BELOW", 0)  # every call on the one-program kernel
    for vocab in (208, 250):
        logits, *params = _request((3,), vocab, kernels.device)
        wide = torch.zeros(3, 256, device=kernels.device)
        wide[:, :vocab] = logits
        kernels.factory("sample_tl")(vocab, torch.float32)(wide[:, :vocab], *params)
    assert len(launches) == 2

    kernel = triton_sample._sample_kernel
    jit = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn, **kernel.kwargs)
    binder = create_function_from_signature(jit.signature, jit.params, make_backend(GPUTarget("cuda", 90, 32)))

    def key(args: tuple, constexprs: dict, options: dict) -> str:
        _, specialization, rest = binder(*args, **constexprs, **options)
        return compute_cache_key({}, specialization, rest)

    (args, constexprs, options), second = launches
    assert key(args, constexprs, options) == key(*second)
    assert key(args, constexprs, options) != key(args, {**constexprs, "BLOCK_V": 512}, options), "a blind key"


def _wrong(change: str) -> Any:
    def factory(vocab: int, dtype: torch.dtype) -> Any:
        kernel = torch_sample(vocab, dtype)

        def call(logits, temperature, top_k, top_p, min_p, seeds, offsets, out=None):
            if change == "no top-p":
                top_p = torch.ones_like(top_p)
            elif change == "no min-p":
                min_p = torch.zeros_like(min_p)
            elif change == "temperature squared":
                temperature = temperature * temperature
            elif change == "one seed for the batch":
                offsets = torch.zeros_like(offsets)
                seeds = torch.zeros_like(seeds)
            return kernel(logits, temperature, top_k, top_p, min_p, seeds, offsets, out=out)

        return call

    return factory


@pytest.mark.parametrize(
    ("change", "params"),
    [
        ("no top-p", "mixed"),
        ("no min-p", "mixed"),
        ("temperature squared", "plain"),
        ("one seed for the batch", "plain"),
    ],
)
def test_the_judge_refuses_a_wrong_sampler(change, params):
    """Each defect is caught by one of the judgements (support, distribution), on fixed cases."""
    refused = 0
    for seed in range(6):
        case = Case(
            "sample_tl", (60, torch.float32), {}, (40,), seed=seed, geometry={"logits": "normal", "params": params}
        )
        try:
            check_case(_wrong(change), case, device="cpu")
        except ConformanceError:
            refused += 1
    assert refused >= 3, f"{change}: refused {refused} of 6"


# -- log-probabilities ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("logits", "n"), [("normal", 5), ("ties", 3), ("masked", 5), ("peaked", 0), ("flat", 1)])
def test_log_probabilities_of_each_kind_of_logits(kernels, logits, n):
    """The sampled token's and the top ``n`` log-probabilities, against float64's ``log_softmax`` (ties to the
    lower id; a masked token's ``-inf`` exactly)."""
    factory = kernels.factory("sample_tl")
    kwargs = {"logprobs": True, "top_n": n}
    case = Case(
        "sample_tl", (100, torch.bfloat16), kwargs, (4,), seed=n, geometry={"logits": logits, "params": "mixed"}
    )
    check_case(factory, case, device=kernels.device)


def test_log_probabilities_of_rows_wider_than_a_block(kernels):
    factory = kernels.factory("sample_tl")
    kwargs = {"logprobs": True, "top_n": 3}
    case = Case(
        "sample_tl", (4500, torch.float32), kwargs, (2,), seed=5, geometry={"logits": "peaked", "params": "plain"}
    )
    check_case(factory, case, device=kernels.device, max_elements=20_000)


def _request(batch: tuple[int, ...], vocab: int, device: str) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(11)
    logits = torch.randn(*batch, vocab, generator=generator) * 2
    temperature = torch.full(batch, 0.7)
    top_k = torch.zeros(batch, dtype=torch.int64)
    top_p = torch.full(batch, 0.9)
    min_p = torch.zeros(batch)
    seeds = torch.arange(len(torch.zeros(batch).reshape(-1))).reshape(batch) + 5
    return tuple(t.to(device) for t in (logits, temperature, top_k, top_p, min_p, seeds, seeds * 3))


def test_log_probabilities_under_leading_dimensions_and_each_buffer_alone(kernels):
    device, vocab, n = kernels.device, 300, 4
    args = _request((2, 3), vocab, device)
    kernel = kernels.factory("sample_tl")(vocab, torch.float32, logprobs=True, top_n=n)
    logprob = torch.full((2, 3), float("nan"), device=device)
    top = torch.full((2, 3, n), float("nan"), device=device)
    ids = torch.full((2, 3, n), -1, dtype=torch.int64, device=device)
    tokens = kernel(*args, logprob=logprob, top_logprobs=top, top_ids=ids)
    assert torch.equal(kernel(*args), tokens)  # the buffers change nothing drawn
    want = torch.log_softmax(args[0].double().cpu(), dim=-1)
    assert torch.allclose(logprob.cpu().double(), want.gather(-1, tokens.cpu()[..., None])[..., 0], atol=1e-5)
    want_top = want.topk(n, dim=-1)
    assert torch.equal(ids.cpu(), want_top.indices)
    assert torch.allclose(top.cpu().double(), want_top.values, atol=1e-5)
    alone = torch.full((2, 3), float("nan"), device=device)
    kernel(*args, logprob=alone)
    assert torch.equal(alone, logprob)
    top_alone, ids_alone = torch.zeros_like(top), torch.zeros_like(ids)
    kernel(*args, top_logprobs=top_alone, top_ids=ids_alone)
    assert torch.equal(top_alone, top) and torch.equal(ids_alone, ids)


def test_log_probability_buffers_the_factory_does_not_write_are_refused(kernels):
    device = kernels.device
    args = _request((3,), 50, device)
    plain = kernels.factory("sample_tl")(50, torch.float32)
    with pytest.raises(KernelInputError, match="logprobs=True"):
        plain(*args, logprob=torch.zeros(3, device=device))
    kernel = kernels.factory("sample_tl")(50, torch.float32, logprobs=True, top_n=2)
    with pytest.raises(KernelInputError, match="go together"):
        kernel(*args, top_logprobs=torch.zeros(3, 2, device=device))
    with pytest.raises(KernelInputError):
        kernel(*args, top_logprobs=torch.zeros(3, 3, device=device), top_ids=torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(KernelInputError):
        kernel(*args, logprob=torch.zeros(3, dtype=torch.float64, device=device))
    for bad in ({"top_n": 2}, {"logprobs": True, "top_n": 51}, {"logprobs": 1}):
        with pytest.raises(KernelInputError):
            kernels.factory("sample_tl")(50, torch.float32, **bad)
