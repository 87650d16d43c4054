"""A kernel as a PyTorch custom operator, so that ``torch.compile(fullgraph=True)`` and ``torch.export`` see it.

The compiler cannot trace into a Triton launcher's argument binding or a TileLang kernel handle; it can keep an
opaque operator in its graph when it knows the operator's schema (which arguments it mutates), and a fake
implementation that gives the output's shape and dtype without running anything. So every kernel of every
backend, third-party ones included, is registered once as ``lazyops_<backend>::<kernel>`` with:

- the kernel's tensors as arguments, those the spec lists in ``mutates`` declared as written (``Tensor(a!)``),
  and its static configuration (the spec's config fields: sizes, dtype, flags) as scalar arguments;
- a real implementation that builds (once per configuration) and calls the backend's kernel;
- a fake implementation that runs the spec's checks on the fake tensors and returns an empty output.

A kernel that returns a new tensor has a second operator, ``<kernel>_out``, for calls given ``out=``: it writes
``out`` (declared mutated) and returns nothing, since an operator may not return an alias of its argument.

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
_registered: dict[tuple[str, str], tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
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


def schema(spec: KernelSpec, config: Any, *, with_out: bool = False) -> str:
    """``rmsnorm(Tensor x, Tensor weight, int n, ScalarType dtype, float eps) -> Tensor``; with ``with_out``,
    ``rmsnorm_out(Tensor x, Tensor weight, Tensor(a!) out, ...) -> ()``."""
    import torch

    aliases = iter("abcdefghijklmnopqrstuvwxyz")
    tensors = [f"Tensor({next(aliases)}!) {name}" if name in spec.mutates else f"Tensor {name}" for name in spec.inputs]
    if with_out:
        tensors.append(f"Tensor({next(aliases)}!) out")
    scalars = []
    for name in static_fields(config):
        value = getattr(config, name)
        kind = "ScalarType" if isinstance(value, torch.dtype) else _SCHEMA_TYPES.get(type(value))
        if kind is None:
            raise TypeError(f"{spec.name}: config field {name}={value!r} has no operator schema type")
        scalars.append(f"{kind} {name}")
    returns = "Tensor" if spec.returns == "out" and not with_out else "()"
    name = stem(spec) + ("_out" if with_out else "")
    return f"{name}({', '.join(tensors + scalars)}) -> {returns}"


def stem(spec: KernelSpec) -> str:
    return spec.name.removesuffix("_tl")


def config_values(config: Any) -> tuple[Any, ...]:
    return tuple(getattr(config, name) for name in static_fields(config))


def operators(
    spec: KernelSpec, backend: str, config: Any, kernel: Callable[..., Any], build: Callable[[Any], Callable[..., Any]]
) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    """The registered operators of ``spec`` in ``backend``: the kernel's, and (for a kernel that returns a new
    tensor) its ``out=`` form; registered on first request, idempotent.

    ``kernel`` is the checked kernel the factory just built for ``config``: the operators' real implementations
    call it for that configuration. ``build(config)`` makes one for a configuration no factory call built in this
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
        returns_out = spec.returns == "out"

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
            return result if returns_out else None

        def fake(*args: Any) -> Any:
            tensors, values = args[:count], args[count:]
            config_of_call = spec.configure(**dict(zip(names, values, strict=True)))
            spec.check(config_of_call, *tensors)
            return spec.output(config_of_call, *tensors) if returns_out else None

        def real_out(*args: Any) -> None:
            kernel_for(tuple(args[count + 1 :]))(*args[:count], out=args[count])

        def fake_out(*args: Any) -> None:
            tensors, out, values = args[:count], args[count], args[count + 1 :]
            config_of_call = spec.configure(**dict(zip(names, values, strict=True)))
            spec.check(config_of_call, *tensors)
            spec.check_out(config_of_call, out, *tensors)

        def register(name: str, with_out: bool, implementation: Any, fake_implementation: Any) -> Any:
            library.define(schema(spec, config, with_out=with_out))
            library.impl(name, implementation, "CompositeExplicitAutograd")
            torch.library.register_fake(f"{namespace}::{name}", fake_implementation, lib=library)
            return getattr(getattr(torch.ops, namespace), name).default

        op = register(stem(spec), False, real, fake)
        op_out = register(stem(spec) + "_out", True, real_out, fake_out) if returns_out else None
        _registered[key] = (op, op_out)
        return op, op_out
