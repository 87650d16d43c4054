"""A kernel as a PyTorch custom operator, so that ``torch.compile(fullgraph=True)`` and ``torch.export`` see it.

The compiler cannot trace into a Triton launcher's argument binding or a TileLang kernel handle; it can keep an
opaque operator in its graph when it knows the operator's schema (which arguments it mutates), and a fake
implementation that gives the output's shape and dtype without running anything. So every kernel of every
backend, third-party ones included, is registered once as ``lazyops_<backend>::<kernel>`` with:

- the kernel's tensors as arguments, those the spec lists in ``mutates`` declared as written (``Tensor(a!)``),
  and its static configuration (the spec's config fields: sizes, dtype, flags) as scalar arguments;
- a real implementation that builds (once per configuration) and calls the backend's kernel;
- a fake implementation that runs the spec's checks on the fake tensors and returns an empty output.

The eager path never goes through it: the dispatcher adds 16 to 42 µs a call on a 2-core CPU
(``benchmarks/dispatcher_cost.py``), more than a whole kernel launch should cost. The kernel routes through the
operator only while ``torch.compiler.is_compiling()``.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lazyops.specs._spec import KernelSpec

#: Schema spellings of the static configuration's value types.
_SCHEMA_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}

_lock = threading.Lock()
_libraries: dict[str, Any] = {}
_registered: dict[tuple[str, str], Callable[..., Any]] = {}
#: kernels built by the factories, by (backend, kernel, configuration values): what the operator calls
_kernels: dict[tuple[Any, ...], Callable[..., Any]] = {}


def namespace_of(backend: str) -> str:
    """``lazyops_<backend>``: an operator namespace must be an identifier."""
    return "lazyops_" + re.sub(r"\W", "_", backend)


def backend_of_module(module: str) -> str:
    """The backend a kernel module belongs to: ``lazyops._backends.<name>.<kernel>`` for the built-ins, else the
    top-level package of a third-party backend."""
    parts = module.split(".")
    if parts[:2] == ["lazyops", "_backends"] and len(parts) > 2:
        return parts[2]
    return parts[0]


def static_fields(config: Any) -> list[str]:
    """The configuration values that become operator arguments (everything but the human-readable label)."""
    return [field.name for field in dataclasses.fields(config) if field.name != "label"]


def schema(spec: KernelSpec, config: Any) -> str:
    """``rmsnorm(Tensor x, Tensor weight, int n, ScalarType dtype, float eps) -> Tensor``."""
    import torch

    aliases = iter("abcdefghijklmnopqrstuvwxyz")
    tensors = [f"Tensor({next(aliases)}!) {name}" if name in spec.mutates else f"Tensor {name}" for name in spec.inputs]
    scalars = []
    for name in static_fields(config):
        value = getattr(config, name)
        kind = "ScalarType" if isinstance(value, torch.dtype) else _SCHEMA_TYPES.get(type(value))
        if kind is None:
            raise TypeError(f"{spec.name}: config field {name}={value!r} has no operator schema type")
        scalars.append(f"{kind} {name}")
    returns = "Tensor" if spec.returns == "out" else "()"
    return f"{stem(spec)}({', '.join(tensors + scalars)}) -> {returns}"


def stem(spec: KernelSpec) -> str:
    return spec.name.removesuffix("_tl")


def config_values(config: Any) -> tuple[Any, ...]:
    return tuple(getattr(config, name) for name in static_fields(config))


def operator(
    spec: KernelSpec, backend: str, config: Any, kernel: Callable[..., Any], build: Callable[[Any], Callable[..., Any]]
) -> Callable[..., Any]:
    """The registered operator of ``spec`` in ``backend`` (registered on first request; idempotent).

    ``kernel`` is the checked kernel the factory just built for ``config``: the operator's real implementation
    calls it for that configuration. ``build(config)`` makes one for a configuration no factory call built in this
    process (a graph exported elsewhere, say).
    """
    key = (backend, spec.name)
    _kernels[(backend, spec.name, config_values(config))] = kernel
    with _lock:
        if key in _registered:
            return _registered[key]
        import torch

        namespace = namespace_of(backend)
        library = _libraries.get(namespace)
        if library is None:
            library = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        names = static_fields(config)
        count = len(spec.inputs)

        def kernel_for(values: tuple[Any, ...]) -> Callable[..., Any]:
            built = _kernels.get((backend, spec.name, values))
            if built is None:
                with _lock:
                    built = _kernels.get((backend, spec.name, values))
                    if built is None:
                        built = build(spec.configure(**dict(zip(names, values, strict=True))))
                        _kernels[(backend, spec.name, values)] = built
            return built

        def real(*args: Any) -> Any:
            result = kernel_for(tuple(args[count:]))(*args[:count])
            return result if spec.returns == "out" else None

        def fake(*args: Any) -> Any:
            tensors, values = args[:count], args[count:]
            config_of_call = spec.configure(**dict(zip(names, values, strict=True)))
            spec.check(config_of_call, *tensors)
            return spec.output(config_of_call, *tensors) if spec.returns == "out" else None

        library.define(schema(spec, config))
        library.impl(stem(spec), real, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{stem(spec)}", fake, lib=library)
        op: Callable[..., Any] = getattr(getattr(torch.ops, namespace), stem(spec)).default
        _registered[key] = op
        return op
