"""Triton's sample_tl on its two paths: a row split over programs (a batch below the GPU's SM count) and one program a
row. The split path adds top-p's masses chunk by chunk in the one-program kernel's order, so the two draw the same
tokens for the same inputs, top-p included (the module's comment on ``_fold``), and a row's token does not depend on
the batch around it; each token also lies in the float64 reference's kept set (the draws judge's margins).

``SPLIT_BELOW`` picks the path when a factory builds (0: one program a row; a large number: split); ``TILE`` at 128
splits these small vocabularies on a GPU too (the interpreter cuts a row into about ``INTERPRETER_CHUNKS`` blocks).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lazyops.specs.sample import kept_probabilities, log_probabilities
from lazyops.testing import Case, check_case
from lazyops.testing._draws import LOGPROB_TOLERANCE, MIN_P_MARGIN, TOP_P_MARGIN

#: Batches: one row, a few, and more than one row block of the interpreter's split launches (INTERPRETER_SMS rows).
BATCHES = (1, 7, 37)


@pytest.fixture
def paths(kernels: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``paths(path)``: the sample_tl factory whose kernels take the path named, "split" or "one" (Triton's)."""
    if kernels.backend != "triton":
        pytest.skip("Triton's two paths")
    from lazyops._backends.triton import sample as triton_sample

    monkeypatch.setattr(triton_sample, "TILE", 128)

    def factory(path: str) -> Any:
        # "grouped": every call on the split path, five rows at a time (SPLIT_GROUP), at batches the rule would
        # otherwise keep on one program a row
        monkeypatch.setattr(triton_sample, "SPLIT_BELOW", 10**9 if path == "split" else 0)
        monkeypatch.setattr(triton_sample, "SPLIT_GROUP", 5 if path == "grouped" else None)
        return kernels.factory("sample_tl")

    return factory


