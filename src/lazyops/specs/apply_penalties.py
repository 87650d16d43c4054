"""Logit bias, repetition, frequency and presence penalties and a token mask, applied to logits in place, as vLLM
applies them before it samples.

For each request (a row), with ``seen = prompt_mask | (output_counts > 0)``::

    logits[bias_ids[j]] += bias_values[j]               (each j; an id outside [0, V) is padding, skipped)
    logits = where(seen, where(logits > 0, logits / repetition, logits * repetition), logits)
    logits -= frequency * output_counts + presence * (output_counts > 0)
    logits = where(bit i of allowed, logits, -inf)       (word i // 32, bit i % 32; bit set: token i allowed)

The order is vLLM's (v1 ``Sampler``: the allowed-token mask, bad words, then the logit bias, then the penalties;
the structured-output grammar bitmask is applied by the model runner before the sampler). The mask commutes with
the rest (a masked logit is ``-inf`` and stays so under a finite bias and the penalties), so masking last is
masking first; the bias does not commute with the repetition penalty (``(x + b) / r`` is not ``x / r + b``), so it
comes first, as in vLLM. ``bias_ids``/``bias_values`` (int32 and float32 ``[M, K]``, ``K`` any, repeated ids add
up) and ``allowed`` (int32 ``[M, ceil(V / 32)]``, vLLM's and xgrammar's packed bitmask; a request without a mask
has every bit set) are keyword tensors a call may leave out; ``M`` is the number of rows of the logits.

Repetition (1.0: off) counts the prompt's tokens and the generated ones; frequency and presence (0.0: off) only the
generated ones. The math runs in float32, rounded once to the logits' dtype. The per-request parameters are
``[B, 1]`` columns (``t[:, None]`` of a ``[B]`` tensor), so that they are rows as the logits are: one batch mixes
requests, and a CUDA graph captured once serves any values.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from lazyops.specs._params import TOKENS, RowConfig, Rows, Tensor, row_config
from lazyops.specs._spec import KernelSpec


class ApplyPenaltiesKernel(Protocol):
    """What ``apply_penalties_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        logits: torch.Tensor,
        output_counts: torch.Tensor,
        prompt_mask: torch.Tensor,
        repetition: torch.Tensor,
        frequency: torch.Tensor,
        presence: torch.Tensor,
        /,
        *,
        bias_ids: torch.Tensor | None = None,
        bias_values: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor]:
        """Penalise ``logits[..., V]`` in place from ``output_counts`` (int32, each token's count among the
        generated ones) and ``prompt_mask`` (bool, the prompt's tokens), with each request's ``repetition``,
        ``frequency`` and ``presence`` (float32, ``[..., 1]``); first add the logit bias ``bias_values`` (float32
        ``[M, K]``) at ``bias_ids`` (int32 ``[M, K]``, -1: padding), last set the tokens whose bit of ``allowed``
        (int32 ``[M, ceil(V / 32)]``) is clear to ``-inf``; returns ``(logits,)``."""
        ...


#: The configuration of ``apply_penalties_tl``: the vocabulary ``n`` and the logits' dtype.
ApplyPenaltiesConfig = RowConfig


def given(tensor: torch.Tensor | None) -> bool:
    """Whether a keyword tensor was passed (None, or the empty tensor that stands for it inside lazyops, is not)."""
    return tensor is not None and tensor.numel() > 0


def bias_rows(logits: torch.Tensor, bias_ids: torch.Tensor, bias_values: torch.Tensor) -> torch.Tensor:
    """The bias ``[M, V]`` in ``logits``' dtype: each row's values added at its ids, padding (ids outside
    ``[0, V)``) dropped, repeated ids summed."""
    rows, vocab = logits.shape
    ids = bias_ids.reshape(rows, -1).long()
    ids = torch.where((ids >= 0) & (ids < vocab), ids, vocab)  # padding lands in a column cut off below
    bias = torch.zeros(rows, vocab + 1, dtype=logits.dtype, device=logits.device)
    return bias.scatter_add_(1, ids, bias_values.reshape(rows, -1).to(logits.dtype))[:, :vocab]


