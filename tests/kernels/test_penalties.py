"""apply_penalties_tl's logit bias and token mask beyond the drawn conformance cases: each variant in every backend
(rows wider than a Triton block too), vLLM's order (the bias before the penalties), xgrammar's bit order, and the
calls refused.

Every case is fixed (its seed too), so each test passes or fails on every run alike.
"""

from __future__ import annotations

import pytest
import torch

from lazyops._errors import KernelInputError
from lazyops.specs.apply_penalties import allowed_rows
from lazyops.testing import Case, check_case


@pytest.mark.parametrize(("bias", "mask"), [(0, 0.0), (3, 0.0), (0, 0.5), (4, 0.3), (1, 0.02)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_variant_matches_the_reference(kernels, bias, mask, dtype):
    factory = kernels.factory("apply_penalties_tl")
    case = Case("apply_penalties_tl", (300, dtype), {}, (5, 1), seed=bias, geometry={"bias": bias, "mask": mask})
    check_case(factory, case, device=kernels.device)


def test_rows_wider_than_a_block(kernels):
    """Triton's blocks of 4096: the bias entries and the bitmask's words found in the second block too."""
    factory = kernels.factory("apply_penalties_tl")
    case = Case("apply_penalties_tl", (4500, torch.float32), {}, (2,), seed=3, geometry={"bias": 6, "mask": 0.5})
    check_case(factory, case, device=kernels.device, max_elements=20_000)


def _call(kernels, logits, **keywords):
    device = kernels.device
    rows, vocab = logits.shape
    counts = torch.zeros(rows, vocab, dtype=torch.int32, device=device)
    counts[:, 0] = 1
    prompt = torch.zeros(rows, vocab, dtype=torch.bool, device=device)
    repetition = torch.full((rows, 1), 2.0, device=device)
    zeros = torch.zeros(rows, 1, device=device)
    kernel = kernels.factory("apply_penalties_tl")(vocab, logits.dtype)
    keywords = {name: value.to(device) for name, value in keywords.items()}
    kernel(logits, counts, prompt, repetition, zeros, zeros, **keywords)
    return logits.cpu()


def test_the_bias_comes_before_the_penalties_as_in_vllm(kernels):
    """vLLM's v1 Sampler adds the logit bias, then applies the penalties: token 0 (generated once) at logit 1 with
    a bias of 3 and repetition 2 is (1 + 3) / 2 = 2, not 1 / 2 + 3."""
    logits = torch.tensor([[1.0, 1.0, -1.0, 0.5]], device=kernels.device)
    ids = torch.tensor([[0, -1, 2]], dtype=torch.int32)  # -1: padding
    values = torch.tensor([[3.0, 100.0, 0.25]])
    got = _call(kernels, logits, bias_ids=ids, bias_values=values)
    assert got.tolist() == [[2.0, 1.0, -0.75, 0.5]]


def test_repeated_bias_ids_add_up(kernels):
    logits = torch.zeros(1, 5, device=kernels.device)
    got = _call(kernels, logits, bias_ids=torch.tensor([[3, 3, 4]], dtype=torch.int32), bias_values=torch.ones(1, 3))
    assert got[0, 1:].tolist() == [0.0, 0.0, 2.0, 1.0]


def test_the_bitmask_is_xgrammars(kernels):
    """Bit ``i % 32`` of word ``i // 32`` set: token ``i`` allowed (xgrammar's ``apply_token_bitmask_inplace``,
    vLLM's grammar bitmask); bit 31 is the int32's sign; a row of -1 words has no mask; bits past V are ignored."""
    vocab = 40
    logits = torch.ones(2, vocab, device=kernels.device)
    words = torch.tensor([[(1 << 3) | (1 << 31) - 2**32, 1 << 5], [-1, -1]], dtype=torch.int32)
    got = _call(kernels, logits, allowed=words)
    assert torch.isfinite(got[0]).nonzero().flatten().tolist() == [3, 31, 37]
    assert torch.isfinite(got[1]).all()
    assert allowed_rows(words, vocab)[0].nonzero().flatten().tolist() == [3, 31, 37]


def test_bias_ids_without_values_and_a_wrong_mask_are_refused(kernels):
    device = kernels.device
    logits = torch.zeros(2, 40, device=device)
    ids = torch.zeros(2, 3, dtype=torch.int32)
    with pytest.raises(KernelInputError, match="go together"):
        _call(kernels, logits, bias_ids=ids)
    with pytest.raises(KernelInputError):
        _call(kernels, logits, bias_ids=ids, bias_values=torch.zeros(2, 2))
    with pytest.raises(KernelInputError):
        _call(kernels, logits, allowed=torch.zeros(2, 1, dtype=torch.int32))  # 40 tokens take 2 words
    with pytest.raises(KernelInputError):
        _call(kernels, logits, allowed=torch.zeros(2, 2, dtype=torch.int64))
    assert torch.equal(logits.cpu(), torch.zeros(2, 40))
