"""``lazyops.<kernel>`` where one configuration may be served by another backend than the next: declines and plans.

Resolution by name says which backend a kernel comes from. Two things make the answer depend on the factory's
arguments: a backend may decline a configuration it cannot serve (``spec.implementation(supports=...)``), and a
plan (``lazyops tune``) may name the backend of a configuration. Where either can happen for a kernel, the
namespace stores a :class:`ConfiguredFactory` in place of the backend's factory: each call binds the arguments
through the kernel's spec, resolves that configuration once (the same order, ``_resolve.resolve`` with ``serves``
and ``planned``), and builds the kernel from the backend it names; a plan's token switch becomes one comparison
of the token count. Where neither can happen, nothing of this runs: the backend's own factory is stored as it is.

Every configuration that goes elsewhere than the kernel's backend by name is said once, naming the kernel, the
configuration, where it went and why: a port that declines is never mistaken for one that serves.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from lazyops._errors import ConfigError
from lazyops._once import fork_safe
from lazyops._resolve import DECLINED, INHERITED, PLAN, Resolution


class ConfiguredFactory:
    """``lazyops.<kernel>``, resolving each configuration it is called with (see the module's docstring).

    ``namespace`` answers what resolution needs (settings, universe, the backends' factories, the plan in force,
    the printed lines); ``resolution`` is the kernel's by name, ``factory`` that backend's factory, whose signature
    and attributes this object shows as its own."""

    def __init__(self, namespace: Any, kernel: str, factory: Callable[..., Any], resolution: Resolution) -> None:
        functools.update_wrapper(self, factory)
        self.lazyops_resolution = resolution
        self._namespace = namespace
        self._kernel = kernel
        self._spec = namespace.spec_of(kernel, factory)
        self._built_by: dict[Any, Callable[..., Any]] = {}  # configuration -> the factory that builds its kernel
        self._lock = threading.Lock()
        fork_safe(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        config = self._spec.bind(*args, **kwargs)  # refuses bad arguments as the factory would
        build = self._built_by.get(config)  # a configuration is a frozen dataclass: its own key
        if build is None:
            build = self._choose(config)
            with self._lock:
                build = self._built_by.setdefault(config, build)
        return build(*args, **kwargs)

    def _choose(self, config: Any) -> Callable[..., Any]:
        namespace = self._namespace
        resolution, entry = namespace.resolve_configuration(self._kernel, config)
        if resolution.reason == INHERITED:
            from lazyops._notices import inherited_line

            namespace.announce(inherited_line(self._kernel, resolution.backend, resolution.lacking))
        elif resolution.reason == DECLINED or resolution.backend != self.lazyops_resolution.backend:
            namespace.announce(configuration_line(resolution, config.label))
        factory = namespace.factory(resolution.backend, self._kernel)
        if resolution.reason == PLAN and entry is not None and entry.switch is not None:
            # the plan's switch: its backend below ``below`` tokens, the entry's choice from there up
            under = namespace.factory(entry.switch.backend, self._kernel)
            return token_switch(under, factory, entry.switch.below, self._spec, config)
        traced: Callable[..., Any] = namespace.traced(factory, resolution)
        return traced

    def __getattr__(self, name: str) -> Any:
        try:
            wrapped = self.__dict__["__wrapped__"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(wrapped, name)

    def __reduce__(self) -> tuple[Callable[[Any], Any], tuple[Any]]:
        return (_unwrapped, (self.__wrapped__,))

    def __copy__(self) -> ConfiguredFactory:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ConfiguredFactory:
        return self

    def __repr__(self) -> str:
        return f"<lazyops {self._kernel}, resolved per configuration (declines, plan): {self.__wrapped__!r}>"

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


def configuration_line(resolution: Resolution, label: str) -> str:
    """The line for a configuration that went elsewhere than its kernel's backend by name."""
    why = [f"{backend!r} declines it ({reason})" for backend, reason in resolution.declined]
    if resolution.reason == PLAN:
        why.append("the plan in force names it")
    elif resolution.lacking:
        why.append(f"the selected backend {','.join(resolution.lacking)!r} does not export it")
    return f"lazyops: {label} runs from {resolution.backend!r}: {'; '.join(why) or resolution.reason}"


def token_switch(
    small: Callable[..., Any], large: Callable[..., Any], below: int, spec: Any, config: Any
) -> Callable[..., Callable[..., Any]]:
    """A factory whose kernel runs ``large``'s kernel from ``below`` tokens up and ``small``'s under it: where a plan
    measured one backend faster for short calls and another for long ones. One integer comparison a call, on the
    call's token count (``_engine.token_count``: the product of the leading dimensions, as the plan counted them); every
    keyword (``out=``, ``k_scale=``) passes through. A CUDA graph fixes the count at capture, so a replay runs one
    side. Both backends were checked at resolution (``resolve_configuration``): each serves ``config`` here."""
    from lazyops.specs._engine import token_count

    def build(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        under, over = small(*args, **kwargs), large(*args, **kwargs)

        def kernel(*tensors: Any, **keywords: Any) -> Any:
            return (under if token_count(spec, config, *tensors) < below else over)(*tensors, **keywords)

        kernel.__name__ = kernel.__qualname__ = getattr(over, "__name__", "kernel")
        kernel.__doc__ = getattr(over, "__doc__", None)
        return kernel

    return build


def stale_plan_entry(
    kernel: str,
    label: str,
    planned: str,
    resolution: Resolution,
    strict: bool,
    cannot: str | None = None,
    switch: tuple[int, str] | None = None,
) -> str:
    """The line (or, with ``LAZYOPS_PLAN_STRICT=1``, the ``ConfigError``) for a plan entry that cannot be applied:
    its choice, or (``switch``: its ``below`` and the entry's choice) its token switch's backend, whose calls then
    run from the choice. ``cannot`` is the ``BackendError`` of a planned backend that cannot run here."""
    declined = dict(resolution.declined)
    why = (
        cannot
        if cannot is not None
        else f"{planned!r} declines it ({declined[planned]})"
        if planned in declined
        else f"{planned!r} is not installed, does not export {kernel}, or is outside the strict chain"
    )
    line = (
        f"lazyops: the plan in force names {planned!r} for {label}, but {why}; it runs from {resolution.backend!r} "
        "as without a plan. Make the plan again here (`lazyops tune`)"
        if switch is None
        else f"lazyops: the plan in force switches {label} to {planned!r} below {switch[0]} tokens, but {why}; "
        f"every call runs from the plan's choice {switch[1]!r}. Make the plan again here (`lazyops tune`)"
    )
    if strict:
        raise ConfigError(line.removeprefix("lazyops: ") + " (LAZYOPS_PLAN_STRICT=1 makes this an error)")
    return line


def _unwrapped(factory: Any) -> Any:
    return factory