def allowed_rows(allowed: torch.Tensor, vocab: int) -> torch.Tensor:
    """The packed bitmask ``[M, ceil(V / 32)]`` (int32, bit set: allowed) unpacked to bool ``[M, V]``."""
    words = allowed.reshape(allowed.shape[0] if allowed.dim() == 2 else -1, allowed.shape[-1]).long()
    ids = torch.arange(vocab, device=allowed.device)
    return ((words[:, ids // 32] >> (ids % 32)) & 1).bool()


def penalised(
    logits: torch.Tensor,
    output_counts: torch.Tensor,
    prompt_mask: torch.Tensor,
    repetition: torch.Tensor,
    frequency: torch.Tensor,
    presence: torch.Tensor,
    bias_ids: torch.Tensor | None = None,
    bias_values: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The module docstring's definition on ``logits[M, V]``, in their dtype (the torch backend's float32, the
    judge's float64)."""
    dtype = logits.dtype
    if given(bias_ids) and bias_ids is not None and bias_values is not None:
        logits = logits + bias_rows(logits, bias_ids, bias_values)
    generated = output_counts > 0
    seen = prompt_mask | generated
    repetition = repetition.to(dtype)
    x = torch.where(seen, torch.where(logits > 0, logits / repetition, logits * repetition), logits)
    x = x - frequency.to(dtype) * output_counts.to(dtype) - presence.to(dtype) * generated.to(dtype)
    if given(allowed) and allowed is not None:
        x = torch.where(allowed_rows(allowed, x.shape[-1]), x, torch.full_like(x, float("-inf")))
    return x


class ApplyPenaltiesSpec(KernelSpec):
    name = "apply_penalties_tl"
    kernel_type = ApplyPenaltiesKernel
    params = (
        Rows("logits", mutated=True, scale=3.0),
        Rows("output_counts", dtype=torch.int32),
        Rows("prompt_mask", dtype=torch.bool),
        Rows("repetition", width=1, dtype=torch.float32),
        Rows("frequency", width=1, dtype=torch.float32),
        Rows("presence", width=1, dtype=torch.float32),
        # a row per request (T: the logits' rows), K entries each; ids and values both or neither
        Tensor("bias_ids", (TOKENS, "K"), torch.int32, keyword=True, together="bias_values"),
        Tensor("bias_values", (TOKENS, "K"), torch.float32, keyword=True, together="bias_ids"),
        Tensor("allowed", (TOKENS, lambda config: -(-config.n // 32)), torch.int32, keyword=True),
    )

    def bind(self, n: int, dtype: torch.dtype | str) -> RowConfig:
        """Applies repetition, frequency and presence penalties to ``logits[B, n]`` in place (vLLM's definition).

        Returns ``kernel(logits, output_counts, prompt_mask, repetition, frequency, presence, *, bias_ids=None,
        bias_values=None, allowed=None) -> (logits,)``: ``output_counts[B, n]`` int32 and ``prompt_mask[B, n]``
        bool, the parameters ``[B, 1]`` float32 columns (repetition 1.0, frequency and presence 0.0: off). First
        the logit bias: ``bias_values[B, K]`` (float32) added at ``bias_ids[B, K]`` (int32; -1, or any id outside
        ``[0, n)``, pads a request with fewer entries; repeated ids add up). Then a token the prompt or the output
        holds has a positive logit divided by ``repetition``, a negative one multiplied by it; then ``frequency *
        count`` and ``presence`` (once a token was generated) are subtracted. Last, a token whose bit of
        ``allowed[B, ceil(n / 32)]`` (int32, bit ``i % 32`` of word ``i // 32``) is clear becomes ``-inf``; a
        request without a mask has every bit set (``-1`` words). Math in float32, rounded once; no value is read
        on the host, so a CUDA graph captured once serves any bias and mask of the same ``K``.

        The order is vLLM's: its v1 ``Sampler`` applies the allowed-token mask and bad words, then the logit bias,
        then the penalties; the grammar bitmask of structured output is applied before the sampler. Masking is the
        same first or last (``-inf`` stays ``-inf``); the bias must precede the repetition penalty.

        The same call elsewhere::

            lazyops:  apply_penalties_tl(V, dtype)(logits, counts, prompt_mask, rep[:, None], freq[:, None],
                      pres[:, None], bias_ids=ids, bias_values=values, allowed=bitmask)
            vLLM:     apply_penalties(logits, prompt_mask, output_mask, output_bin_counts, presence, frequency, rep)
                      (vllm.model_executor.layers.utils; output_mask = counts > 0); the logit bias by
                      LogitBiasLogitsProcessor (logits[rows, ids] += values)
            xgrammar: apply_token_bitmask_inplace(logits, bitmask)  (bitmask [B, ceil(V / 32)] int32, bit set:
                      allowed; vLLM's apply_grammar_bitmask calls it); FlashInfer takes the masked logits
        """
        return row_config(self.name, n, dtype)

    def reference(self, config: RowConfig, logits: torch.Tensor, *rest: Any) -> tuple[torch.Tensor]:  # type: ignore[override]
        rows = logits.reshape(-1, config.n)
        flat = tuple(t.reshape(rows.shape[0], -1) if isinstance(t, torch.Tensor) and t.numel() else t for t in rest)
        return (penalised(rows, *flat).reshape(logits.shape),)


spec = ApplyPenaltiesSpec()
