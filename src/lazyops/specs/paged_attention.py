"""The contract of ``paged_attention_tl``; first, the paged KV cache it reads and ``kv_cache_write_tl`` writes."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lazyops._errors import KernelInputError
from lazyops.specs import _params
from lazyops.specs._params import Out, Tensor, head_rows
from lazyops.specs._spec import KernelSpec

#: The fp8 cache's dtype and its largest finite value (stored values saturate there), and the names ``cache_dtype``
#: accepts for it besides ``torch.float8_e4m3fn``.
FP8_DTYPE, FP8_MAX = torch.float8_e4m3fn, 448.0
FP8_NAMES = ("float8_e4m3fn", "fp8", "fp8_e4m3")


def cache_dtype_of(factory: str, value: Any, dtype: torch.dtype) -> torch.dtype:
    """The factory's ``cache_dtype``: ``dtype`` when None, else ``dtype`` itself or ``torch.float8_e4m3fn``."""
    if value is FP8_DTYPE or (isinstance(value, str) and value.lower().removeprefix("torch.") in FP8_NAMES):
        return FP8_DTYPE
    with contextlib.suppress(KernelInputError):  # a dtype the kernels do not take: refused below, as the cache's
        if value is None or _params.canonical_dtype(factory, value) is dtype:
            return dtype
    raise KernelInputError(
        f"{factory}: cache_dtype={value!r}; the cache holds the factory's dtype ({dtype}, cache_dtype=None) or "
        "torch.float8_e4m3fn (with k_scale and v_scale at every call)"
    )


def caches(*, mutated: bool = False) -> tuple[Tensor, ...]:
    """``key_cache`` and ``value_cache``: ``[N, block_size, num_kv_heads, head_dim]`` of the cache dtype, dense, the
    same number of blocks ``N``: vLLM's flash layout ("NHD"), a token's slot ``block * block_size + offset``."""
    shape = ("N", "block_size", "num_kv_heads", "head_dim")
    return tuple(Tensor(name, shape, "cache_dtype", mutated=mutated) for name in ("key_cache", "value_cache"))


_SCALES_WHY = (
    "an fp8 cache needs k_scale and v_scale, one-element float32 tensors (its dequantisation scales: cache = "
    "fp8(x / scale)); scales apply to an fp8 cache only (cache_dtype=torch.float8_e4m3fn)"
)
#: ``k_scale=``, ``v_scale=``: given with an fp8 cache, left out otherwise (None, or empty: ``Tensor``'s ``keyword``).
SCALES = tuple(
    Tensor(name, (1,), torch.float32, keyword=True, present=lambda c: c.cache_dtype is FP8_DTYPE, why=_SCALES_WHY)
    for name in ("k_scale", "v_scale")
)


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
        """Causal attention over a paged KV cache, into ``out`` when given; see ``help(lazyops.paged_attention_tl)``."""


@dataclass(frozen=True)
class PagedAttentionConfig:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    block_size: int
    max_seq_len: int
    scale: float  #: the softmax scale, resolved (``1 / sqrt(head_dim)`` by default)
    sliding_window: int  #: ``W`` keys up to and including the query's own position; 0: no window
    softcap: float  #: the logits' soft-cap; 0.0: none
    cache_dtype: torch.dtype
    validate: bool  #: check index values on the device too (a synchronising host read on every call)
    label: str

    @property
    def group(self) -> int:  # query heads per kv head
        return self.num_heads // self.num_kv_heads


