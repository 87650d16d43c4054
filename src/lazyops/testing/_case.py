"""One conformance example: a factory's static configuration, the token counts of its calls, and a seed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


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
        return f"{self.kernel}({', '.join(arguments)}) called with M={tokens}{extra}, seed={self.seed}"
