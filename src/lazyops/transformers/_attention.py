"""lazyops' paged attention as a Hugging Face attention implementation (``AttentionInterface``): ``"lazyops"`` for
the regular caches, ``"paged|lazyops"`` for continuous batching where transformers asks for a ``paged|`` variant.

Hugging Face hands an attention function the keys it keeps, in one of three shapes, and each is laid out for
``paged_attention_tl`` without changing a number:

- **a regular cache** (``DynamicCache``, ``StaticCache``): ``key[B, Hk, L, D]``, the queries its last tokens. The
  keys are copied into ``[B * L/16, 16, Hk, D]`` blocks (the one copy; a block table of ``arange``). Padding
  (a 2D mask as flash attention's, or a 4D mask as SDPA's and eager's) is read on the device, without a host
  synchronisation, so a compiled graph stays whole: each row's valid keys and queries are moved to its front
  (a stable sort), the padded queries become a sequence of their own whose output is discarded.
- **continuous batching, transformers 5.17** (``paged|lazyops``): the ``PagedAttentionCache`` comes in the
  keyword arguments and this function writes and reads it through ``cache.update``, as transformers' ``paged|eager``.
- **continuous batching, later versions**: the attention module has already written and read the cache.

Both batching forms give the keys of every sequence one after another, ``cu_seq_lens_k`` apart: they are a paged
cache of one token a block, read through a table of consecutive slots.
"""

from __future__ import annotations

from typing import Any

import torch

import lazyops

NAME = "lazyops"
PAGED_NAME = "paged|lazyops"
#: The block of the regular caches' layout (vLLM's default); continuous batching's keys are read one a block.
BLOCK = 16
#: Built kernels by configuration: every attention module of one shape shares one.
_KERNELS: dict[tuple[Any, ...], Any] = {}


def configuration(module: Any, dtype: torch.dtype, block_size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``paged_attention_tl``'s arguments for ``module`` (a Hugging Face attention module) at ``dtype``."""
    config = module.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    window = getattr(module, "sliding_window", None)
    if window is None and type(module).__name__.startswith(("Mistral", "Qwen2")):  # read from the config at call
        window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    options = {
        "block_size": block_size,
        "max_seq_len": max(int(getattr(config, "max_position_embeddings", 0) or 0), 32768),
        "scale": float(module.scaling),
        "sliding_window": window or None,
        "softcap": getattr(module, "attn_logit_softcapping", None) or None,
    }
    return (heads, kv_heads, module.head_dim, dtype), options


def kernel(module: Any, dtype: torch.dtype, block_size: int, window: Any, softcap: Any, scale: Any) -> Any:
    """The kernel of ``module``'s configuration, built once; the call's ``sliding_window``, ``softcap`` and
    ``scaling`` (what the model passes) win over the module's attributes."""
    args, options = configuration(module, dtype, block_size)
    options.update(sliding_window=window or None, softcap=softcap or None)
    if scale is not None:
        options["scale"] = float(scale)
    key = (*args, *sorted(options.items()))
    built = _KERNELS.get(key)
    if built is None:
        built = _KERNELS[key] = lazyops.paged_attention_tl(*args, **options)
    return built


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``AttentionInterface``'s call: ``query[B, Hq, S, D]``, ``key``/``value`` ``[B, Hk, L, D]`` (or what continuous
    batching passes) → ``(out[B, S, Hq, D], None)``: attention weights are never materialised."""
    batch, heads, tokens, head_dim = query.shape
    window, softcap = kwargs.get("sliding_window"), kwargs.get("softcap")
    cache = kwargs.get("cache")
    if cache is not None:  # transformers 5.17's paged|<name>: the attention function writes and reads the cache
        key, value = cache.update(
            key_states=key,
            value_states=value,
            layer_idx=module.layer_idx,
            read_index=kwargs["read_index"],
            write_index=kwargs["write_index"],
        )
    elif kwargs.get("cu_seq_lens_k") is not None:  # later versions: the module wrote and read it
        key, value = (x.squeeze(0).transpose(0, 1) for x in (key, value))
    if kwargs.get("cu_seq_lens_k") is not None:
        attend = kernel(module, query.dtype, 1, window, softcap, scaling)
        rows = query.transpose(1, 2).reshape(batch * tokens, heads, head_dim)
        out = _packed(attend, rows, key, value, module, kwargs)
    else:
        attend = kernel(module, query.dtype, BLOCK, window, softcap, scaling)
        out = _batched(attend, query, key, value, attention_mask)
    return out.view(batch, tokens, heads, head_dim), None


def _per_layer(value: Any, module: Any) -> Any:
    """Continuous batching's per-layer-type values (a dict where the model mixes sliding and full layers)."""
    if not isinstance(value, dict):
        return value
    types = getattr(module.config, "layer_types", None)
    return value[types[module.layer_idx]] if types else next(iter(value.values()))


