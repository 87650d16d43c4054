"""``rope_tl``'s examples: partial rotary dimensions, any head counts, caches of any length and dtype."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._spec import Example, Traffic
from lazyops.specs.rope import RopeConfig, spec
from lazyops.testing import strategies
from lazyops.testing._case import Case
from lazyops.testing.cases._base import Examples


class RopeExamples(Examples):
    """The geometry beyond the configuration: ``rotary_dim``, ``query_heads``, ``key_heads``, ``cache_rows``,
    ``cache_dtype`` (``"float32"`` or ``"dtype"``, the factory's) and ``positions_dtype``."""

    def cases(self) -> Any:

        @st.composite
        def cases(draw: st.DrawFn) -> Case:
            head_dim = draw(st.sampled_from([2, 6, 64, 80, 128, 256]) | st.integers(2, 160))
            # r even, from 2 up to the whole head: partial rotary (r < head_dim) is where a port forgets the tail.
            whole, quarter = head_dim - head_dim % 2, head_dim // 4 * 2 or 2
            rotary = draw(st.sampled_from([whole, quarter]) | st.integers(1, head_dim // 2).map(lambda h: 2 * h))
            query_heads = draw(st.integers(1, 32))
            geometry = {
                "rotary_dim": rotary,
                "query_heads": query_heads,
                "key_heads": draw(st.integers(1, query_heads)),
                "cache_rows": draw(st.integers(1, 4096)),
                "cache_dtype": draw(st.sampled_from(["float32", "dtype"])),
                "positions_dtype": draw(st.sampled_from([torch.int32, torch.int64])),
            }
            args = (head_dim, draw(strategies.dtypes()))
            kwargs = {"is_neox": draw(st.booleans())}
            return Case(
                self.spec.name, args, kwargs, draw(strategies.token_sequences()), draw(strategies.seeds()), geometry
            )

        return cases()

    def example_inputs(
        self, config: RopeConfig, tokens: int, draw: Any, geometry: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        g = geometry
        cache_dtype = torch.float32 if g["cache_dtype"] == "float32" else config.dtype
        cache = draw.randn(g["cache_rows"], g["rotary_dim"], dtype=cache_dtype)
        positions = draw.randint(g["cache_rows"], tokens, dtype=g["positions_dtype"])
        query = draw.randn(tokens, g["query_heads"] * config.head_dim, dtype=config.dtype)
        key = draw.randn(tokens, g["key_heads"] * config.head_dim, dtype=config.dtype)
        return positions, query, key, cache

    def token_elements(self, config: RopeConfig, geometry: Mapping[str, Any]) -> int:
        return int(geometry["query_heads"] + geometry["key_heads"]) * config.head_dim

    def traffic(self, config: RopeConfig, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        g = geometry
        size = config.dtype.itemsize
        features = (g["query_heads"] + g["key_heads"]) * g["rotary_dim"]
        # the rotated features of query and key read and written, a cache row and a position read per token
        moved = tokens * (2 * features * size + g["rotary_dim"] * 4 + 8)
        return Traffic(bytes=moved)

    def benchmark(self, dtype: torch.dtype) -> Example:
        geometry = {
            "rotary_dim": 128,
            "query_heads": 32,
            "key_heads": 8,
            "cache_rows": 32768,
            "cache_dtype": "float32",
            "positions_dtype": torch.int64,
        }
        return Example((128, dtype), {"is_neox": True}, geometry)


examples = RopeExamples(spec)
