"""The one wrapper a resolved factory may get: a notice on first call, a trace line on construction.

Without tracing, and for every kernel that came from where the user asked, the namespace hands out the backend's
own object unwrapped (``lazyops.softmax_tl is backend.softmax_tl``), so there is no cost and no surprise. Only
inherited kernels (which must announce themselves) and traced ones are wrapped, and the wrapper forwards every
attribute, ``__doc__``, ``__wrapped__`` and the signature included, so tools and users see the real factory.

A wrapper is an artefact of this process's configuration, so it is never what crosses a process boundary: it
pickles as the factory it wraps (by the factory's qualified name, as a function pickles), and a spawned worker
gets the same object whether or not the parent traced or inherited it. ``copy`` returns the wrapper itself, as
it does for a function.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from lazyops._once import fork_safe
from lazyops._resolve import Resolution
from lazyops._trace import Tracer


class ResolvedFactory:
    def __init__(
        self,
        factory: Callable[..., Any],
        resolution: Resolution,
        *,
        on_first_call: Callable[[], None] | None,
        tracer: Tracer | None,
    ) -> None:
        functools.update_wrapper(self, factory)
        self.lazyops_resolution = resolution
        self._on_first_call = on_first_call
        self._tracer = tracer
        self._once = threading.Lock()
        fork_safe(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._on_first_call is not None:
            with self._once:
                announce, self._on_first_call = self._on_first_call, None
            if announce is not None:
                announce()
        if self._tracer is None:
            return self.__wrapped__(*args, **kwargs)
        start = time.perf_counter()
        kernel = self.__wrapped__(*args, **kwargs)
        resolution = self.lazyops_resolution
        self._tracer.constructed(
            resolution.kernel, resolution.backend, resolution.reason, args, kwargs, time.perf_counter() - start
        )
        return kernel

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set in __init__: everything else belongs to the wrapped factory. An instance
        # made without __init__ (by a copy or pickle protocol probing it) has nothing to forward to.
        try:
            wrapped = self.__dict__["__wrapped__"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(wrapped, name)

    def __reduce__(self) -> tuple[Callable[[Any], Any], tuple[Any]]:
        return (_unwrapped, (self.__wrapped__,))

    def __copy__(self) -> ResolvedFactory:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ResolvedFactory:
        return self

    def __repr__(self) -> str:
        r = self.lazyops_resolution
        return f"<lazyops {r.kernel} from {r.backend!r} ({r.reason}): {self.__wrapped__!r}>"

    def _after_fork_in_child(self) -> None:
        self._once = threading.Lock()


def _unwrapped(factory: Any) -> Any:
    """Unpickling a wrapper: the factory itself, which pickle has already brought back by its qualified name."""
    return factory