def _packed(attend: Any, rows: torch.Tensor, key: torch.Tensor, value: torch.Tensor, module: Any, kwargs: Any) -> Any:
    """Continuous batching: ``rows[T, Hq, D]``, each sequence's keys ``key[Lk, Hk, D]`` one after another."""
    device, int32 = rows.device, torch.int32
    starts_q = kwargs["cu_seq_lens_q"].to(int32)
    starts_k = _per_layer(kwargs["cu_seq_lens_k"], module).to(int32)
    width = _per_layer(kwargs.get("max_length_k", kwargs.get("max_seqlen_k")), module)
    tokens = rows.shape[0]
    count = starts_k.numel() - 1
    # Rows past the last sequence (a CUDA graph's padding) form one more sequence over the first key: computed, unused.
    spare = (tokens - starts_q[-1:]).to(int32)
    starts_q = torch.cat([starts_q, starts_q.new_full((1,), tokens)])
    seq_lens = torch.cat([starts_k[1:] - starts_k[:-1], spare])
    width = max(int(width or 1), tokens, 1)
    table = starts_k[:-1, None] + torch.arange(width, device=device, dtype=int32)
    table = torch.cat([table, table.new_zeros((1, width))]).clamp_(max=max(key.shape[0] - 1, 0))
    k_cache, v_cache = (x.contiguous().unsqueeze(1) for x in (key, value))
    return attend(rows, k_cache, v_cache, table[: count + 1].contiguous(), seq_lens, starts_q)


def _batched(
    attend: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """A regular cache: ``query[B, Hq, S, D]`` the last ``S`` of ``key[B, Hk, L, D]``; ``mask`` marks padding."""
    batch, heads, tokens, head_dim = query.shape
    length, kv_heads = key.shape[2], key.shape[1]
    blocks, device, int32 = -(-length // BLOCK), query.device, torch.int32
    q_rows, k_rows, v_rows = (x.transpose(1, 2) for x in (query, key, value))
    table = torch.arange(batch * blocks, device=device, dtype=int32).view(batch, blocks)
    if mask is not None:
        valid_keys, valid_queries = _valid(mask, batch, tokens, length)
        key_order = torch.argsort((~valid_keys).to(torch.int8), dim=1, stable=True)
        query_order = torch.argsort((~valid_queries).to(torch.int8), dim=1, stable=True)
        k_rows, v_rows = (torch.take_along_dim(x, key_order[:, :, None, None], dim=1) for x in (k_rows, v_rows))
        q_rows = torch.take_along_dim(q_rows, query_order[:, :, None, None], dim=1)
    k_cache, v_cache = (key.new_empty((batch, blocks * BLOCK, kv_heads, head_dim)) for _ in range(2))
    k_cache[:, :length] = k_rows
    v_cache[:, :length] = v_rows
    k_cache, v_cache = (x.view(batch * blocks, BLOCK, kv_heads, head_dim) for x in (k_cache, v_cache))
    q_rows = q_rows.reshape(batch * tokens, heads, head_dim)
    if mask is None:
        seq_lens = torch.full((batch,), length, device=device, dtype=int32)
        starts = torch.arange(0, batch * tokens + 1, tokens, device=device, dtype=int32)
        return attend(q_rows, k_cache, v_cache, table, seq_lens, starts)  # type: ignore[no-any-return]
    # Each row is two sequences: its valid queries over its valid keys, then its padded queries over as many keys
    # (so that every query has a key), whose output is dropped.
    new, keys = valid_queries.sum(1, dtype=int32), valid_keys.sum(1, dtype=int32)
    first = torch.arange(0, batch * tokens, tokens, device=device, dtype=int32)
    starts = torch.cat([torch.stack([first, first + new], 1).flatten(), first.new_full((1,), batch * tokens)])
    seq_lens = torch.stack([keys, tokens - new], 1).flatten()
    out = attend(q_rows, k_cache, v_cache, table.repeat_interleave(2, dim=0), seq_lens, starts)
    out = out.view(batch, tokens, heads, head_dim)
    order = query_order[:, :, None, None].expand_as(out)
    restored = torch.empty_like(out).scatter_(1, order, out)
    return torch.where(valid_queries[:, :, None, None], restored, 0.0)


def _valid(mask: torch.Tensor, batch: int, tokens: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(valid keys [B, L], valid queries [B, S])`` from flash attention's 2D padding mask (the first keys, as a
    ``StaticCache`` gives it) or an SDPA / eager 4D mask (a key is valid where a query sees it)."""
    if mask.dim() == 2:
        seen = mask[:, -length:].bool()
        keys = torch.zeros((batch, length), dtype=torch.bool, device=mask.device)
        keys[:, : seen.shape[1]] = seen
        return keys, seen[:, -tokens:]
    if mask.dim() == 4:
        sees = (mask if mask.dtype == torch.bool else mask == 0)[:, 0, -tokens:, -length:]
        sees = sees.expand(batch, tokens, length)
        return sees.any(1), sees.any(2)
    raise ValueError(
        f"lazyops attention: an attention mask of shape {tuple(mask.shape)} is neither a [batch, keys] padding mask "
        "nor a [batch, 1, queries, keys] one; pass the 2D attention_mask that tokenizers return"
    )


def register() -> None:
    """``attn_implementation="lazyops"`` (and ``"paged|lazyops"``) in transformers' ``AttentionInterface``, with
    flash attention's mask function (a 2D padding mask, or None). Idempotent."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    from transformers import AttentionInterface

    for name in (NAME, PAGED_NAME):
        AttentionInterface.register(name, attention_forward)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, flash_attention_mask)
