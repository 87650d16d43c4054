"""``Examples``: what the conformance kit, the benchmarks and the tools draw and count for one kernel, beside its
contract (``lazyops.specs.<kernel>``), which never imports this package.

A kernel's examples module (``lazyops.testing.cases.<kernel>``) gives an ``examples`` object: the hypothesis
strategy of whole conformance cases (:meth:`Examples.cases`), the engine-sized configuration benchmarks time
(:meth:`Examples.benchmark`), and, for a ``Tensor`` parameter whose values the declarations do not say (scales,
index tensors), how it is drawn and counted. The inputs of one call (:meth:`Examples.example_inputs`), the token
budget (:meth:`Examples.token_elements`) and the bytes one call moves (:meth:`Examples.traffic`) follow from the
declarations; a kernel whose parameters are more than rows and fixed tensors (rope, attention) overrides them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from lazyops.specs._params import Fixed, Param, Rows, dtype_of, size_of
from lazyops.specs._spec import Example, KernelSpec, Traffic

if TYPE_CHECKING:
    import torch
    from hypothesis import strategies as st

    from lazyops.testing._case import Case
    from lazyops.testing._compare import Inputs

#: ``draw(inputs, config, tokens, geometry)``: one parameter's example value, where standard normal values would
#: not test the kernel (masked logits, off-centre rows)
Draw = Callable[[Any, Any, int, Any], Any]


class Examples:
    """The examples of one kernel; a kernel's module writes :meth:`cases` and :meth:`benchmark`, and ``draws`` (a
    parameter's drawing by name) where normal values would not test it."""

    #: a parameter's example values by name, where standard normal values would not do
    draws: ClassVar[Mapping[str, Draw]] = {}

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec

    def __repr__(self) -> str:
        return f"<examples of {self.spec.name}>"

    # -- what a kernel's examples module writes -------------------------------------------------------------------
    def cases(self) -> st.SearchStrategy[Case]:
        """Hypothesis strategy of whole conformance examples."""
        raise NotImplementedError

    def benchmark(self, dtype: torch.dtype) -> Example:
        """The engine-sized configuration benchmarks time (hidden 4096, Llama-shaped heads)."""
        raise NotImplementedError

    def draw_other(self, config: Any, param: Param, tokens: int, draw: Inputs, geometry: Mapping[str, Any]) -> Any:
        """:meth:`example_inputs`' value of a ``Tensor`` parameter (drawn in the parameters' order)."""
        raise NotImplementedError(f"{self!r}: {param!r} is drawn by the kernel's examples")

    def other_bytes(self, config: Any, param: Param, tokens: int) -> int:
        """:meth:`traffic`'s bytes of a ``Tensor`` parameter."""
        raise NotImplementedError(f"{self!r}: {param!r} is counted by the kernel's examples")

    # -- derived from the spec's declarations ---------------------------------------------------------------------
    def example_inputs(self, config: Any, tokens: int, draw: Inputs, geometry: Mapping[str, Any]) -> tuple[Any, ...]:
        """The call's arguments for ``tokens`` tokens, drawn with ``draw`` (seeded: reproducible)."""
        drawn: list[Any] = []
        for param in self.spec.params:
            custom = self.draws.get(param.name)
            if custom is not None:
                drawn.append(custom(draw, config, tokens, geometry))
                continue
            dtype = dtype_of(getattr(param, "dtype", None), config)
            if isinstance(param, Rows):
                width = size_of(param.width, config)
                drawn.append(draw.randn(tokens, width, dtype=dtype, scale=param.scale))
            elif isinstance(param, Fixed):
                drawn.append(draw.randn(*(size_of(size, config) for size in param.shape), dtype=dtype))
            else:
                drawn.append(self.draw_other(config, param, tokens, draw, geometry))
        return tuple(drawn)

    def token_elements(self, config: Any, geometry: Mapping[str, Any]) -> int:
        """Elements of the widest per-token input: the kit cuts the token count so that inputs stay small."""
        params = self.spec.params
        return max((size_of(param.width, config) for param in params if isinstance(param, Rows)), default=1)

    def traffic(self, config: Any, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        """Bytes one call must move: each input read once, each input updated in place written once more, the
        output written once."""
        spec = self.spec
        moved = 0
        widths: dict[str, int] = {}
        for param in spec.params:
            if isinstance(param, Rows):
                widths[param.name] = size_of(param.width, config)
                itemsize = dtype_of(param.dtype, config).itemsize
                moved += tokens * widths[param.name] * itemsize * (2 if param.mutated else 1)
            elif isinstance(param, Fixed):
                itemsize = dtype_of(param.dtype, config).itemsize
                moved += math.prod(size_of(size, config) for size in param.shape) * itemsize
            else:
                moved += self.other_bytes(config, param, tokens)
        width = spec.out_width(config)
        if width is None and spec.out is not None and spec.out.like is not None:
            width = widths[spec.out.like]
        if width is not None:
            moved += tokens * width * spec.out_dtype(config).itemsize
        return Traffic(bytes=moved)
