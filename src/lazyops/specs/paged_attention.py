"""Causal attention of packed ragged queries over a paged KV cache: prefill, chunked prefill and decode in one call,
as vLLM's ``unified_attention``.

The queries of sequence ``b`` are rows ``cu_seqlens_q[b] : cu_seqlens_q[b + 1]`` of ``query``, and they are its
**last** ``q_len`` tokens: query ``i`` sits at position ``p = seq_lens[b] - q_len + i`` and attends the keys at
positions ``k <= p`` (``p - W < k <= p`` with a sliding window of ``W``), read through the sequence's row of
``block_table`` (key ``k`` is slot ``k % block_size`` of block ``block_table[b, k // block_size]``). The new tokens'
keys and values are already in the cache (``kv_cache_write_tl``). Query head ``h`` reads kv head
``h // (Hq // Hk)``. ``logits = scale * q.k``, or ``softcap * tanh(scale * q.k / softcap)`` with a soft-cap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _arguments as arguments
from lazyops.specs import _checks as checks
from lazyops.specs import _paged as paged
from lazyops.specs._params import Other, Out, Rows


class PagedAttentionKernel(Protocol):
    """What ``paged_attention_tl`` returns (in every backend): the kernel call."""

    def __call__(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        /,
        *,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Causal attention of ``query[T, Hq, D]`` (or ``[T, Hq*D]`` rows, strided: a slice of a packed ``qkv``)
        over ``key_cache[num_blocks, block_size, Hk, D]`` and ``value_cache``, through ``block_table[B, blocks]``
        (int32), ``seq_lens[B]`` (int32, each sequence's length including its new tokens) and
        ``cu_seqlens_q[B + 1]`` (int32: sequence ``b``'s queries are rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]``,
        its last tokens). Returns the output in query's shape, written into ``out`` when given.

        An fp8 cache takes ``k_scale`` and ``v_scale``, one-element float32 tensors (``cache.float() * scale``).
        """
        ...


@dataclass(frozen=True)
class PagedAttentionConfig:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    block_size: int
    max_seq_len: int
    #: the softmax scale, resolved (``1 / sqrt(head_dim)`` by default)
    scale: float
    #: ``W`` keys up to and including the query's own position; 0: no window
    sliding_window: int
    #: the logits' soft-cap; 0.0: none
    softcap: float
    cache_dtype: torch.dtype
    #: check index values on the device too (a synchronising host read on every call)
    validate: bool
    label: str

    @property
    def group(self) -> int:
        """Query heads per kv head."""
        return self.num_heads // self.num_kv_heads


#: The most logits the reference holds at once (float64: 2 GiB).
REFERENCE_LOGITS = 1 << 28


# -- the definition ----------------------------------------------------------------------------------------------
def paged_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    *,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The output in ``query``'s shape and dtype: a plain loop over sequences, each gathering its keys and values
    through its block table row, then ``softmax(logits [masked]) @ v`` per head."""
    _, block_size, kv_heads, head_dim = key_cache.shape
    tokens = int(cu_seqlens_q[-1]) if cu_seqlens_q.numel() else 0
    if not tokens:
        return torch.zeros_like(query)
    rows = query.reshape(tokens, -1, head_dim)
    group = rows.shape[1] // kv_heads
    out = torch.zeros_like(rows)
    starts, lengths = cu_seqlens_q.tolist(), seq_lens.tolist()
    for b, length in enumerate(lengths):
        start, end = starts[b], starts[b + 1]
        if end == start:
            continue
        blocks = block_table[b, : -(-length // block_size)].long()
        keys = gathered(key_cache, blocks, length, k_scale, query.dtype).repeat_interleave(group, dim=1)
        values = gathered(value_cache, blocks, length, v_scale, query.dtype).repeat_interleave(group, dim=1)
        # queries in chunks, so that an engine-sized prefill's logits (heads x queries x keys) stay a few GiB
        chunk = max(1, REFERENCE_LOGITS // (rows.shape[1] * length))
        for first in range(start, end, chunk):
            last = min(end, first + chunk)
            logits = torch.einsum("qhd,khd->hqk", rows[first:last], keys) * scale
            if softcap:
                logits = softcap * torch.tanh(logits / softcap)
            positions = torch.arange(length - (end - first), length - (end - last))[:, None]
            key_positions = torch.arange(length)[None, :]
            allowed = key_positions <= positions
            if sliding_window:
                allowed &= key_positions > positions - sliding_window
            logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
            out[first:last] = torch.einsum("hqk,khd->qhd", torch.softmax(logits, dim=-1), values)
    return out.reshape(query.shape)


def gathered(
    cache: torch.Tensor, blocks: torch.Tensor, length: int, scale: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """A sequence's ``[length, Hk, D]`` keys (or values) from its blocks, in ``dtype``, dequantised by ``scale``."""
    values = cache[blocks].reshape(-1, *cache.shape[2:])[:length].to(dtype)
    return values if scale is None else values * scale.to(dtype).reshape(())


