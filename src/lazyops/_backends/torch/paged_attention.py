"""Attention over a paged KV cache in plain PyTorch (the spec: ``lazyops.specs.paged_attention``).

What the CPU runs (the example engine's float32 model among others), so it is vectorised per sequence rather than a
restatement of the reference: a sequence's keys and values are gathered through its block table row with one
``index_select`` each, upcast to float32 (dequantised for an fp8 cache), and its queries attend them in one call
over all heads, grouped-query heads sharing their kv head without a copy:

- without a soft-cap, ``F.scaled_dot_product_attention`` with ``enable_gqa`` (its fused CPU kernel): no mask for a
  decode step, ``is_causal`` for a whole sequence (its top-left causal mask is the bottom-right one when there are
  as many queries as keys), else a boolean mask (``True`` attends) of the causal and window bounds;
- with one (Gemma 2), the logits of each kv head's group in one batched product, capped, masked, a softmax, and
  the product with the values.

A batch of decode steps only (one query per sequence, the engine's common call) takes one call for all its
sequences: each sequence's keys gathered slot by slot up to the longest, the lengths as a mask, and past a
sequence's end its first key again rather than whatever the cache holds there (NaN included: a masked key's weight
of 0 times NaN is NaN).

Lengths and offsets are read on the host to slice per sequence, which on a GPU synchronises (this backend is the
GPU's last fallback; the GPU backends read them in their kernels, and are what a CUDA graph captures). Having read
them, it checks them on every device (on the host the spec's checks have). The output is rounded once, from float32.
On the meta device (an engine tracing shapes) there are no values to read: the call returns its meta output.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from lazyops.specs.paged_attention import FP8_DTYPE, PagedAttentionConfig, spec


@spec.implementation(strided_rows=True, writes_out=True)
def paged_attention_tl(config: PagedAttentionConfig) -> Callable[..., None]:
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    group, block_size = config.group, config.block_size
    scale, window, softcap = config.scale, config.sliding_window, config.softcap
    fp8 = config.cache_dtype is FP8_DTYPE

    def keys_of(
        cache: torch.Tensor, blocks: torch.Tensor, length: int, cache_scale: torch.Tensor | None
    ) -> torch.Tensor:
        """``[Hk, length, D]`` float32 keys (or values) of one sequence."""
        gathered = cache.index_select(0, blocks).view(-1, kv_heads, head_dim)[:length].float()
        if fp8 and cache_scale is not None:
            gathered = gathered * cache_scale.reshape(())
        return gathered.transpose(0, 1)

    def mask_for(queries: int, length: int, device: torch.device) -> torch.Tensor | None:
        """``[queries, length]``, True where a query attends a key; None where every query attends every key."""
        if queries == 1 and not window:
            return None
        positions = torch.arange(length - queries, length, device=device)[:, None]
        keys = torch.arange(length, device=device)[None, :]
        allowed = keys <= positions
        if window:
            allowed &= keys > positions - window
        return allowed

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int) -> torch.Tensor:
        """``q[Hq, queries, D]`` over one sequence's ``k``, ``v`` ``[Hk, length, D]``: ``[Hq, queries, D]``."""
        queries = q.shape[1]
        if not softcap:
            if queries == length and not window:
                return F.scaled_dot_product_attention(q, k, v, is_causal=queries > 1, scale=scale, enable_gqa=True)
            mask = mask_for(queries, length, q.device)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        grouped = q.reshape(kv_heads, group * queries, head_dim)  # the queries of a kv head's group, one batch
        logits = torch.bmm(grouped, k.transpose(1, 2)).mul_(scale / softcap).tanh_().mul_(softcap)
        mask = mask_for(queries, length, q.device)
        if mask is not None:
            logits.view(kv_heads, group, queries, length).masked_fill_(~mask, float("-inf"))
        return torch.bmm(torch.softmax(logits, dim=-1), v).view(heads, queries, head_dim)

    def decode_steps(
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        lengths: list[int],
        k_scale: torch.Tensor | None,
        v_scale: torch.Tensor | None,
    ) -> torch.Tensor:
        """One query per sequence, every sequence at once: ``[B, Hq, D]``."""
        batch = len(lengths)
        span = torch.tensor(lengths, device=query.device)[:, None]
        positions = torch.arange(max(lengths), device=query.device)[None, :]
        inside = positions < span  # [B, keys]
        attended = inside if not window else inside & (positions >= span - window)
        # each sequence's own slots, up to the longest; past its end, its first key again (a real one: a cache's
        # unused slots may hold anything, NaN too, and a masked key's weight of 0 times NaN is NaN)
        positions = torch.where(inside, positions, 0)
        slots = block_table.gather(1, positions // block_size).long() * block_size + positions % block_size

        def gather(cache: torch.Tensor, cache_scale: torch.Tensor | None) -> torch.Tensor:
            values = cache.view(-1, kv_heads, head_dim)[slots].float()  # [B, keys, Hk, D]
            if fp8 and cache_scale is not None:
                values = values * cache_scale.reshape(())
            return values.transpose(1, 2)  # [B, Hk, keys, D]

        q = query.view(batch, heads, 1, head_dim).float()
        k, v = gather(key_cache, k_scale), gather(value_cache, v_scale)
        if not softcap:
            mask = attended[:, None, None, :]
            attended_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
            return attended_out.view(batch, heads, head_dim)
        grouped = q.view(batch, kv_heads, group, head_dim)
        logits = torch.matmul(grouped, k.transpose(2, 3)).mul_(scale / softcap).tanh_().mul_(softcap)
        logits.masked_fill_(~attended[:, None, None, :], float("-inf"))
        return torch.matmul(torch.softmax(logits, dim=-1), v).view(batch, heads, head_dim)

    def attention(
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        k_scale: torch.Tensor | None,
        v_scale: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        if seq_lens.is_meta:  # shapes only (an engine tracing on the meta device): out is already the output
            return
        tokens = query.shape[0]
        # the spec's checks read them already on the host or with validate (a kernel never sees fake tensors); this
        # route reads them anyway, to loop over the sequences, so it checks them first
        if not (seq_lens.is_cpu or config.validate):
            spec.check_values(config, query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q)
        starts, lengths = cu_seqlens_q.tolist(), seq_lens.tolist()
        rows = out.view(tokens, heads, head_dim)
        if len(lengths) > 1 and tokens == len(lengths) and starts == list(range(tokens + 1)):
            rows.copy_(decode_steps(query, key_cache, value_cache, block_table, lengths, k_scale, v_scale))
            return
        for b, length in enumerate(lengths):
            start, end = starts[b], starts[b + 1]
            if end == start:
                continue
            blocks = block_table[b, : -(-length // block_size)]
            k = keys_of(key_cache, blocks, length, k_scale)
            v = keys_of(value_cache, blocks, length, v_scale)
            q = query[start:end].view(end - start, heads, head_dim).float().transpose(0, 1)
            rows[start:end] = attend(q, k, v, length).transpose(0, 1)

    return attention
