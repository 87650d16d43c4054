"""Penalties (the spec: ``lazyops.specs.apply_penalties``): one pass over the logits, in place, a block of a row per
program; each input's rows at their own stride (views of packed buffers). The logit bias is added in the same pass
(each of a row's ``K`` entries compared with the block's ids: ``K`` is a handful), the packed bitmask read a word
per 32 tokens; a call without them compiles without their code (``HAS_BIAS``, ``HAS_MASK``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from lazyops._backends.triton._common import launch_device, next_power_of_2
from lazyops._backends.triton._launch import Launcher
from lazyops.specs.apply_penalties import ApplyPenaltiesConfig, spec


@triton.jit(do_not_specialize=["K"])
def _penalties_kernel(
    logits_ptr,
    counts_ptr,
    mask_ptr,
    repetition_ptr,
    frequency_ptr,
    presence_ptr,
    bias_ids_ptr,
    bias_values_ptr,
    allowed_ptr,
    K,
    logits_stride,
    counts_stride,
    mask_stride,
    repetition_stride,
    frequency_stride,
    presence_stride,
    allowed_stride,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = cols < N
    x = tl.load(logits_ptr + row * logits_stride + cols, mask=inside, other=0.0).to(tl.float32)
    counts = tl.load(counts_ptr + row * counts_stride + cols, mask=inside, other=0)
    prompt = tl.load(mask_ptr + row * mask_stride + cols, mask=inside, other=0).to(tl.int1)
    repetition = tl.load(repetition_ptr + row * repetition_stride)
    frequency = tl.load(frequency_ptr + row * frequency_stride)
    presence = tl.load(presence_ptr + row * presence_stride)
    if HAS_BIAS:  # vLLM's order: the logit bias before the penalties
        for j in range(K):
            token = tl.load(bias_ids_ptr + row * K + j)
            value = tl.load(bias_values_ptr + row * K + j)
            x = tl.where(cols == token, x + value, x)
    generated = counts > 0
    x = tl.where(prompt | generated, tl.where(x > 0, x / repetition, x * repetition), x)
    x = x - frequency * counts.to(tl.float32) - presence * generated.to(tl.float32)
    if HAS_MASK:  # bit i % 32 of word i // 32: token i allowed
        words = tl.load(allowed_ptr + row * allowed_stride + (cols >> 5), mask=inside, other=-1)
        x = tl.where(((words >> (cols & 31)) & 1) != 0, x, -float("inf"))
    tl.store(logits_ptr + row * logits_stride + cols, x.to(logits_ptr.dtype.element_ty), mask=inside)


BLOCK = 4096


@spec.implementation(device_type=launch_device(_penalties_kernel), strided_rows=True)
def apply_penalties_tl(config: ApplyPenaltiesConfig) -> Callable[..., None]:
    block = min(next_power_of_2(config.n), BLOCK)
    blocks = triton.cdiv(config.n, block)
    launches = {
        (bias, mask): Launcher(
            _penalties_kernel,
            {"N": config.n, "BLOCK_N": block, "HAS_BIAS": bias, "HAS_MASK": mask},
            num_warps=8 if block >= 2048 else 4,
        )
        for bias in (False, True)
        for mask in (False, True)
    }

    def apply_penalties(
        logits: torch.Tensor,
        output_counts: torch.Tensor,
        prompt_mask: torch.Tensor,
        repetition: torch.Tensor,
        frequency: torch.Tensor,
        presence: torch.Tensor,
        bias_ids: torch.Tensor | None = None,
        bias_values: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> None:
        bias = bias_ids is not None and bias_ids.numel() > 0
        mask = allowed is not None and allowed.numel() > 0
        ids = bias_ids if bias and bias_ids is not None else output_counts  # a left-out input is never read
        values = bias_values if bias and bias_values is not None else repetition
        words = allowed if mask and allowed is not None else output_counts
        launches[bias, mask](
            (logits.shape[0], blocks),
            logits,
            output_counts,
            prompt_mask.view(torch.uint8),
            repetition,
            frequency,
            presence,
            ids,
            values,
            words,
            ids.shape[1] if bias else 0,
            logits.stride(0),
            output_counts.stride(0),
            prompt_mask.stride(0),
            repetition.stride(0),
            frequency.stride(0),
            presence.stride(0),
            words.stride(0),
        )

    return apply_penalties
