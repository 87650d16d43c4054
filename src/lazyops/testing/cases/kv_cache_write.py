"""``kv_cache_write_tl``'s examples: head counts and dims, block sizes, the fp8 cache, spare blocks and padding
tokens (negative slots)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.kv_cache_write import KVCacheWriteConfig, spec
from lazyops.specs.paged_attention import FP8_DTYPE
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Examples


# -- the conformance cases --------------------------------------------------------------------------------------
def write_cases(kernel: str) -> Any:
    """Head counts and dims (64, 128, 256 and small odd ones), block sizes 16 and others (1, 8, 32, odd), the fp8
    cache, spare blocks, and padding tokens (negative slots) among the written ones; several calls per case, zero
    tokens included."""

    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        heads = draw(st.sampled_from([1, 2, 8]) | st.integers(1, 4))
        head_dim = draw(st.sampled_from([64, 128, 256]) | st.sampled_from([1, 3, 8, 17, 40]))
        block_size = draw(st.sampled_from([16, 1, 8, 32]) | st.integers(2, 5))
        fp8 = draw(st.sampled_from([False, False, False, True]))
        kwargs: dict[str, Any] = {"block_size": block_size}
        if fp8:
            kwargs["cache_dtype"] = FP8_DTYPE
        geometry = {"spare_blocks": draw(st.integers(0, 3)), "padding": draw(st.sampled_from([0, 0, 1, 3]))}
        tokens = draw(strategies.token_sequences(max_tokens=40))
        return Case(
            kernel, (heads, head_dim, draw(strategies.dtypes())), kwargs, tokens, draw(strategies.seeds()), geometry
        )

    return cases()


def draw_scales(draw: Any, fp8: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One-element float32 scales from 2**-6 to 4 for an fp8 cache (values of a few units then spread over e4m3's
    range: some saturate at 448, some reach its subnormals); empty tensors (absent) otherwise."""
    if not fp8:
        empty = torch.empty(0, dtype=torch.float32, device=draw.device)
        return empty, empty.clone()
    octaves = (2 * draw.randn(2, dtype=torch.float32, device="cpu") - 1).clamp(-6, 2)
    scales = torch.exp2(octaves).to(draw.device)
    return scales[:1].clone(), scales[1:].clone()


def write_inputs(
    config: KVCacheWriteConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
) -> tuple[torch.Tensor, ...]:
    """Keys and values of ``tokens`` tokens, caches of random contents with room for them plus
    ``geometry["spare_blocks"]``, distinct slots in random order, ``geometry["padding"]`` tokens (at most; any of
    them) padding (slot -1)."""
    heads, head_dim, block_size = config.num_kv_heads, config.head_dim, config.block_size
    blocks = max(1, -(-tokens // block_size)) + int(geometry.get("spare_blocks", 0))
    fp8 = config.cache_dtype is FP8_DTYPE

    def cache() -> torch.Tensor:
        drawn: torch.Tensor = draw.randn(blocks, block_size, heads, head_dim, dtype=config.cache_dtype)
        return drawn

    key_cache, value_cache = cache(), cache()
    order = torch.randperm(blocks * block_size, generator=draw.generator)[:tokens]
    padding = min(tokens, int(geometry.get("padding", 0)))
    if padding:
        order[torch.randperm(tokens, generator=draw.generator)[:padding]] = -1
    slot_mapping = order.to(torch.int64).to(draw.device)
    key = draw.randn(tokens, heads * head_dim, dtype=config.dtype, scale=2.0)
    value = draw.randn(tokens, heads * head_dim, dtype=config.dtype, scale=2.0)
    k_scale, v_scale = draw_scales(draw, fp8)
    return key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale


class KVCacheWriteExamples(Examples):
    def cases(self) -> Any:
        return write_cases(self.spec.name)

    def example_inputs(
        self, config: KVCacheWriteConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return write_inputs(config, tokens, draw, geometry)

    def token_elements(self, config: KVCacheWriteConfig, geometry: Mapping[str, Any]) -> int:
        # key and value, and the cache slots they land in (a cache holds at least the tokens' slots)
        return 2 * config.num_kv_heads * config.head_dim

    def traffic(self, config: KVCacheWriteConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        features = 2 * tokens * config.num_kv_heads * config.head_dim  # keys and values
        moved = features * (config.dtype.itemsize + config.cache_dtype.itemsize) + 8 * tokens  # and the slots
        return Traffic(bytes=moved)

    def benchmark(self, dtype: torch.dtype) -> Example:
        """Llama-3-8B's keys and values (8 heads of 128) into a cache of 16-token blocks, vLLM's default."""
        return Example((8, 128, dtype), {"block_size": 16}, {"spare_blocks": 0, "padding": 0})


examples = KVCacheWriteExamples(spec)
