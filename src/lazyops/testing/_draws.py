"""The judge of randomised kernels (``sample_tl``): support, greedy, determinism and distribution of many draws.

A sampler has no float64 output to compare with; its spec's reference gives instead the distribution each row
draws from (float64), and a kernel is judged on what it draws:

- *support*: no drawn token outside the tokens the reference keeps, widened by a margin at the top-p and min-p
  boundaries (:data:`TOP_P_MARGIN`, :data:`MIN_P_MARGIN`: a float32 kernel's running sums over a row differ from
  float64's by about that much);
- *greedy*: a row of temperature 0 gives exactly the reference's argmax (ties to the lowest id);
- *determinism*: the same call again gives the same tokens, and a row gives the same token in a batch of other
  rows (every other row of the batch, a strided view);
- *log-probabilities* (a factory made with ``logprobs=True``): the sampled token's and the top ``n`` against the
  float64 ``log_softmax`` of the logits (:data:`LOGPROB_TOLERANCE`; ``-inf`` exactly), the top ids exactly (ties to
  the lower id);
- *distribution*: for a few rows, :func:`draw_count` draws (the row repeated, the offset counting up) against the
  reference's probabilities by a chi-square test at level :data:`ALPHA` (bins expecting fewer than 5 draws merged),
  passed against the strict, the widened or the narrowed reference. Every draw comes from the case's seed, so a
  case passes or fails on every run alike; the rate at which a correct sampler fails a drawn case (the
  false-failure rate) is measured by ``tests/testing/sampling_sweep.py`` and stated in
  ``docs/decisions/012-sampling-thresholds.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from lazyops.testing._case import Case
from lazyops.testing._compare import (
    ConformanceError,
    Inputs,
    __tracebackhide__,  # noqa: F401 - the kit's verdicts end at the test
    default_max_elements,
    rows,
)

#: The chi-square test's level: the chance that one row's test refuses a correct sampler.
ALPHA = 1e-4
#: The normal quantile of 1 - ALPHA, for the Wilson-Hilferty approximation of the chi-square quantile.
Z_ALPHA = 3.719
TOP_P_MARGIN = 1e-4
MIN_P_MARGIN = 1e-4
#: How far a float32 log-probability may be from float64's: a log-sum-exp over a row, relative to ``1 + |value|``.
LOGPROB_TOLERANCE = 2e-5
#: How many rows of a case are judged by their distribution.
DISTRIBUTION_ROWS = 1

LOGITS = ("normal", "flat", "peaked", "masked", "all-but-one", "ties")
PARAMS = ("mixed", "greedy", "plain", "top-k-1", "top-p-boundary")


def draw_count(vocab: int, device: str) -> int:
    """Draws per judged row: 300 on the host (the Triton interpreter's budget), 20,000 on a GPU, fewer where a
    row is wide (the repeated rows stay within a few times the kit's element cap)."""
    budget = 4 * default_max_elements(device)
    return max(100, min(300 if str(device).startswith("cpu") else 20_000, budget // vocab))


def chi_square_limit(dof: int, z: float | None = None) -> float:
    """The chi-square quantile of ``dof`` degrees of freedom at the level whose normal quantile is ``z`` (default
    :data:`Z_ALPHA`), by the Wilson-Hilferty approximation."""
    z = Z_ALPHA if z is None else z
    c = 2.0 / (9.0 * dof)
    return dof * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """The statistic and its limit for ``counts`` drawn from ``probs`` (bins expecting fewer than 5 merged)."""
    n = float(counts.sum())
    expected = probs.double() * n
    small = expected < 5
    observed = [counts[~small].double()]
    wanted = [expected[~small]]
    if small.any():
        observed.append(counts[small].double().sum().reshape(1))
        wanted.append(expected[small].sum().reshape(1))
    o, e = torch.cat(observed), torch.cat(wanted)
    keep = e > 0
    if int(keep.sum()) < 2:
        return 0.0, math.inf
    stat = float((((o - e) ** 2)[keep] / e[keep]).sum())
    return stat, chi_square_limit(int(keep.sum()) - 1)


# -- the inputs ----------------------------------------------------------------------------------------------------
def _logits(draw: Inputs, tokens: int, vocab: int, kind: str) -> torch.Tensor:
    g = draw.generator
    x = torch.randn(tokens, vocab, generator=g) * 3
    if kind == "flat":
        x = torch.zeros(tokens, vocab)
    elif kind == "peaked":
        x[torch.arange(tokens), torch.randint(0, vocab, (tokens,), generator=g)] += 30
    elif kind == "masked":
        x[torch.rand(tokens, vocab, generator=g) < 0.5] = float("-inf")
        x[:, int(torch.randint(0, vocab, (1,), generator=g))] = 0.0
    elif kind == "all-but-one":
        keep = torch.randint(0, vocab, (tokens,), generator=g)
        kept = x[torch.arange(tokens), keep]
        x.fill_(float("-inf"))
        x[torch.arange(tokens), keep] = kept
    elif kind == "ties":
        x = torch.randint(0, 4, (tokens, vocab), generator=g).float()
    return x


def sampler_inputs(config: Any, tokens: int, draw: Inputs, geometry: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
    """``logits`` of the kind ``geometry["logits"]`` names (:data:`LOGITS`) and per-request parameters as
    ``geometry["params"]`` says (:data:`PARAMS`): mixed, all greedy, plain temperature, top-k of 1, or top-p at the
    boundary between the second and third most likely tokens."""
    vocab, g = config.vocab, draw.generator
    x = _logits(draw, tokens, vocab, geometry.get("logits", "normal"))
    kind = geometry.get("params", "mixed")

    def pick(values: list[float], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype)[torch.randint(0, len(values), (tokens,), generator=g)]

    temperature = pick([0.0, 0.5, 1.0, 1.5], torch.float32)
    top_k = pick([0, 1, 2, 5, vocab, vocab + 7], torch.int64)
    top_p = pick([1.0, 0.95, 0.6, 0.2], torch.float32)
    min_p = pick([0.0, 0.0, 0.05, 0.3], torch.float32)
    if kind != "mixed":
        top_k.zero_(), top_p.fill_(1.0), min_p.zero_()
        temperature = torch.where(temperature == 0, torch.ones_like(temperature), temperature)
    if kind == "greedy":
        temperature.zero_()
    elif kind == "top-k-1":
        top_k.fill_(1)
    elif kind == "top-p-boundary":
        temperature.fill_(1.0)
        probs = torch.softmax(x.double(), dim=-1).sort(dim=-1, descending=True).values
        top_p = probs[:, :2].sum(dim=-1).float()
    seeds = torch.randint(-(2**62), 2**62, (tokens,), generator=g)
    offsets = torch.randint(0, 2**40, (tokens,), generator=g)
    device = draw.device
    return (x.to(config.dtype).to(device), *(t.to(device) for t in (temperature, top_k, top_p, min_p, seeds, offsets)))


def sampler_cases(kernel: str) -> Any:
    """Examples: vocabularies of a few hundred (not a multiple of any block) and the block sizes' neighbours,
    batches of 1 to 256, each logits kind and parameter mix."""
    from hypothesis import strategies as st

    from lazyops.testing import strategies

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        vocab = draw(st.sampled_from([2, 3, 100, 129, 257, 300]) | st.integers(2, 300))
        dtype = draw(strategies.dtypes())
        tokens = draw(st.sampled_from([1, 2, 7, 256]) | st.integers(1, 64))
        geometry = {"logits": draw(st.sampled_from(LOGITS)), "params": draw(st.sampled_from(PARAMS))}
        kwargs: dict[str, Any] = {}
        if draw(st.booleans()):
            kwargs = {"logprobs": True, "top_n": min(vocab, draw(st.sampled_from([0, 1, 5])))}
        return Case(kernel, (vocab, dtype), kwargs, (tokens,), draw(strategies.seeds()), geometry)

    return draw_case()


# -- the judge -----------------------------------------------------------------------------------------------------
def judge_draws(
    factory: Callable[..., Any], case: Case, *, device: str | None = None, max_elements: int | None = None
) -> tuple[float, Any]:
    """Judge ``case`` (see the module's docstring); raises ``ConformanceError`` on a failure. Returns ``(0.0,
    dtype)``: a sampler has no error to report, only a verdict."""
    from lazyops.specs import spec as spec_of_kernel
    from lazyops.testing.cases import examples

    spec = spec_of_kernel(case.kernel)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    max_elements = max_elements or default_max_elements(device)
    config = spec.bind(*case.args, **case.kwargs)
    kernel = case.build(factory)
    draw = Inputs(case.seed, device)
    for requested in case.tokens:
        tokens = rows(requested, config.vocab, max_elements)
        if tokens == 0:
            continue
        drawn_all = examples(spec).example_inputs(config, tokens, draw, case.geometry)
        drawn, buffers = drawn_all[:7], drawn_all[7:]  # the logits and parameters; the log-probabilities' buffers
        logits64 = drawn[0].double().cpu()
        temperature = drawn[1].cpu()
        params = tuple(t.cpu() for t in drawn[1:])
        strict, loose, tight = (
            spec.reference(
                config, logits64, *params, top_p_margin=sign * TOP_P_MARGIN, min_p_margin=sign * MIN_P_MARGIN
            )[0]  # type: ignore[call-arg]
            for sign in (0, 1, -1)
        )
        what = f"{case}: M={tokens}"
        got = _call(kernel, drawn, case, draw, what)
        _check_support(got, strict, loose, temperature, what)
        _check_determinism(kernel, drawn, got, what)
        if getattr(config, "logprobs", False):
            _check_logprobs(spec, kernel, drawn, buffers, got, logits64, what)
        judged = [r for r in range(tokens) if temperature[r] > 0 and int((loose[r] > 0).sum()) > 1]
        for row in judged[:DISTRIBUTION_ROWS]:
            references = (strict[row], loose[row], tight[row])
            _check_distribution(kernel, drawn, row, references, config.vocab, device, what)
    return 0.0, config.dtype


def _call(kernel: Any, drawn: tuple[torch.Tensor, ...], case: Case, draw: Inputs, what: str) -> torch.Tensor:
    """The kernel on the case's layout: logits in a wider buffer (strided rows), leading dimensions split, a
    preallocated ``out=``."""
    logits, *params = drawn
    tokens, vocab = logits.shape
    layout = case.layout
    if layout.strided:
        buffer = draw.randn(tokens, layout.offset + vocab + layout.row_pad, dtype=logits.dtype)
        buffer[:, layout.offset : layout.offset + vocab] = logits
        logits = buffer[:, layout.offset : layout.offset + vocab]
    split = next((d for d in range(min(layout.lead, tokens), 1, -1) if tokens % d == 0), 1)
    shape = (split, tokens // split) if split > 1 else (tokens,)
    args = (logits.view(*shape, vocab), *(p.view(shape) for p in params))
    out = None
    if layout.out == "given":
        out = torch.full(shape, -1, dtype=torch.int64, device=logits.device)
    got = kernel(*args) if out is None else kernel(*args, out=out)
    if out is not None and got is not out:
        raise ConformanceError(f"{what}: given out=, the kernel must return it")
    if not isinstance(got, torch.Tensor) or got.dtype != torch.int64 or tuple(got.shape) != shape:
        raise ConformanceError(f"{what}: expected int64 tokens of shape {shape}, got {got!r:.80}")
    return got.reshape(-1).cpu()


def _check_logprobs(
    spec: Any,
    kernel: Any,
    drawn: tuple[torch.Tensor, ...],
    buffers: tuple[torch.Tensor, ...],
    tokens: torch.Tensor,
    logits64: torch.Tensor,
    what: str,
) -> None:
    logprob, top, ids = (buffer.clone() for buffer in buffers)
    again = kernel(*drawn, logprob=logprob, top_logprobs=top, top_ids=ids).cpu()
    if not torch.equal(again, tokens):
        raise ConformanceError(f"{what}: writing the log-probabilities changed the tokens drawn")
    want_logprob, want_top, want_ids = spec.log_probabilities(logits64, tokens, top.shape[-1])
    for name, written, want in (("logprob", logprob, want_logprob), ("top_logprobs", top, want_top)):
        got = written.cpu().double()
        finite = torch.isfinite(want)
        close = (got - want).abs() <= LOGPROB_TOLERANCE * (1 + want.abs())
        bad = torch.where(finite, ~close, got != want)
        if bad.any():
            where = tuple(bad.nonzero()[0].tolist())
            raise ConformanceError(
                f"{what}: {name} {got[where].item()!r} at {where}, expected {want[where].item()!r} (log_softmax of "
                f"the logits as given, raw; tolerance {LOGPROB_TOLERANCE} relative to 1 + |value|)"
            )
    if not torch.equal(ids.cpu(), want_ids):
        raise ConformanceError(
            f"{what}: top_ids {ids.cpu()[:2].tolist()}..., expected {want_ids[:2].tolist()}... (descending, ties to "
            "the lower id)"
        )


def _check_support(
    got: torch.Tensor, strict: torch.Tensor, loose: torch.Tensor, temperature: torch.Tensor, what: str
) -> None:
    vocab = strict.shape[-1]
    for row, token in enumerate(got.tolist()):
        if not 0 <= token < vocab:
            raise ConformanceError(f"{what}: row {row} drew token {token}, outside [0, {vocab})")
        if temperature[row] == 0 and strict[row, token] != 1:
            want = int(strict[row].argmax())
            raise ConformanceError(f"{what}: row {row} is greedy (temperature 0): token {token}, expected {want}")
        if loose[row, token] == 0:
            raise ConformanceError(
                f"{what}: row {row} drew token {token}, which its top-k, top-p and min-p exclude (kept: "
                f"{(loose[row] > 0).nonzero().flatten().tolist()[:20]})"
            )


def _check_determinism(kernel: Any, drawn: tuple[torch.Tensor, ...], got: torch.Tensor, what: str) -> None:
    again = kernel(*drawn).cpu()
    if not torch.equal(again, got):
        raise ConformanceError(f"{what}: the same call twice drew different tokens: {got.tolist()[:8]}...")
    if drawn[0].shape[0] > 1:
        half = kernel(drawn[0][::2], *(p[::2].contiguous() for p in drawn[1:])).cpu()
        if not torch.equal(half, got[::2]):
            raise ConformanceError(f"{what}: a row drew another token in a batch of other rows (every other row)")


def _check_distribution(
    kernel: Any,
    drawn: tuple[torch.Tensor, ...],
    row: int,
    references: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    vocab: int,
    device: str,
    what: str,
) -> None:
    n = draw_count(vocab, device)
    logits = drawn[0][row : row + 1].expand(n, vocab).contiguous()
    params = [p[row : row + 1].expand(n).contiguous() for p in drawn[1:]]
    params[-1] = params[-1] + torch.arange(n, device=params[-1].device)
    tokens = kernel(logits, *params).cpu()
    if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < vocab:
        raise ConformanceError(f"{what}: row {row} drew tokens outside [0, {vocab})")
    counts = torch.bincount(tokens, minlength=vocab)
    strict, loose, _ = references
    outside = (counts > 0) & (loose == 0)
    if outside.any():
        raise ConformanceError(f"{what}: row {row} drew tokens it excludes: {outside.nonzero().flatten()[:10]}")
    verdicts = [chi_square(counts, probs) for probs in references]
    if all(stat > limit for stat, limit in verdicts):
        stat, limit = verdicts[0]
        raise ConformanceError(
            f"{what}: row {row}'s {n} draws do not follow its distribution: chi-square {stat:.1f} > {limit:.1f} "
            f"(level {ALPHA}); the most drawn tokens {counts.topk(min(5, vocab)).indices.tolist()}, the most likely "
            f"{strict.topk(min(5, vocab)).indices.tolist()}"
        )
