"""One conformance example: a factory's static configuration, the token counts of its calls, and a seed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Layout:
    """How a case lays out the tensors of its calls: the calling conventions an engine uses.

    - ``lead``: the token dimension split into this many leading dimensions (``x[a, M/a, n]``; rope's positions
      ``[a, M/a]``), where ``M`` allows it. 1 is the plain ``[M, n]``.
    - ``row_pad`` and ``offset``: each token-indexed tensor is a view into a wider buffer, starting ``offset``
      elements into each row and followed by ``row_pad`` spare ones, so its rows are strided. The rest of the
      buffer must come back bit-identical.
    - ``packed``: the token-indexed floating tensors are slices of one buffer side by side, as an engine's
      ``qkv`` projection packs query, key and value (a spare "value" slice follows them).
    - ``out``: ``"new"`` (the kernel allocates), ``"given"`` (a preallocated ``out=``, laid out like the inputs),
      or ``"alias"`` (``out=`` is the input the spec allows it to be, written in place).
    """

    lead: int = 1
    row_pad: int = 0
    offset: int = 0
    packed: bool = False
    out: str = "new"

    @property
    def strided(self) -> bool:
        return bool(self.row_pad or self.offset or self.packed)

    def __str__(self) -> str:
        changed = [
            f"{name}={getattr(self, name)!r}"
            for name, default in (("lead", 1), ("row_pad", 0), ("offset", 0), ("packed", False), ("out", "new"))
            if getattr(self, name) != default
        ]
        return ", ".join(changed)


@dataclass(frozen=True)
class Case:
    """What one example of a kernel's conformance check does, in full: rerun it with ``check_case(factory, case)``.

    ``args`` and ``kwargs`` go to the factory (``rmsnorm_tl(*args, **kwargs)``); the kernel it returns is then
    called once per entry of ``tokens`` (the token count ``M`` varies between calls, as in an engine), on inputs
    drawn from ``seed``. ``geometry`` holds what else shapes the inputs (rope's head counts and cache, say).
    """

    kernel: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    tokens: tuple[int, ...] = (1,)
    seed: int = 0
    geometry: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = field(default_factory=Layout)

    @property
    def dtype(self) -> Any:
        """The kernel's dtype: the factory argument that is a ``torch.dtype``."""
        import torch

        return next(arg for arg in self.args if isinstance(arg, torch.dtype))

    def build(self, factory: Callable[..., Any]) -> Callable[..., Any]:
        kernel: Callable[..., Any] = factory(*self.args, **self.kwargs)
        return kernel

    def __str__(self) -> str:
        arguments = [repr(arg) for arg in self.args] + [f"{key}={value!r}" for key, value in self.kwargs.items()]
        extra = "".join(f", {key}={value!r}" for key, value in self.geometry.items())
        tokens = ", ".join(map(str, self.tokens))
        layout = f", layout: {self.layout}" if str(self.layout) else ""
        return f"{self.kernel}({', '.join(arguments)}) called with M={tokens}{extra}, seed={self.seed}{layout}"
