"""Repetition, frequency and presence penalties applied to logits in place, as vLLM's ``apply_penalties`` does.

For each request (a row), with ``seen = prompt_mask | (output_counts > 0)``::

    logits = where(seen, where(logits > 0, logits / repetition, logits * repetition), logits)
    logits -= frequency * output_counts + presence * (output_counts > 0)

Repetition (1.0: off) counts the prompt's tokens and the generated ones; frequency and presence (0.0: off) only the
generated ones. The math runs in float32, rounded once to the logits' dtype. The per-request parameters are
``[B, 1]`` columns (``t[:, None]`` of a ``[B]`` tensor), so that they are rows as the logits are: one batch mixes
requests, and a CUDA graph captured once serves any values.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from lazyops.specs._arguments import RowConfig, row_config
from lazyops.specs._params import Rows
from lazyops.specs._spec import Example, KernelSpec


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
    ) -> tuple[torch.Tensor]:
        """Penalise ``logits[..., V]`` in place from ``output_counts`` (int32, each token's count among the
        generated ones) and ``prompt_mask`` (bool, the prompt's tokens), with each request's ``repetition``,
        ``frequency`` and ``presence`` (float32, ``[..., 1]``); returns ``(logits,)``."""
        ...


#: The configuration of ``apply_penalties_tl``: the vocabulary ``n`` and the logits' dtype.
ApplyPenaltiesConfig = RowConfig


def _counts(draw: Any, config: RowConfig, tokens: int, geometry: Any) -> torch.Tensor:
    """Counts of 0 (most tokens), 1 and a few: a request's generated tokens so far."""
    counts = draw.randint(8, tokens, config.n, dtype=torch.int32, device="cpu")
    counts = torch.where(counts > 4, counts - 4, torch.zeros_like(counts))
    return counts.to(draw.device)


def _mask(draw: Any, config: RowConfig, tokens: int, geometry: Any) -> torch.Tensor:
    return (draw.randint(4, tokens, config.n, dtype=torch.int32, device="cpu") == 0).to(draw.device)  # type: ignore[no-any-return]


def _column(low: float, high: float) -> Any:
    def draw_column(draw: Any, config: RowConfig, tokens: int, geometry: Any) -> torch.Tensor:
        values = torch.rand(tokens, 1, generator=draw.generator) * (high - low) + low
        off = torch.rand(tokens, 1, generator=draw.generator) < 0.25  # a quarter of the requests leave it off
        values = torch.where(off, torch.full_like(values, 1.0 if low >= 1 else 0.0), values)
        return values.to(draw.device)

    return draw_column


def penalised(
    logits: torch.Tensor,
    output_counts: torch.Tensor,
    prompt_mask: torch.Tensor,
    repetition: torch.Tensor,
    frequency: torch.Tensor,
    presence: torch.Tensor,
) -> torch.Tensor:
    """The module docstring's definition, in ``logits``' dtype (the torch backend's float32, the judge's float64)."""
    dtype = logits.dtype
    generated = output_counts > 0
    seen = prompt_mask | generated
    repetition = repetition.to(dtype)
    x = torch.where(seen, torch.where(logits > 0, logits / repetition, logits * repetition), logits)
    return x - frequency.to(dtype) * output_counts.to(dtype) - presence.to(dtype) * generated.to(dtype)


class ApplyPenaltiesSpec(KernelSpec):
    name = "apply_penalties_tl"
    kernel_type = ApplyPenaltiesKernel
    params = (
        Rows("logits", mutated=True, scale=3.0),
        Rows("output_counts", dtype=torch.int32, draw=_counts),
        Rows("prompt_mask", dtype=torch.bool, draw=_mask),
        Rows("repetition", width=1, dtype=torch.float32, draw=_column(1.0, 2.0)),
        Rows("frequency", width=1, dtype=torch.float32, draw=_column(-0.5, 1.0)),
        Rows("presence", width=1, dtype=torch.float32, draw=_column(-0.5, 1.0)),
    )

    def bind(self, n: int, dtype: torch.dtype | str) -> RowConfig:
        """Applies repetition, frequency and presence penalties to ``logits[B, n]`` in place (vLLM's definition).

        Returns ``kernel(logits, output_counts, prompt_mask, repetition, frequency, presence) -> (logits,)``:
        ``output_counts[B, n]`` int32 and ``prompt_mask[B, n]`` bool, the parameters ``[B, 1]`` float32 columns
        (repetition 1.0, frequency and presence 0.0: off). A token the prompt or the output holds has a positive
        logit divided by ``repetition``, a negative one multiplied by it; then ``frequency * count`` and ``presence``
        (once a token was generated) are subtracted. Math in float32.

        The same call elsewhere::

            lazyops: apply_penalties_tl(V, dtype)(logits, counts, prompt_mask, rep[:, None], freq[:, None],
                     pres[:, None])
            vLLM:    apply_penalties(logits, prompt_mask, output_mask, output_bin_counts, presence, frequency, rep)
                     (vllm.model_executor.layers.utils; output_mask = counts > 0)
        """
        return row_config(self.name, n, dtype)

    def reference(self, config: RowConfig, logits: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (penalised(logits, *rest),)

    def cases(self) -> Any:
        from lazyops.testing import strategies

        return strategies.row_cases(self.name)

    def benchmark(self, dtype: torch.dtype) -> Example:
        return Example((128256, dtype))


spec = ApplyPenaltiesSpec()
