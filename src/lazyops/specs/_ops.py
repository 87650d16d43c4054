"""A kernel as a PyTorch custom operator, so that ``torch.compile(fullgraph=True)`` and ``torch.export`` see it.

The compiler cannot trace into a Triton launcher's argument binding or a TileLang kernel handle; it can keep an
opaque operator in its graph when it knows the operator's schema (which arguments it mutates), and a fake
implementation that gives the output's shape and dtype without running anything. So every kernel of every
backend, third-party ones included, is the operator ``lazyops_<backend>::<kernel>`` while it is traced:

- the kernel's tensors as arguments, those the spec lists in ``mutates`` declared as written (``Tensor(a!)``),
  and its static configuration (the configuration's fields: sizes, dtype, flags) as scalar arguments;
- a real implementation that builds (once per configuration) and calls the backend's kernel;
- a fake implementation that runs the spec's checks on the fake tensors and returns an empty output.

A kernel that returns a new tensor has a second operator, ``<kernel>_out``, for calls given ``out=``: it writes
``out`` (declared mutated) and returns nothing, since an operator may not return an alias of its argument.

Operators are registered on first use, while the compiler traces a kernel's call, not when a factory is built:
a program that never compiles registers nothing. What makes that possible inside a trace is
:func:`ensure_operators`, which the compiler runs once as it finds it (marked as having a constant result) rather
than tracing into ``torch.library``. What is kept from a factory call is the factory itself, once per (backend,
kernel), so that a compiled graph can build the kernel of any configuration it was traced with.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable
from typing import Any, TypeAlias

from lazyops._errors import KernelInputError

#: A kernel's spec (``lazyops.specs._spec.KernelSpec``), which imports this module: it is not imported back, not even
#: for its type, so that the spec layer has no circle (``tests/core/test_house_limits.py`` counts typing imports).
KernelSpec: TypeAlias = Any

#: Schema spellings of the static configuration's value types.
_SCHEMA_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}

_lock = threading.Lock()
#: (backend, kernel) -> (spec, factory): every factory ``spec.implementation`` made, known by its names
_factories: dict[tuple[str, str], tuple[KernelSpec, Callable[..., Any]]] = {}
#: (backend, kernel) -> (operator, its out= form or None), once registered
_registered: dict[tuple[str, str], tuple[Any, Any]] = {}
_libraries: dict[str, Any] = {}


def namespace_of(backend: str) -> str:
    """``lazyops_<backend>``: an operator namespace must be an identifier."""
    return "lazyops_" + re.sub(r"\W", "_", backend)


def backend_of_module(module: str) -> str:
    """The backend a kernel module belongs to: ``lazyops._backends.<name>.<kernel>`` for the built-ins, else the
    top-level package of a third-party backend (whose operators are ``lazyops_<package>::<kernel>``)."""
    parts = module.split(".")
    if parts[:2] == ["lazyops", "_backends"] and len(parts) > 2:
        return parts[2]
    return parts[0]


def static_fields(config: Any) -> list[str]:
    """The configuration values that become operator arguments (everything but the human-readable label)."""
    return [field.name for field in dataclasses.fields(config) if field.name != "label"]


def config_values(config: Any) -> tuple[Any, ...]:
    return tuple(getattr(config, name) for name in static_fields(config))


def stem(spec: KernelSpec) -> str:
    name: str = spec.name
    return name.removesuffix("_tl")


def know(backend: str, spec: KernelSpec, factory: Callable[..., Any]) -> None:
    """Remember the factory of ``spec`` in ``backend`` (done when the factory is made, at the module's import).

    Two modules may not claim one (backend, kernel): their operators would be one, and a compiled graph would run
    whichever was made first. Re-importing the same module (a reload) replaces its own factory."""
    known = _factories.get((backend, spec.name))
    if known is not None and known[1].__module__ != factory.__module__:
        raise ValueError(
            f"{factory.__module__}: {spec.name} of backend {backend!r} is already made by {known[1].__module__}; "
            "two backends in one top-level package share its operator namespace: give this one its own with "
            f"@spec.implementation(backend='<its registered name>')"
        )
    _factories[(backend, spec.name)] = (spec, factory)


def schema(spec: KernelSpec, config: Any, *, with_out: bool = False) -> str:
    """``rmsnorm(Tensor x, Tensor weight, int n, ScalarType dtype, float eps) -> Tensor``; with ``with_out``,
    ``rmsnorm_out(Tensor x, Tensor weight, Tensor(a!) out, ...) -> ()``."""
    import torch

    aliases = iter("abcdefghijklmnopqrstuvwxyz")
    tensors = [
        f"Tensor({next(aliases)}!){'?' if name in spec.keywords else ''} {name}"
        if name in spec.mutates
        else f"Tensor? {name}"
        if name in spec.keywords
        else f"Tensor {name}"
        for name in spec.inputs
    ]
    if with_out:
        tensors.append(f"Tensor({next(aliases)}!) out")
    scalars = []
    declared = {field.name: str(field.type) for field in dataclasses.fields(config)}
    for name in static_fields(config):
        value = getattr(config, name)
        # an optional field (``int | None``) is ``int?`` whatever the example configuration holds: the schema is
        # made once per kernel, from whichever configuration built it first
        optional = [part.strip() for part in declared[name].split("|") if part.strip() != "None"]
        nullable = len(optional) < len(declared[name].split("|"))
        if value is None and len(optional) == 1:
            value = {"int": 0, "float": 0.0, "bool": False, "str": ""}.get(optional[0])
        kind = "ScalarType" if isinstance(value, torch.dtype) else _SCHEMA_TYPES.get(type(value))
        if kind is not None and nullable:
            kind += "?"
        if kind is None:
            raise TypeError(f"{spec.name}: config field {name}={value!r} has no operator schema type")
        # a factory flag may share its name with the call's tensor it announces (moe_route_tl's correction_bias):
        # the schema's names must differ, and the operator takes its arguments by position
        scalars.append(f"{kind} {name}_config" if name in spec.inputs else f"{kind} {name}")
    returns = "Tensor" if spec.returns == "out" and not with_out else "()"
    return f"{stem(spec) + ('_out' if with_out else '')}({', '.join(tensors + scalars)}) -> {returns}"


#: A configuration of each (backend, kernel) that built a kernel: what :func:`ensure_operators` reads the schema's
#: scalar types from (any configuration of the kernel will do).
_example_configs: dict[tuple[str, str], Any] = {}


def ensure_operators(backend: str, kernel: str) -> int:
    """Register ``kernel``'s operators in ``backend`` if they are not yet; returns 1 (a constant for the compiler).

    Called while ``torch.compile`` traces a kernel: the compiler runs it as it is instead of tracing into it
    (the attribute below is what ``torch._dynamo.assume_constant_result`` sets), and the operator it registers is
    then looked up by name as any ``torch.ops`` operator is. Its arguments are strings only: the compiler passes
    them as constants, and torch 2.11's cannot pass a frozen dataclass (a configuration) so."""
    operators(_factories[(backend, kernel)][0], backend, _example_configs[(backend, kernel)])
    return 1


ensure_operators._dynamo_marked_constant = True  # type: ignore[attr-defined]


def operator_route(spec: KernelSpec, config: Any, backend: str) -> Callable[[tuple[Any, ...], Any], Any]:
    """``through_operator(args, out)``: the kernel's call while the compiler traces it, as its custom operator."""
    import torch

    values = config_values(config)
    name, label = spec.name, config.label
    namespace = namespace_of(backend)
    returns_out = spec.returns == "out"
    returned = () if returns_out else tuple(spec.inputs.index(input_name) for input_name in spec.returns)

    _example_configs.setdefault((backend, name), config)

    def through_operator(args: tuple[Any, ...], out: Any) -> Any:
        ensure_operators(backend, name)
        operators = getattr(torch.ops, namespace)
        if out is not None:
            if not returns_out:
                raise KernelInputError(f"{label}: takes no out= (it writes its inputs in place)")
            getattr(operators, stem(spec) + "_out").default(*args, out, *values)
            return out
        result = getattr(operators, stem(spec)).default(*args, *values)
        return result if returns_out else tuple(args[index] for index in returned)

    return through_operator


def operators(spec: KernelSpec, backend: str, example_config: Any) -> tuple[Any, Any]:
    """The registered operators of ``spec`` in ``backend``: the kernel's, and (for a kernel that returns a new
    tensor) its ``out=`` form; registered on first request, idempotent. ``example_config`` gives the schema's
    scalar types (any configuration of the kernel will do: the one a kernel was built with)."""
    key = (backend, spec.name)
    with _lock:
        if key in _registered:
            return _registered[key]
        import torch

        factory = _factories[key][1]
        namespace = namespace_of(backend)
        library = _libraries.get(namespace)
        if library is None:
            library = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        names = static_fields(example_config)
        count = len(spec.inputs)
        returns_out = spec.returns == "out"
        built: dict[tuple[Any, ...], Callable[..., Any]] = {}  # the kernels this operator ran, by configuration

        def kernel_for(values: tuple[Any, ...]) -> Callable[..., Any]:
            kernel = built.get(values)
            if kernel is None:
                kernel = built.setdefault(values, factory(**dict(zip(names, values, strict=True))))
            return kernel

        def real(*args: Any) -> Any:
            result = kernel_for(tuple(args[count:]))(*args[:count])
            return result if returns_out else None

        def fake(*args: Any) -> Any:
            tensors, values = args[:count], args[count:]
            config = spec.bind(**dict(zip(names, values, strict=True)))
            spec.check(config, *tensors)
            return spec.output(config, *tensors) if returns_out else None

        def real_out(*args: Any) -> None:
            kernel_for(tuple(args[count + 1 :]))(*args[:count], out=args[count])

        def fake_out(*args: Any) -> None:
            tensors, out, values = args[:count], args[count], args[count + 1 :]
            config = spec.bind(**dict(zip(names, values, strict=True)))
            spec.check(config, *tensors)
            spec.check_out(config, out, *tensors)

        def register(name: str, with_out: bool, implementation: Any, fake_implementation: Any) -> Any:
            library.define(schema(spec, example_config, with_out=with_out))
            library.impl(name, implementation, "CompositeExplicitAutograd")
            torch.library.register_fake(f"{namespace}::{name}", fake_implementation, lib=library)
            return getattr(getattr(torch.ops, namespace), name).default

        op = register(stem(spec), False, real, fake)
        op_out = register(stem(spec) + "_out", True, real_out, fake_out) if returns_out else None
        _registered[key] = (op, op_out)
        return op, op_out