# -- the checks ----------------------------------------------------------------------------------------------------
def check_index_values(
    config: PagedAttentionConfig,
    tokens: int,
    num_blocks: int,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
) -> None:
    """The index values a launch trusts, read on the host: ``cu_seqlens_q`` from 0 up to ``T`` without decreasing,
    ``0 <= q_len <= seq_len <= min(max_seq_len, blocks * block_size)``, and the block ids a sequence uses (its first
    ``ceil(seq_len / block_size)``) within ``[0, num_blocks)``."""
    label = config.label
    # on the host as int64, each in one op (a synchronising copy for a device tensor)
    starts = cu_seqlens_q.detach().to("cpu", torch.int64)
    lengths = seq_lens.detach().to("cpu", torch.int64)
    table = block_table.detach().to("cpu", torch.int64)
    if int(starts[0]) != 0 or int(starts[-1]) != tokens:
        raise KernelInputError(
            f"{label}: cu_seqlens_q runs from {int(starts[0])} to {int(starts[-1])}; it must run from 0 to the query's "
            f"{tokens} tokens (cu_seqlens_q[b]:cu_seqlens_q[b + 1] are sequence b's query rows)"
        )
    query_lens = starts[1:] - starts[:-1]
    for problem, where in (
        ("cu_seqlens_q decreases", query_lens < 0),
        ("a sequence has more queries than tokens (q_len > seq_len)", query_lens > lengths),
        ("seq_lens is longer than the factory's max_seq_len", lengths > config.max_seq_len),
        ("seq_lens is longer than its block_table row holds", lengths > table.shape[1] * config.block_size),
    ):
        if bool(where.any()):
            b = int(where.nonzero()[0, 0])
            raise KernelInputError(
                f"{label}: {problem}: sequence {b} has seq_len {int(lengths[b])}, q_len {int(query_lens[b])} "
                f"(cu_seqlens_q[{b}:{b + 2}] = {starts[b : b + 2].tolist()}), max_seq_len {config.max_seq_len}, "
                f"a block_table row of {table.shape[1]} blocks of {config.block_size}: each sequence's length counts "
                "its new tokens, and its queries are its last q_len tokens"
            )
    used = torch.arange(table.shape[1])[None, :] < ((lengths + config.block_size - 1) // config.block_size)[:, None]
    outside = used & ((table < 0) | (table >= num_blocks))
    if bool(outside.any()):
        b, j = (int(i) for i in outside.nonzero()[0])
        raise KernelInputError(
            f"{label}: block_table[{b}, {j}] = {int(table[b, j])} points outside the cache's {num_blocks} blocks "
            f"(sequence {b} of length {int(lengths[b])} uses its first {int(used[b].sum())} entries); pass block ids "
            "in [0, num_blocks)"
        )


def check_call(
    config: PagedAttentionConfig,
    query: Any,
    key_cache: Any,
    value_cache: Any,
    block_table: Any,
    seq_lens: Any,
    cu_seqlens_q: Any,
    k_scale: Any,
    v_scale: Any,
) -> None:
    """Shapes, dtypes, devices and layouts (no value read), then the index values where they are read."""
    label, heads, kv_heads, head_dim = config.label, config.num_heads, config.num_kv_heads, config.head_dim
    paged.check_head_rows(label, "query", query, heads, head_dim, config.dtype)
    device = query.device
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        paged.check_cache(label, name, cache, config.block_size, kv_heads, head_dim, config.cache_dtype, device)
    if key_cache.shape[0] != value_cache.shape[0]:
        raise KernelInputError(
            f"{label}: key_cache has {key_cache.shape[0]} blocks and value_cache {value_cache.shape[0]}; the two "
            "caches hold the same slots"
        )
    checks.check_kind(label, "block_table", block_table, torch.int32, device)
    if block_table.dim() != 2 or (block_table.shape[1] > 1 and block_table.stride(1) != 1):
        raise KernelInputError(
            f"{label}: block_table has shape {tuple(block_table.shape)} and strides {block_table.stride()}; expected "
            "[B, max_blocks] int32 with contiguous rows"
        )
    batch = block_table.shape[0]
    checks.check_tensor(label, "seq_lens", seq_lens, shape=(batch,), dtype=torch.int32, device=device)
    checks.check_tensor(label, "cu_seqlens_q", cu_seqlens_q, shape=(batch + 1,), dtype=torch.int32, device=device)
    paged.check_scales(label, config.cache_dtype is paged.FP8_DTYPE, k_scale, v_scale, device)
    if paged.reads_values(seq_lens, config.validate):
        tokens = paged.token_count(query, heads, head_dim)
        check_index_values(config, tokens, key_cache.shape[0], block_table, seq_lens, cu_seqlens_q)


# -- the spec ------------------------------------------------------------------------------------------------------
class PagedAttentionSpec(paged.PagedSpec):
    name = "paged_attention_tl"
    kernel_type = PagedAttentionKernel
    # query: [T, Hq, D] or rows [*T, Hq*D] (checked here); the rest checked here too
    params = (
        Rows("query", width=None),
        Other("key_cache"),
        Other("value_cache"),
        Other("block_table"),
        Other("seq_lens"),
        Other("cu_seqlens_q"),
        Other("k_scale", keyword=True),
        Other("v_scale", keyword=True),
    )
    out = Out(like="query")
    head_inputs = (("query", "num_heads"),)
    #: a block table's width is the caller's (any number of entries past what a sequence uses)
    free_widths = ("block_table",)

    def bind(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype | str,
        *,
        block_size: int,
        max_seq_len: int = 32768,
        scale: float | None = None,
        sliding_window: int | None = None,
        softcap: float | None = None,
        cache_dtype: torch.dtype | str | None = None,
        validate: bool = False,
    ) -> PagedAttentionConfig:
        """Causal attention over a paged KV cache for a packed batch of prefill, chunked-prefill and decode queries.

        Returns ``kernel(query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, *, k_scale=None,
        v_scale=None, out=None) -> out``: ``query[T, Hq, D]`` or ``[T, Hq*D]`` (rows may be strided: a slice of a
        packed ``qkv``), caches ``[num_blocks, block_size, Hk, D]`` of ``cache_dtype`` (default ``dtype``, or
        ``torch.float8_e4m3fn`` with one-element float32 ``k_scale``, ``v_scale``), ``block_table[B, max_blocks]``,
        ``seq_lens[B]`` (lengths including the new tokens, already written by ``kv_cache_write_tl``) and
        ``cu_seqlens_q[B + 1]``, all int32. Sequence ``b``'s queries are its last ``q_len`` tokens, causal; ``Hq`` a
        multiple of ``Hk`` (GQA). ``scale`` defaults to ``1/sqrt(head_dim)``; ``sliding_window=W`` attends the ``W``
        keys ending at the query's own; ``softcap=c`` maps logits to ``c * tanh(logits / c)`` (Gemma 2).

        The same call elsewhere (one line each; vLLM and FlashInfer take the window as ``W - 1``)::

            lazyops:    paged_attention_tl(Hq, Hk, D, dtype, block_size=16)(q, k_cache, v_cache, block_table,
                        seq_lens, cu_seqlens_q, out=out)
            vLLM:       unified_attention(q, k_cache, v_cache, out, cu_seqlens_q, max_seqlen_q, seq_lens,
                        max_seqlen_k, scale, True, (W - 1, 0), block_table, softcap, None, k_scale, v_scale)
            FlashInfer: BatchPrefillWithPagedKVCacheWrapper(ws, "NHD").plan(cu_seqlens_q, kv_indptr, kv_indices,
                        kv_last_page_len, Hq, Hk, D, 16, causal=True, window_left=W - 1, logits_soft_cap=c); .run(q,
                        (k_cache, v_cache)) (decode: BatchDecodeWithPagedKVCacheWrapper, the same plan and run)

        ``block_size`` (the cache's) has no default; ``validate`` is ``True`` or ``False``, nothing else.
        ``max_seq_len`` bounds every sequence's length: the GPU backends size the split of long sequences over
        programs (and its float32 workspaces) from it and the call's shapes, never from index values, so a CUDA
        graph captured once replays with any ``seq_lens``, ``block_table`` and ``cu_seqlens_q``. Index values
        (block ids, lengths) are checked where they are read on the host: always for CPU tensors, on a GPU only
        with ``validate=True`` (a synchronising read on every call, off by default). Unchecked, a GPU kernel never
        reads or writes out of bounds: a block id outside the cache or past the table's row is a missing key.
        """
        name = self.name
        num_heads = arguments.positive_int(name, "num_heads", num_heads)
        num_kv_heads = arguments.positive_int(name, "num_kv_heads", num_kv_heads)
        head_dim = arguments.positive_int(name, "head_dim", head_dim)
        dtype = arguments.canonical_dtype(name, dtype)
        block_size = arguments.positive_int(name, "block_size", block_size)
        max_seq_len = arguments.positive_int(name, "max_seq_len", max_seq_len)
        validate = arguments.flag(name, "validate", validate)
        if num_heads % num_kv_heads:
            raise KernelInputError(
                f"{name}: num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; grouped-query "
                "attention shares each kv head among num_heads // num_kv_heads query heads"
            )
        resolved_scale = (
            1.0 / math.sqrt(head_dim) if scale is None else arguments.finite_float(name, "scale", scale, positive=True)
        )
        window = 0 if sliding_window in (None, 0) else arguments.positive_int(name, "sliding_window", sliding_window)
        cap = 0.0 if softcap in (None, 0, 0.0) else arguments.finite_float(name, "softcap", softcap, positive=True)
        stored = paged.cache_dtype(name, cache_dtype, dtype)
        options: dict[str, Any] = {}
        if max_seq_len != 32768:
            options["max_seq_len"] = max_seq_len
        if scale is not None:
            options["scale"] = resolved_scale
        if window:
            options["sliding_window"] = window
        if cap:
            options["softcap"] = cap
        if stored is not dtype:
            options["cache_dtype"] = stored
        if validate:
            options["validate"] = True
        label = arguments.describe(
            name,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            block_size=block_size,
            **options,
        )
        return PagedAttentionConfig(
            num_heads,
            num_kv_heads,
            head_dim,
            dtype,
            block_size,
            max_seq_len,
            resolved_scale,
            window,
            cap,
            stored,
            validate,
            label,
        )

    def check(self, config: PagedAttentionConfig, *args: Any) -> None:
        if len(args) != len(self.inputs):
            raise KernelInputError(
                f"{config.label}: takes {len(self.inputs) - 2} tensors positionally and k_scale=, v_scale= by "
                f"keyword; got {len(args)} arguments"
            )
        check_call(config, *args)

    def plain_predicate(
        self, config: PagedAttentionConfig, *, strided_rows: bool, device_type: str | None
    ) -> Callable[[tuple[Any, ...]], bool]:
        """The engine call: ``query`` ``[T, Hq*D]`` rows with tokens (a slice of a packed ``qkv`` where the launch
        takes strided rows), contiguous caches of the configuration's shape and dtype, int32 ``block_table[B, n]``
        with contiguous rows, ``seq_lens[B]``, ``cu_seqlens_q[B + 1]``, the scales as the cache dtype wants them,
        one device, nothing requiring grad in grad mode; where the index values are read (on the host, or with
        ``validate``), values the checks accept."""
        return plain_attention(config, strided_rows=strided_rows, device_type=device_type)

    def reference(  # type: ignore[override]
        self,
        config: PagedAttentionConfig,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor]:
        return (
            paged_attention_reference(
                query,
                key_cache,
                value_cache,
                block_table,
                seq_lens,
                cu_seqlens_q,
                scale=config.scale,
                sliding_window=config.sliding_window,
                softcap=config.softcap,
                k_scale=None if paged.absent(k_scale) else k_scale,
                v_scale=None if paged.absent(v_scale) else v_scale,
            ),
        )


# -- the fast path -------------------------------------------------------------------------------------------------
def plain_attention(
    config: PagedAttentionConfig, *, strided_rows: bool, device_type: str | None
) -> Callable[[tuple[Any, ...]], bool]:
    tensor = torch.Tensor
    current_device = torch.cuda.current_device
    on_cuda = device_type == "cuda"
    other_kind = device_type if device_type not in (None, "cuda") else None
    is_grad_enabled = torch.is_grad_enabled
    int32, float32 = torch.int32, torch.float32
    width = config.num_heads * config.head_dim
    cache_shape = (config.block_size, config.num_kv_heads, config.head_dim)
    dtype, stored_dtype = config.dtype, config.cache_dtype
    fp8 = stored_dtype is paged.FP8_DTYPE
    validate = config.validate

    def accepts(args: tuple[Any, ...]) -> bool:
        if len(args) != 8:
            return False
        query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, k_scale, v_scale = args
        if type(query) is not tensor or query.dtype is not dtype:
            return False
        sizes = query.shape
        if len(sizes) != 2 or sizes[1] != width or not sizes[0]:
            return False
        tokens = sizes[0]
        if not query.is_contiguous():
            row_step, step = query.stride()
            if not strided_rows or (step != 1 and width > 1) or (tokens > 1 and row_step < width):
                return False
        device = query.device
        if on_cuda:
            if not query.is_cuda or query.get_device() != current_device():
                return False
        elif other_kind is not None and device.type != other_kind:
            return False
        for cache in (key_cache, value_cache):
            if type(cache) is not tensor or cache.dtype is not stored_dtype or cache.dim() != 4:
                return False
            if cache.shape[1:] != cache_shape or not cache.is_contiguous() or cache.device != device:
                return False
        if key_cache.shape[0] != value_cache.shape[0]:
            return False
        if type(block_table) is not tensor or block_table.dtype is not int32 or block_table.dim() != 2:
            return False
        batch = block_table.shape[0]
        if block_table.shape[1] > 1 and block_table.stride(1) != 1:
            return False
        for lengths, count in ((seq_lens, batch), (cu_seqlens_q, batch + 1)):
            if type(lengths) is not tensor or lengths.dtype is not int32 or lengths.shape != (count,):
                return False
            if not lengths.is_contiguous() or lengths.device != device:
                return False
        if block_table.device != device:
            return False
        for scale in (k_scale, v_scale):
            if fp8:
                if type(scale) is not tensor or scale.dtype is not float32 or scale.numel() != 1:
                    return False
                if scale.device != device:
                    return False
            elif not (scale is None or (type(scale) is tensor and scale.dtype is float32 and scale.numel() == 0)):
                return False
        if is_grad_enabled() and (
            query.requires_grad
            or key_cache.requires_grad
            or value_cache.requires_grad
            or (k_scale is not None and k_scale.requires_grad)
            or (v_scale is not None and v_scale.requires_grad)
        ):
            return False
        if seq_lens.is_cpu or (validate and not seq_lens.is_meta):  # where the values are read (no fake tensors)
            try:
                check_index_values(config, tokens, key_cache.shape[0], block_table, seq_lens, cu_seqlens_q)
            except KernelInputError:
                return False
        return True

    return accepts


spec = PagedAttentionSpec()
