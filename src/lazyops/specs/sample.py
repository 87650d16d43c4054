"""Sampling one token per request from its logits: temperature, min-p, top-k, top-p, then a seeded draw.

Each request (a row of ``logits``) carries its own parameters as tensors, so that one batch mixes requests and a
CUDA graph captured once serves any values; nothing is read on the host. The definition, in the order vLLM's
``Sampler`` and FlashInfer apply the filters:

1. ``z = logits / temperature`` in float32 (``temperature == 0``: greedy, the argmax of ``logits``, ties to the
   lowest id; the filters and the draw do not apply);
2. min-p: keep the tokens whose probability ``softmax(z)`` is at least ``min_p`` times the largest one;
3. top-k: of those, keep the tokens of which fewer than ``top_k`` others have a larger ``z`` (ties at the k-th
   value are all kept; 0, or ``top_k >= V``, is off);
4. top-p: renormalised over what is kept, keep the tokens whose *strictly larger* tokens' mass is below ``top_p``
   (ties at the boundary all kept; 1.0 is off);
5. draw from the kept tokens, renormalised: the exponential race ``argmax(p_i / E_i)``, ``E_i = -log(u_i)`` (vLLM's
   torch path), with ``u_i`` a hash of (seed, offset, token id) (the torch backend's ``uniforms``, which the GPU
   backends repeat bit for bit), so a request's token depends only on its own logits, parameters, seed and
   offset, never on the batch around it.

Every filter keeps a set of the form ``{i: z_i >= threshold}``, so each is a threshold, found without a sort by
the GPU backends (a bisection over the float's bits: ``docs/decisions/012-sampling-thresholds.md``).

Log-probabilities (``sample_tl(V, dtype, logprobs=True, top_n=n)``): the call also writes, into buffers the
engine allocates once (keywords ``logprob=[B]``, ``top_logprobs=[B, n]`` float32, ``top_ids=[B, n]`` int64), the
log-probability of the sampled token and the ``n`` largest log-probabilities of the row with their ids (in
descending order, ties to the lower id). They are of ``log_softmax(logits)`` in float32, the logits as the call
receives them: before temperature and the filters. This is vLLM's default (``logprobs_mode="raw_logprobs"``: the
model's distribution, whatever was sampled from); its ``processed_logprobs`` would take them after temperature and
the filters. An engine that penalises the logits in place first (``apply_penalties_tl``) gets the penalised ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import TOKEN_DIMS, Out, Rows, Tensor
from lazyops.specs._spec import KernelSpec

#: The per-request parameters, after the logits, in call order, with their dtypes.
REQUEST_PARAMS: tuple[tuple[str, torch.dtype], ...] = (
    ("temperature", torch.float32),
    ("top_k", torch.int64),
    ("top_p", torch.float32),
    ("min_p", torch.float32),
    ("seeds", torch.int64),
    ("offsets", torch.int64),
)


class SampleKernel(Protocol):
    """What ``sample_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        logits: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        seeds: torch.Tensor,
        offsets: torch.Tensor,
        /,
        *,
        logprob: torch.Tensor | None = None,
        top_logprobs: torch.Tensor | None = None,
        top_ids: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One token id (int64) per row of ``logits[..., V]``, drawn with that row's ``temperature`` (float32; 0:
        greedy), ``top_k`` (int64; 0: off), ``top_p``, ``min_p`` (float32; 1.0 and 0.0: off), ``seeds`` and
        ``offsets`` (int64: the request's seed and its step), each shaped like ``logits.shape[:-1]``. With a factory
        made with ``logprobs=True``: the sampled token's log-probability written into ``logprob`` (float32, shaped
        like the tokens) and the row's ``top_logprobs`` largest into ``top_logprobs`` and ``top_ids`` (float32 and
        int64, ``[..., n]``), each where given (of ``log_softmax(logits)``: vLLM's raw logprobs)."""
        ...


#: The buffers a call may write the log-probabilities into (keywords, after the request parameters).
LOGPROB_BUFFERS: tuple[tuple[str, torch.dtype], ...] = (
    ("logprob", torch.float32),
    ("top_logprobs", torch.float32),
    ("top_ids", torch.int64),
)


@dataclass(frozen=True)
class SampleConfig:
    vocab: int
    dtype: torch.dtype
    label: str
    logprobs: bool = False
    top_n: int = 0


# -- the definition ----------------------------------------------------------------------------------------------
def kept_probabilities(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    *,
    top_p_margin: float = 0.0,
    min_p_margin: float = 0.0,
) -> torch.Tensor:
    """The distribution a non-greedy row draws from, ``[B, V]`` in the logits' dtype (float64 for the judge): the
    module docstring's steps 1 to 4, with a sort. The margins widen top-p and min-p (the judge's allowance for a
    float32 kernel's sums at a boundary)."""
    dtype = logits.dtype
    vocab = logits.shape[-1]
    scale = torch.where(temperature > 0, temperature, torch.ones_like(temperature)).to(dtype)
    z = logits / scale[:, None]
    probs = torch.softmax(z, dim=-1)
    kept = probs >= (min_p.to(dtype)[:, None] * (1 - min_p_margin)) * probs.amax(dim=-1, keepdim=True)
    k = torch.where((top_k <= 0) | (top_k > vocab), vocab, top_k)
    ordered = z.sort(dim=-1, descending=True).values
    kth = ordered.gather(1, (k - 1).clamp(0, vocab - 1)[:, None])
    kept &= z >= kth
    mass = torch.where(kept, probs, torch.zeros_like(probs))
    mass = mass / mass.sum(dim=-1, keepdim=True)
    # the mass of the strictly larger tokens: the exclusive running sum in descending order, taken at the first
    # of each run of ties
    order = z.argsort(dim=-1, descending=True, stable=True)
    sorted_mass = mass.gather(1, order)
    above = sorted_mass.cumsum(dim=-1) - sorted_mass
    sorted_z = z.gather(1, order)
    first_tie = torch.searchsorted((-sorted_z).contiguous(), (-sorted_z).contiguous(), side="left")
    above = above.gather(1, first_tie)
    limit = (top_p.to(dtype) + top_p_margin)[:, None]
    keep_sorted = above < limit
    kept &= torch.zeros_like(kept).scatter(1, order, keep_sorted)
    chosen = torch.where(kept, probs, torch.zeros_like(probs))
    return chosen / chosen.sum(dim=-1, keepdim=True)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The argmax of each row, ties to the lowest id (``torch.argmax`` takes the first)."""
    return logits.argmax(dim=-1)


def log_probabilities(
    logits: torch.Tensor, tokens: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logprob[B], top_logprobs[B, n], top_ids[B, n])`` of ``log_softmax(logits[B, V])`` in the logits' dtype
    (the torch backend's float32, the judge's float64): the sampled ``tokens``' and the ``n`` largest, ties to the
    lower id (a stable sort of the logits)."""
    logprobs = torch.log_softmax(logits, dim=-1)
    ids = logits.sort(dim=-1, descending=True, stable=True).indices[:, :n]
    return logprobs.gather(1, tokens.reshape(-1, 1))[:, 0], logprobs.gather(1, ids), ids


# -- the spec ------------------------------------------------------------------------------------------------------
class SampleSpec(KernelSpec):
    name = "sample_tl"
    kernel_type = SampleKernel
    params = (
        Rows("logits", width="vocab"),
        *(Tensor(name, (TOKEN_DIMS,), dtype) for name, dtype in REQUEST_PARAMS),  # one per request
        Tensor(
            "logprob",
            (TOKEN_DIMS,),
            torch.float32,
            mutated=True,
            keyword=True,
            present=lambda config: None if config.logprobs else False,
            why="a kernel made with sample_tl(..., logprobs=True) writes logprob where given; one without writes none",
        ),
        *(
            Tensor(
                name,
                (TOKEN_DIMS, "top_n"),
                dtype,
                mutated=True,
                keyword=True,
                present=lambda config: None if config.top_n else False,
                why=(
                    "a kernel made with sample_tl(..., logprobs=True, top_n=n) writes top_logprobs and top_ids where "
                    "given; one without writes neither"
                ),
                together=other,
            )
            for (name, dtype), other in zip(LOGPROB_BUFFERS[1:], ("top_ids", "top_logprobs"), strict=True)
        ),
    )
    out = Out(dtype=torch.int64)
    #: judged by the distribution of many draws (``lazyops.testing._draws``), not against a float64 output
    judgement = "draws"
    #: what :meth:`reference` returns: the distribution only; the log-probability buffers the call writes are
    #: judged by ``_draws`` against :meth:`log_probabilities`
    results = ("out",)

    def bind(self, vocab: int, dtype: torch.dtype | str, *, logprobs: bool = False, top_n: int = 0) -> SampleConfig:
        """Samples one token id per request from ``logits[B, vocab]``: temperature, min-p, top-k, top-p, a seeded draw.

        Returns ``kernel(logits, temperature, top_k, top_p, min_p, seeds, offsets, *, logprob=None,
        top_logprobs=None, top_ids=None, out=None) -> tokens[B]`` (int64). ``logits`` in ``dtype`` (float32,
        bfloat16, float16; rows may be strided); one value per request: ``temperature`` float32 (0: greedy, the
        argmax, ties to the lowest id), ``top_k`` int64 (0 or ``>= vocab``: off), ``top_p`` float32 (1.0: off),
        ``min_p`` float32 (0.0: off), ``seeds`` and ``offsets`` int64 (the request's seed and its step: the same
        four values give the same token, whatever the batch around it).

        The filters compose as vLLM's ``Sampler`` applies them: ``logits / temperature``, then min-p on its softmax,
        then top-k, then top-p on what top-k kept, renormalised; ties at a top-k or top-p boundary are all kept.
        The draw is the exponential race ``argmax(p / E)``, ``E ~ Exp(1)`` from a counter-based hash, so a CUDA
        graph captured once serves any parameters and seeds. Nothing is read on the host.

        ``logprobs=True``: the call writes, where given, ``logprob[B]`` (float32: the sampled token's
        log-probability) and, with ``top_n=n`` (0: none), ``top_logprobs[B, n]`` (float32) and
        ``top_ids[B, n]`` (int64: the row's ``n`` most likely tokens, descending, ties to the lower id). They are
        of ``log_softmax(logits)``, the logits as given, before temperature and the filters: vLLM's default
        ``logprobs_mode="raw_logprobs"`` (``Sampler.compute_logprobs`` then ``gather_logprobs``). The GPU backends
        find the top ``n`` in ``n`` passes over the row.

        The same call elsewhere::

            lazyops:    sample_tl(V, dtype)(logits, temperature, top_k, top_p, min_p, seeds, offsets)
            vLLM:       Sampler()(logits, sampling_metadata)  (TopKTopPSampler: sort, mask, probs.div_(q).argmax())
            FlashInfer: top_k_top_p_sampling_from_logits(logits / t[:, None], top_k, top_p, generator=g);
                        min_p_sampling_from_probs(softmax(logits / t[:, None]), min_p)
            logprobs:   sample_tl(V, dtype, logprobs=True, top_n=n)(..., logprob=lp, top_logprobs=tv,
                        top_ids=ti); vLLM: Sampler(logprobs_mode="raw_logprobs"), SamplerOutput.logprobs_tensors
        """
        vocab = _params.positive_int(self.name, "vocab", vocab)
        dtype = _params.canonical_dtype(self.name, dtype)
        if not isinstance(logprobs, bool):
            raise KernelInputError(f"{self.name}: logprobs must be True or False, got {logprobs!r}")
        if isinstance(top_n, bool) or not isinstance(top_n, int) or not 0 <= top_n <= vocab:
            raise KernelInputError(f"{self.name}: top_n must be an int from 0 to vocab ({vocab}), got {top_n!r}")
        if top_n and not logprobs:
            raise KernelInputError(f"{self.name}: top_n={top_n} needs logprobs=True")
        options: dict[str, Any] = {"vocab": vocab, "dtype": dtype}
        if logprobs:
            options.update(logprobs=True, top_n=top_n)
        return SampleConfig(vocab, dtype, _params.describe(self.name, **options), logprobs, top_n)

    def log_probabilities(
        self, logits: torch.Tensor, tokens: torch.Tensor, n: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What a call made with ``logprobs=True`` writes (:func:`log_probabilities`), for the draws judge."""
        return log_probabilities(logits, tokens, n)

    def reference(  # type: ignore[override]
        self,
        config: SampleConfig,
        logits: torch.Tensor,
        *params: torch.Tensor,
        top_p_margin: float = 0.0,
        min_p_margin: float = 0.0,
    ) -> tuple[torch.Tensor]:
        """The distribution each row draws from, ``[B, V]`` (one-hot on the argmax for a greedy row): what the
        draws judge (``lazyops.testing._draws``) compares a kernel's tokens with; the margins widen (or, negative,
        narrow) the top-p and min-p boundaries."""
        temperature, top_k, top_p, min_p = (tensor.reshape(-1) for tensor in params[:4])  # buffers after them
        rows = logits.reshape(-1, logits.shape[-1])
        probs = kept_probabilities(
            rows, temperature, top_k, top_p, min_p, top_p_margin=top_p_margin, min_p_margin=min_p_margin
        )
        one_hot = torch.nn.functional.one_hot(greedy(rows), rows.shape[-1]).to(probs.dtype)
        return (torch.where((temperature == 0)[:, None], one_hot, probs),)


spec = SampleSpec()