def _requests(batch: int, vocab: int, *, top_p: bool, seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple:
    """Rows of each kind (normal, integer ties, mostly masked, peaked) and every parameter in turn: greedy,
    temperatures, top-k off, 1, a few, the vocabulary and past it, min-p; top-p only when asked."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=generator) * 3
    kind = torch.arange(batch) % 4
    logits[kind == 1] = torch.randint(-3, 3, (int((kind == 1).sum()), vocab), generator=generator).float()
    masked = (kind == 2)[:, None] & (torch.rand(batch, vocab, generator=generator) < 0.8)
    logits = logits.masked_fill(masked, float("-inf"))
    logits[kind == 2, 0] = 0.0  # a masked row keeps a token
    logits[kind == 3, vocab - 1 - torch.arange(batch)[kind == 3] % 17] += 30  # in the last chunk
    index = torch.arange(batch)
    temperature = torch.tensor([0.0, 0.5, 1.0, 2.0, 0.8])[index % 5]
    top_k = torch.tensor([0, 1, 3, 50, vocab, vocab + 3, 7])[index % 7]
    top_p_values = torch.tensor([1.0, 0.9, 0.5, 0.05, 0.97]) if top_p else torch.ones(5)
    min_p = torch.tensor([0.0, 0.0, 0.1])[index % 3]
    seeds = torch.randint(0, 2**62, (batch,), generator=generator)
    offsets = torch.randint(0, 2**40, (batch,), generator=generator)
    return logits.to(dtype), temperature, top_k, top_p_values[index % 5], min_p, seeds, offsets


def _on(device: str, args: tuple) -> tuple:
    return tuple(arg.to(device) for arg in args)


def _kept(args: tuple) -> torch.Tensor:
    """The float64 reference's kept set, widened by the judge's margins (greedy rows: their argmax)."""
    logits, temperature, top_k, top_p, min_p = (arg.cpu() for arg in args[:5])
    probs = kept_probabilities(
        logits.double(), temperature, top_k, top_p, min_p, top_p_margin=TOP_P_MARGIN, min_p_margin=MIN_P_MARGIN
    )
    greedy = torch.zeros_like(probs).scatter_(1, logits.double().argmax(dim=1, keepdim=True), 1.0)
    return torch.where((temperature == 0)[:, None], greedy, probs) > 0


@pytest.mark.parametrize("top_p", [False, True], ids=["top-k-min-p-greedy", "with-top-p"])
@pytest.mark.parametrize("batch", BATCHES)
def test_the_paths_draw_the_same_tokens(kernels, paths, batch, top_p):
    """Identical tokens on both paths; every token in the reference's kept set; a poisoned ``out`` overwritten."""
    vocab = 300
    args = _on(kernels.device, _requests(batch, vocab, top_p=top_p, seed=batch))
    split, one = paths("split")(vocab, torch.float32), paths("one")(vocab, torch.float32)
    out = torch.full((batch,), -7, dtype=torch.int64, device=kernels.device)
    got = split(*args, out=out).cpu()
    want = one(*args).cpu()
    assert torch.equal(got, want)
    assert bool(_kept(args)[torch.arange(batch), got].all()), "a token outside the reference's kept set"


@pytest.mark.parametrize("batch", [1, 3])
def test_one_row_a_program_draws_the_same_tokens(kernels, paths, monkeypatch, batch):
    """The split path at one row a program, as a GPU runs it (the interpreter's launches take INTERPRETER_SMS rows;
    here one): its passes take each row's interval and parameters as scalars (``_row_value``), a branch no other
    test reaches in the interpreter. The one-program path's tokens, top-k, top-p and min-p among the rows."""
    if kernels.device != "cpu":
        pytest.skip("a GPU runs the split path at one row a program in every test")
    from lazyops._backends.triton import sample as triton_sample

    monkeypatch.setattr(triton_sample, "INTERPRETER_SMS", 1)
    vocab = 300
    args = _on(kernels.device, _requests(batch, vocab, top_p=True, seed=11 + batch))
    args[1][0], args[2][0], args[3][0], args[4][0] = 0.8, 7, 0.9, 0.1  # top-k, top-p, min-p: every pass reads it
    split, one = paths("split")(vocab, torch.float32), paths("one")(vocab, torch.float32)
    out = torch.full((batch,), -7, dtype=torch.int64, device=kernels.device)
    assert torch.equal(split(*args, out=out).cpu(), one(*args).cpu())


def test_a_batch_in_groups_draws_the_batch_tokens(kernels, paths):
    """A batch cut into groups of five rows (the last short) on the split path: the one-program path's tokens and
    log-probabilities (the sampled token's and the top 3), every row written (poisoned buffers overwritten), strided rows as given."""
    vocab, batch = 300, 13
    logits, *params = _requests(batch, vocab, top_p=True, seed=13)
    wide = torch.zeros(batch, vocab + 8)
    wide[:, 4 : 4 + vocab] = logits
    args = _on(kernels.device, (wide[:, 4 : 4 + vocab], *params))
    grouped = paths("grouped")(vocab, torch.float32, logprobs=True, top_n=3)
    one = paths("one")(vocab, torch.float32, logprobs=True, top_n=3)

    def buffers() -> dict[str, torch.Tensor]:
        return {
            "logprob": torch.full((batch,), float("nan"), device=kernels.device),
            "top_logprobs": torch.full((batch, 3), float("nan"), device=kernels.device),
            "top_ids": torch.full((batch, 3), -1, dtype=torch.int64, device=kernels.device),
        }

    got, want = buffers(), buffers()
    out = torch.full((batch,), -7, dtype=torch.int64, device=kernels.device)
    grouped(*args, **got, out=out)
    assert torch.equal(out.cpu(), one(*args, **want).cpu())
    assert torch.equal(got["top_ids"], want["top_ids"])
    for name in ("logprob", "top_logprobs"):
        assert torch.allclose(got[name], want[name], rtol=0, atol=1e-5), name


@pytest.mark.parametrize("vocab", [100, 300])
def test_a_group_of_no_rows_is_refused(kernels, monkeypatch, vocab):
    """``SPLIT_GROUP`` below one row: the factory says which setting, why, and the way out, at a vocabulary of one
    block too, where no split path is built (100 in the interpreter; both on a GPU, whose blocks hold 4096)."""
    if kernels.backend != "triton":
        pytest.skip("Triton's split path")
    from lazyops._backends.triton import sample as triton_sample

    monkeypatch.setattr(triton_sample, "SPLIT_GROUP", 0)
    with pytest.raises(ValueError, match=r"SPLIT_GROUP=0: .* at least one row; None keeps"):
        kernels.factory("sample_tl")(vocab, torch.float32)


def test_many_draws_of_a_few_rows(kernels, paths):
    """Each of 8 rows drawn 24 times (the offset counting up) on both paths: a kept set that differs anywhere (a
    chunk's count or mass lost, a chunk's race skipped) shows in some draw, as a token outside the reference's kept
    set or one the other path did not draw. Three whole chunks a row; the largest often in the last."""
    vocab, rows, draws = 384, 8, 24
    logits, *params = _requests(rows, vocab, top_p=True, seed=9)
    logits[::2, vocab - 5] = logits[::2].amax(dim=1) + 1.0
    args = [arg.repeat_interleave(draws, dim=0) for arg in (logits, *params)]
    args[-1] = args[-1] + torch.arange(rows * draws).remainder(draws)
    args = _on(kernels.device, tuple(args))
    got = paths("split")(vocab, torch.float32)(*args).cpu()
    assert bool(_kept(args)[torch.arange(rows * draws), got].all()), "a token outside the reference's kept set"
    assert torch.equal(got, paths("one")(vocab, torch.float32)(*args).cpu())


def test_a_strided_bfloat16_batch_and_its_halves(kernels, paths):
    """Rows of a wider buffer in bfloat16, two blocks to a few chunks a row; a row's token is the same in the batch
    and in every other row of it (the batch decides the path, never the token)."""
    vocab, batch = 1000, 12
    logits, *params = _requests(batch, vocab, top_p=True, seed=3, dtype=torch.bfloat16)
    wide = torch.zeros(batch, vocab + 24, dtype=torch.bfloat16)
    wide[:, 8 : 8 + vocab] = logits
    args = _on(kernels.device, (wide[:, 8 : 8 + vocab], *params))
    split, one = paths("split")(vocab, torch.bfloat16), paths("one")(vocab, torch.bfloat16)
    got = split(*args).cpu()
    assert torch.equal(got, one(*args).cpu())
    assert torch.equal(split(args[0][::2], *(p[::2].contiguous() for p in args[1:])).cpu(), got[::2])


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Log-probabilities within the draws judge's tolerance of ``want`` (``-inf`` exactly)."""
    got, want = got.cpu().double(), want.cpu().double()
    close = (got - want).abs() <= LOGPROB_TOLERANCE * (1 + want.abs())
    return bool(torch.where(torch.isfinite(want), close, got == want).all())


def test_log_probabilities_on_the_split_path(kernels, paths):
    """The sampled token's log-probability (its normaliser folded over chunks: a rounding from the one-program
    path's, within the judge's tolerance of float64); the buffer changes no token; a poisoned buffer overwritten."""
    vocab, batch = 300, 9
    args = _on(kernels.device, _requests(batch, vocab, top_p=True, seed=5))
    split = paths("split")(vocab, torch.float32, logprobs=True)
    logprob = torch.full((batch,), float("nan"), device=kernels.device)
    tokens = split(*args, logprob=logprob)
    assert torch.equal(split(*args), tokens)
    want, _, _ = log_probabilities(args[0].double().cpu(), tokens.cpu(), 1)
    assert _close(logprob, want)
    one = paths("one")(vocab, torch.float32, logprobs=True)
    one_logprob = torch.full((batch,), float("nan"), device=kernels.device)
    assert torch.equal(one(*args, logprob=one_logprob), tokens)
    assert torch.allclose(one_logprob, logprob, rtol=0, atol=1e-5)


def _top_rows(args: tuple, vocab: int) -> tuple:
    """``_requests``' rows, two of them with a top ``n`` spread over the chunks: in the second (integer ties) the
    largest logits tie across the three chunks and the next two tie below them; in the last, all but three tokens
    ``-inf`` (a top 4 takes a ``-inf``: the lowest id of the ties)."""
    logits = args[0].clone()
    batch = logits.shape[0]
    if batch > 1:
        logits[1, [vocab - 1, 128, 3]] = 5.0
        logits[1, [200, 127]] = 4.0
        logits[-1] = float("-inf")
        logits[-1, [vocab - 2, 130, 7]] = torch.tensor([1.0, 2.0, 1.0])
    return (logits, *args[1:])


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("batch", BATCHES)
def test_the_top_n_on_the_split_path(kernels, paths, batch, n):
    """The top ``n`` of a factory asking for them on the split path (each chunk's top ``n``, merged by the finish):
    the one-program path's ids and float64's (ties to the lower id), values within the judge's tolerance of float64
    and of the one-program path's (``-inf`` exactly); poisoned buffers overwritten; the same tokens with any subset
    of the buffers given, and the same top ``n`` with or without ``logprob``."""
    vocab = 300
    args = _on(kernels.device, _top_rows(_requests(batch, vocab, top_p=True, seed=batch + n), vocab))
    split = paths("split")(vocab, torch.float32, logprobs=True, top_n=n)
    one = paths("one")(vocab, torch.float32, logprobs=True, top_n=n)

    def call(kernel: Any, logprob: bool = True) -> tuple:
        written = {
            "top_logprobs": torch.full((batch, n), float("nan"), device=kernels.device),
            "top_ids": torch.full((batch, n), -1, dtype=torch.int64, device=kernels.device),
        }
        if logprob:
            written["logprob"] = torch.full((batch,), float("nan"), device=kernels.device)
        tokens = kernel(*args, **written)
        return tokens.cpu(), {name: tensor.cpu() for name, tensor in written.items()}

    tokens, got = call(split)
    one_tokens, want_one = call(one)
    assert torch.equal(tokens, one_tokens)
    want_logprob, want_top, want_ids = log_probabilities(args[0].double().cpu(), tokens, n)
    assert torch.equal(got["top_ids"], want_ids)
    assert torch.equal(got["top_ids"], want_one["top_ids"])
    assert _close(got["top_logprobs"], want_top)
    assert _close(got["top_logprobs"], want_one["top_logprobs"])
    assert _close(got["logprob"], want_logprob)
    assert torch.equal(split(*args).cpu(), tokens)
    alone_tokens, alone = call(split, logprob=False)
    assert torch.equal(alone_tokens, tokens)
    assert torch.equal(alone["top_ids"], got["top_ids"]) and torch.equal(alone["top_logprobs"], got["top_logprobs"])
    logprob = torch.full((batch,), float("nan"), device=kernels.device)
    assert torch.equal(split(*args, logprob=logprob).cpu(), tokens)
    assert torch.equal(logprob.cpu(), got["logprob"])


def test_the_top_n_when_a_chunk_has_fewer_tokens_than_n(kernels, paths):
    """V = 258: the last chunk holds 2 tokens, fewer than n = 4 (the scan pads its candidates with keys below every
    logit's), and they are the row's largest; the other rows' top n lie in the first chunks."""
    vocab, batch, n = 258, 5, 4
    logits, *params = _requests(batch, vocab, top_p=False, seed=4)
    logits[::2, vocab - 2 :] = logits[::2].amax(dim=1, keepdim=True) + 1.0
    args = _on(kernels.device, (logits, *params))
    top = {
        path: (
            torch.full((batch, n), float("nan"), device=kernels.device),
            torch.full((batch, n), -1, device=kernels.device),
        )
        for path in ("split", "one")
    }
    for path, (values, ids) in top.items():
        paths(path)(vocab, torch.float32, logprobs=True, top_n=n)(*args, top_logprobs=values, top_ids=ids)
    _, want_top, want_ids = log_probabilities(logits.double(), torch.zeros(batch, dtype=torch.int64), n)
    assert torch.equal(top["split"][1].cpu(), want_ids) and torch.equal(top["one"][1].cpu(), want_ids)
    assert _close(top["split"][0], want_top) and _close(top["split"][0], top["one"][0])


@pytest.mark.parametrize(("logits", "params"), [("normal", "mixed"), ("ties", "top-p-boundary")])
def test_the_draws_judge_passes_the_split_path(kernels, paths, logits, params):
    """The conformance kit's judgement (support, greedy, determinism, a row's distribution over 300 draws) with
    every call on the split path."""
    case = Case("sample_tl", (257, torch.float32), {}, (11,), seed=2, geometry={"logits": logits, "params": params})
    check_case(paths("split"), case, device=kernels.device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_paths_agree_at_an_engine_vocabulary_on_a_gpu(kernels, paths, monkeypatch, dtype):
    """On a GPU only (the interpreter would take minutes): Llama 3's vocabulary in the GPU's own tiles (4096, 32
    chunks a row), 48 rows of every kind: the same tokens on both paths, each in the reference's kept set."""
    if kernels.device == "cpu":
        pytest.skip("a GPU's tiles at V = 128256: the interpreter's cost is per operation")
    from lazyops._backends.triton import sample as triton_sample

    monkeypatch.setattr(triton_sample, "TILE", 4096)
    vocab, batch = 128256, 48
    args = _on(kernels.device, _requests(batch, vocab, top_p=True, seed=11, dtype=dtype))
    got = paths("split")(vocab, dtype)(*args).cpu()
    assert torch.equal(got, paths("one")(vocab, dtype)(*args).cpu())
    assert bool(_kept(args)[torch.arange(batch), got].all()), "a token outside the reference's kept set"
