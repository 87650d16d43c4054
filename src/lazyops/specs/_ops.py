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
a program that never compiles registers nothing, and never imports this module. The kernel's compile route
(``_engine.operator_route``) names the operators and keeps each factory as it is made; what makes registering
possible inside a trace is ``_engine.ensure_operators``, which the compiler runs once as it finds it (marked as
having a constant result) rather than tracing into ``torch.library``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, TypeAlias

from lazyops.specs import _checks as checks

#: A kernel's spec (``lazyops.specs._spec.KernelSpec``), which imports this module: it is not imported back, not even
#: for its type, so that the spec layer has no circle (``tests/core/test_house_limits.py`` counts typing imports).
KernelSpec: TypeAlias = Any

#: Schema spellings of the static configuration's value types.
_SCHEMA_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}

_lock = threading.Lock()
#: (backend, kernel) -> (operator, its out= form or None), once registered
_registered: dict[tuple[str, str], tuple[Any, Any]] = {}
_libraries: dict[str, Any] = {}


def schema(spec: KernelSpec, config: Any, *, operator: str, fields: list[str], with_out: bool = False) -> str:
    """``rmsnorm(Tensor x, Tensor weight, int n, ScalarType dtype, float eps) -> Tensor``; with ``with_out``,
    ``rmsnorm_out(Tensor x, Tensor weight, Tensor(a!) out, ...) -> ()``: the operator ``operator`` of ``spec``, whose
    scalar arguments are ``config``'s ``fields``."""
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
    for name in fields:
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
    return f"{operator + ('_out' if with_out else '')}({', '.join(tensors + scalars)}) -> {returns}"


def operators(
    spec: KernelSpec,
    backend: str,
    example_config: Any,
    factory: Callable[..., Any],
    *,
    namespace: str,
    operator: str,
    fields: list[str],
) -> tuple[Any, Any]:
    """The registered operators of ``spec`` in ``backend``, ``<namespace>::<operator>``: the kernel's, and (for a
    kernel that returns a new tensor) its ``out=`` form; registered on first request, idempotent. Their real
    implementation builds the kernel of the configuration whose ``fields`` they are given with ``factory``.
    ``example_config`` gives the schema's scalar types (any configuration of the kernel will do: the one a kernel
    was built with). ``_engine`` names them and keeps the factories."""
    key = (backend, spec.name)
    with _lock:
        if key in _registered:
            return _registered[key]
        import torch

        library = _libraries.get(namespace)
        if library is None:
            library = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        names = fields
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
            checks.check_call(spec, config, *tensors)
            return checks.empty_output(spec, config, *tensors) if returns_out else None

        def real_out(*args: Any) -> None:
            kernel_for(tuple(args[count + 1 :]))(*args[:count], out=args[count])

        def fake_out(*args: Any) -> None:
            tensors, out, values = args[:count], args[count], args[count + 1 :]
            config = spec.bind(**dict(zip(names, values, strict=True)))
            checks.check_call(spec, config, *tensors)
            checks.check_out(spec, config, out, *tensors)

        def register(name: str, with_out: bool, implementation: Any, fake_implementation: Any) -> Any:
            library.define(schema(spec, example_config, operator=operator, fields=fields, with_out=with_out))
            library.impl(name, implementation, "CompositeExplicitAutograd")
            torch.library.register_fake(f"{namespace}::{name}", fake_implementation, lib=library)
            return getattr(getattr(torch.ops, namespace), name).default

        op = register(operator, False, real, fake)
        op_out = register(operator + "_out", True, real_out, fake_out) if returns_out else None
        _registered[key] = (op, op_out)
        return op, op_out