class PagedAttentionSpec(KernelSpec):
    name = "paged_attention_tl"
    kernel_type = PagedAttentionKernel
    params = (
        head_rows("query", "num_heads"),
        *caches(),
        Tensor("block_table", ("B", None), torch.int32, layout="rows"),
        Tensor("seq_lens", ("B",), torch.int32),
        Tensor("cu_seqlens_q", ("B+1",), torch.int32),
        *SCALES,
    )
    out = Out(like="query")

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
        v_scale=None, out=None) -> out``, in query's shape: ``query[T, Hq, D]`` or ``[T, Hq*D]`` (strided rows: a slice
        of a packed ``qkv``); caches ``[num_blocks, block_size, Hk, D]`` of ``cache_dtype`` (default ``dtype``, or
        ``torch.float8_e4m3fn`` with one-element float32 ``k_scale``, ``v_scale``: ``cache.float() * scale``); int32
        ``block_table[B, max_blocks]``, ``seq_lens[B]`` (lengths counting the new tokens, already written by
        ``kv_cache_write_tl``) and ``cu_seqlens_q[B + 1]``. Sequence ``b``'s queries, rows ``cu_seqlens_q[b] :
        cu_seqlens_q[b + 1]``, are its last ``q_len`` tokens, causal; query head ``h`` reads kv head ``h // (Hq // Hk)``
        (GQA: ``Hq`` a multiple of ``Hk``). ``scale`` defaults to ``1/sqrt(head_dim)``; ``sliding_window=W`` attends
        the ``W`` keys ending at the query's own; ``softcap=c`` maps logits to ``c * tanh(logits / c)`` (Gemma 2).

        The same call elsewhere (one line each; vLLM and FlashInfer take the window as ``W - 1``)::

            lazyops:    paged_attention_tl(Hq, Hk, D, dtype, block_size=16)(q, k_cache, v_cache, block_table,
                        seq_lens, cu_seqlens_q, out=out)
            vLLM:       unified_attention(q, k_cache, v_cache, out, cu_seqlens_q, max_seqlen_q, seq_lens,
                        max_seqlen_k, scale, True, (W - 1, 0), block_table, softcap, None, k_scale, v_scale)
            FlashInfer: BatchPrefillWithPagedKVCacheWrapper(ws, "NHD").plan(cu_seqlens_q, kv_indptr, kv_indices,
                        kv_last_page_len, Hq, Hk, D, 16, causal=True, window_left=W - 1, logits_soft_cap=c); .run(q,
                        (k_cache, v_cache)) (decode: BatchDecodeWithPagedKVCacheWrapper, the same plan and run)

        ``max_seq_len`` bounds every sequence's length: the GPU backends size the split of long sequences over programs
        (and its float32 workspaces) from it and the call's shapes, never from index values, and read the scales at
        every launch, so a CUDA graph captured once replays with any ``seq_lens``, ``block_table``, ``cu_seqlens_q``
        and scales. Index values are checked on the host: always for CPU tensors, on a GPU only with ``validate=True``
        (``True`` or ``False``, nothing else; a synchronising read on every call). Unchecked, a GPU kernel never reads
        or writes out of bounds: a block id outside the cache or past the table's row is a missing key.
        """
        name, given_scale = self.name, scale
        num_heads = _params.positive_int(name, "num_heads", num_heads)
        num_kv_heads = _params.positive_int(name, "num_kv_heads", num_kv_heads)
        head_dim = _params.positive_int(name, "head_dim", head_dim)
        dtype = _params.canonical_dtype(name, dtype)
        block_size = _params.positive_int(name, "block_size", block_size)
        max_seq_len = _params.positive_int(name, "max_seq_len", max_seq_len)
        validate = _params.flag(name, "validate", validate)
        if num_heads % num_kv_heads:
            raise KernelInputError(
                f"{name}: num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; grouped-query "
                "attention shares each kv head among num_heads // num_kv_heads query heads"
            )
        scale = _params.finite_float(name, "scale", scale, positive=True, default=1.0 / math.sqrt(head_dim))
        window = 0 if sliding_window in (None, 0) else _params.positive_int(name, "sliding_window", sliding_window)
        cap = 0.0 if softcap in (None, 0, 0.0) else _params.finite_float(name, "softcap", softcap, positive=True)
        held = cache_dtype_of(name, cache_dtype, dtype)  # the cache's dtype
        # the label: every size, and each option the call set
        shown: dict[str, Any] = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
        shown |= {"dtype": dtype, "block_size": block_size, "max_seq_len": max_seq_len != 32768 and max_seq_len}
        shown |= {"scale": given_scale is not None and scale, "sliding_window": window, "softcap": cap}
        shown |= {"cache_dtype": held is not dtype and held, "validate": validate}
        label = _params.describe(name, **{field: value for field, value in shown.items() if value})
        return PagedAttentionConfig(
            num_heads, num_kv_heads, head_dim, dtype, block_size, max_seq_len, scale, window, cap, held, validate, label
        )

    def check_values(self, config: PagedAttentionConfig, *args: Any) -> None:
        """The index values a launch trusts: ``cu_seqlens_q`` from 0 to ``T``, not decreasing; ``q_len <= seq_len <=
        min(max_seq_len, blocks * block_size)``; the block ids a sequence uses within ``[0, num_blocks)``."""
        query, key_cache, _, block_table, seq_lens, cu_seqlens_q, *_ = args
        label, block_size = config.label, config.block_size
        tokens = query.numel() // (config.num_heads * config.head_dim)
        # on the host as int64, each in one op (a synchronising copy for a device tensor)
        starts = cu_seqlens_q.detach().to("cpu", torch.int64)
        lengths = seq_lens.detach().to("cpu", torch.int64)
        table = block_table.detach().to("cpu", torch.int64)
        if int(starts[0]) != 0 or int(starts[-1]) != tokens:
            raise KernelInputError(
                f"{label}: cu_seqlens_q runs from {int(starts[0])} to {int(starts[-1])}; it must run from 0 to the "
                f"query's {tokens} tokens (cu_seqlens_q[b]:cu_seqlens_q[b + 1] are sequence b's query rows)"
            )
        query_lens = starts[1:] - starts[:-1]
        for problem, where in (
            ("cu_seqlens_q decreases", query_lens < 0),
            ("a sequence has more queries than tokens (q_len > seq_len)", query_lens > lengths),
            ("seq_lens is longer than the factory's max_seq_len", lengths > config.max_seq_len),
            ("seq_lens is longer than its block_table row holds", lengths > table.shape[1] * block_size),
        ):
            if bool(where.any()):
                b = int(where.nonzero()[0, 0])
                raise KernelInputError(
                    f"{label}: {problem}: sequence {b} has seq_len {int(lengths[b])}, q_len {int(query_lens[b])} "
                    f"(cu_seqlens_q[{b}:{b + 2}] = {starts[b : b + 2].tolist()}), max_seq_len {config.max_seq_len}, a "
                    f"block_table row of {table.shape[1]} blocks of {block_size}: each sequence's length counts its "
                    "new tokens, and its queries are its last q_len tokens"
                )
        used = torch.arange(table.shape[1])[None, :] < ((lengths + block_size - 1) // block_size)[:, None]
        outside = used & ((table < 0) | (table >= key_cache.shape[0]))
        if bool(outside.any()):
            b, j = (int(i) for i in outside.nonzero()[0])
            raise KernelInputError(
                f"{label}: block_table[{b}, {j}] = {int(table[b, j])} points outside the cache's {key_cache.shape[0]} "
                f"blocks (sequence {b} of length {int(lengths[b])} uses its first {int(used[b].sum())} entries); pass "
                "block ids in [0, num_blocks)"
            )

    def reference(self, config: PagedAttentionConfig, *args: torch.Tensor) -> tuple[torch.Tensor]:
        """The output in ``query``'s shape and dtype: per sequence, ``softmax(logits [masked]) @ v`` for each head."""
        query, key_cache, value_cache, block_table, seq_lens, cu_seqlens_q, *scales = args
        # an fp8 cache's dequantisation scales; absent (None, or empty): 1
        k_scale, v_scale = (1 if s is None or not s.numel() else s.to(query.dtype) for s in (*scales, None, None)[:2])
        rows = query.reshape(-1, config.num_heads, config.head_dim)
        out = torch.zeros_like(rows)
        starts = cu_seqlens_q.tolist()
        for b, (start, end, length) in enumerate(zip(starts[:-1], starts[1:], seq_lens.tolist(), strict=True)):
            if end == start:
                continue
            # its keys and values [length, Hq, D] (key k: slot k % block_size of block block_table[b, k // block_size])
            blocks = block_table[b, : -(-length // config.block_size)].long()
            keys, values = (
                (cache[blocks].flatten(0, 1)[:length].to(query.dtype) * scale).repeat_interleave(config.group, dim=1)
                for cache, scale in ((key_cache, k_scale), (value_cache, v_scale))
            )
            # queries in chunks of at most 2**28 logits (float64: 2 GiB): an engine-sized prefill's would not fit
            chunk = max(1, (1 << 28) // (rows.shape[1] * length))
            for first in range(start, end, chunk):
                last = min(end, first + chunk)
                logits = torch.einsum("qhd,khd->hqk", rows[first:last], keys) * config.scale
                if config.softcap:
                    logits = config.softcap * torch.tanh(logits / config.softcap)
                # row r sits at p = length - (end - r) and attends the keys k with 0 <= p - k < W (no window: k <= p)
                distance = torch.arange(length - (end - first), length - (end - last))[:, None] - torch.arange(length)
                allowed = (distance >= 0) & (distance < (config.sliding_window or length))
                logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
                out[first:last] = torch.einsum("hqk,khd->qhd", torch.softmax(logits, dim=-1), values)
        return (out.reshape(query.shape),)


spec = PagedAttentionSpec()
