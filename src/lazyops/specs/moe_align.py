"""The token alignment of a sparse MoE layer: the ``T·k`` routed assignments sorted by expert into blocks.

vLLM's ``moe_align_block_size`` and sgl-kernel's: assignment ``i`` is ``topk_ids.reshape(-1)[i]`` (token
``i // k``); each expert's assignments, in ascending order, fill ``ceil(count / block_size)`` blocks of
``block_size`` rows, experts in ascending order, the last block of each padded with ``T·k`` (an id past the end).
The call writes ``sorted_token_ids``, ``expert_ids`` (each block's expert; -1 past the last used block) and
``num_tokens_post_padded[0]`` (the used blocks' rows) in place. Their sizes come from ``T``, ``k``, ``E`` and
``block_size`` alone (:func:`sizes`, the worst case), so nothing is read on the host and the call can be captured
in a CUDA graph. An id outside ``[0, E)`` (``-1``: an expert another rank of an expert-parallel engine holds) is
in no block. A call without tokens launches nothing, as every lazyops kernel: it writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import FromTokens, Rows, Tensor
from lazyops.specs._spec import KernelSpec


class MoeAlignKernel(Protocol):
    """What ``moe_align_tl`` returns (in every backend): the kernel call, positional arguments only."""

    def __call__(
        self,
        topk_ids: torch.Tensor,
        sorted_token_ids: torch.Tensor,
        expert_ids: torch.Tensor,
        num_tokens_post_padded: torch.Tensor,
        /,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sorts the assignments of ``topk_ids[..., k]`` (int32) by expert into blocks, writing
        ``sorted_token_ids[P]``, ``expert_ids[P // block_size]`` and ``num_tokens_post_padded[1]`` (all int32,
        ``P`` from :func:`lazyops.specs.moe_align.sizes`); returns the three."""
        ...


@dataclass(frozen=True)
class MoeAlignConfig:
    num_experts: int
    top_k: int
    block_size: int
    label: str

    @property
    def dtype(self) -> torch.dtype:
        """The ids' dtype, what code reading any configuration's ``dtype`` gets; a property, not a field, so that
        the custom operator's schema (one argument a field) takes what the factory takes."""
        return torch.int32

    def sizes(self, tokens: int) -> tuple[int, int]:
        """``(len(sorted_token_ids), len(expert_ids))`` for ``tokens`` tokens: :func:`sizes`."""
        return sizes(tokens, self.top_k, self.num_experts, self.block_size)


def sizes(tokens: int, top_k: int, num_experts: int, block_size: int) -> tuple[int, int]:
    """``(padded, blocks)``: ``sorted_token_ids`` holds ``padded = blocks * block_size`` ids and ``expert_ids``
    ``blocks``, the most any routing of ``tokens * top_k`` assignments can fill (each used expert's last block may
    be all but one row padding; at most ``min(E, T·k)`` experts are used). vLLM's ``max_num_tokens_padded``,
    rounded up to whole blocks."""
    assignments = tokens * top_k
    blocks = -(-(assignments + min(num_experts, assignments) * (block_size - 1)) // block_size)
    return blocks * block_size, blocks


def align(config: MoeAlignConfig, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The definition, in plain torch on ``ids[T, k]`` (any integer dtype): ``(sorted_token_ids, expert_ids,
    num_tokens_post_padded)`` as int64. Graph-safe (no host read): a scatter count, a stable sort, a search."""
    flat = ids.reshape(-1).long()
    experts, block = config.num_experts, config.block_size
    assignments = flat.numel()
    padded_len, blocks = config.sizes(assignments // config.top_k)
    valid = (flat >= 0) & (flat < experts)
    key = torch.where(valid, flat, experts)  # the absent ones sort last, into a bin of their own
    counts = torch.zeros(experts + 1, dtype=torch.long, device=flat.device).scatter_add_(0, key, torch.ones_like(key))
    padded = (counts[:experts] + block - 1) // block * block
    ends = padded.cumsum(0)
    order = key.argsort(stable=True)
    rank = torch.arange(assignments, device=flat.device) - (counts.cumsum(0) - counts)[key[order]]
    starts = torch.cat([ends.new_zeros(1), ends])  # the absent bin starts past every block: a slot of its own
    target = torch.where(key[order] < experts, starts[key[order]] + rank, padded_len)
    sorted_ids = torch.full((padded_len + 1,), assignments, dtype=torch.long, device=flat.device)
    sorted_ids[target] = order
    owner = torch.searchsorted(ends, torch.arange(blocks, device=flat.device) * block, right=True)
    expert_ids = torch.where(owner < experts, owner, -1)
    return sorted_ids[:padded_len], expert_ids, ends[-1:].clone()


class MoeAlignSpec(KernelSpec):
    name = "moe_align_tl"
    kernel_type = MoeAlignKernel
    judgement = "exact"
    params = (
        Rows("topk_ids", width="top_k", dtype=torch.int32),
        # sized for the worst case of the call's T * top_k assignments: nothing read on the host
        Tensor(
            "sorted_token_ids", (FromTokens(lambda config, tokens: config.sizes(tokens)[0]),), torch.int32, mutated=True
        ),
        Tensor("expert_ids", (FromTokens(lambda config, tokens: config.sizes(tokens)[1]),), torch.int32, mutated=True),
        Tensor("num_tokens_post_padded", (1,), torch.int32, mutated=True),
    )

    def bind(self, num_experts: int, top_k: int, block_size: int = 16) -> MoeAlignConfig:
        """The token alignment of a sparse MoE layer: ``top_k`` of ``num_experts`` experts a token, sorted by
        expert into blocks of ``block_size`` rows for a grouped GEMM.

        Returns ``kernel(topk_ids[..., k], sorted_token_ids[P], expert_ids[P // block_size],
        num_tokens_post_padded[1]) -> (sorted_token_ids, expert_ids, num_tokens_post_padded)``, all int32, written
        in place; ``P`` is ``lazyops.specs.moe_align.sizes(T, top_k, num_experts, block_size)[0]`` (the worst case:
        nothing is read on the host). Each expert's assignments (``i`` of ``topk_ids.reshape(-1)``, token
        ``i // k``) in ascending order fill whole blocks, padded with ``T * k``; ``expert_ids`` is -1 past the last
        used block. An id outside ``[0, num_experts)`` (-1 from an expert map) is in no block. vLLM's
        ``moe_align_block_size(topk_ids, block_size, num_experts)``.
        """
        num_experts = _params.positive_int(self.name, "num_experts", num_experts)
        top_k = _params.positive_int(self.name, "top_k", top_k)
        block_size = _params.positive_int(self.name, "block_size", block_size)
        if top_k > num_experts:
            raise KernelInputError(f"{self.name}: top_k {top_k} exceeds num_experts {num_experts}; pick at most that")
        label = _params.describe(self.name, num_experts=num_experts, top_k=top_k, block_size=block_size)
        return MoeAlignConfig(num_experts, top_k, block_size, label)

    def reference(  # type: ignore[override]
        self,
        config: MoeAlignConfig,
        topk_ids: torch.Tensor,
        sorted_token_ids: torch.Tensor,
        expert_ids: torch.Tensor,
        num_tokens_post_padded: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if topk_ids.numel() == 0:  # no tokens: nothing launched, nothing written
            return sorted_token_ids, expert_ids, num_tokens_post_padded
        return tuple(result.to(torch.int32) for result in align(config, topk_ids))  # type: ignore[return-value]


spec = MoeAlignSpec()
