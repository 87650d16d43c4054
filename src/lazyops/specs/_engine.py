"""How a kernel call runs: a backend's launch turned into the public factory, and the factory's kernel.

The kernel is one closure with three routes, chosen in this order on every call:

1. **Compile**: while ``torch.compile`` or ``torch.export`` traces, the call is the custom operator
   ``lazyops_<backend>::<kernel>`` (``_ops``), registered on first use, so the graph keeps the kernel as one node.
   Eager calls never pay for the dispatcher (16 to 42 µs a call on a 2-core CPU).
2. **Plain**: the call engines make on every step (dense rows of the factory's dtype, parameters of their exact
   shape, on the current device) is recognised by the spec's predicate in a few attribute reads and launched as it
   is: an output allocated, the launch, nothing else.
3. **Checked**: anything else passes the spec's full checks (which accept it or say what is wrong, before anything
   is written), then is adapted to what the launch takes: leading dimensions flattened, strided views copied for a
   launch that takes dense rows (and copied back if written), ``out=`` filled, the device switched to the tensors'
   one, a call without tokens answered without a launch.

What the plain and checked routes read of the spec, derived from its declared parameters, is here as functions of
the spec (``plain_layout``, ``plain_predicate``, ``token_count``, ``as_rows``, ``out_as_rows``, ``flat_ranks``); the
full checks are ``_checks``' (``check_call``, ``check_out``, ``check_aliasing``).

Each route is a few frames deep on purpose: at one token a kernel's host time is its cost, and every Python frame
between the caller and the launch is paid on every step of every layer.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

from lazyops._errors import KernelInputError
from lazyops.specs._params import (
    TOKEN_DIMS,
    TOKENS,
    Fixed,
    FromTokens,
    Param,
    Rows,
    Tensor,
    declared_size,
    dtype_of,
    layout_of,
    resolved,
    rows_like,
    shape_of,
    size_of,
    symbol_of,
    token_indexed,
)

#: A kernel's spec (``lazyops.specs._spec.KernelSpec``), which imports this module: it is not imported back, not even
#: for its type, so that the spec layer has no circle (``tests/core/test_house_limits.py`` counts typing imports).
KernelSpec: TypeAlias = Any


def implementation(
    spec: KernelSpec,
    build: Callable[[Any], Callable[..., Any]],
    *,
    device_type: str | None,
    backend: str | None,
    strided_rows: bool,
    writes_out: bool,
    supports: Callable[[Any], str | None] | None = None,
) -> Callable[..., Any]:
    """The public factory of ``spec`` whose kernels call ``build(config)``'s launch (see
    ``KernelSpec.implementation``). The factory keeps ``build``'s module and takes the spec's name, so it pickles by
    reference; it is kept by (backend, kernel) (:func:`know`), so that a compiled graph can build its kernels."""
    owner = backend or backend_of_module(build.__module__)
    conventions = {"strided_rows": strided_rows, "writes_out": writes_out}

    def factory(*args: Any, **kwargs: Any) -> Any:
        config = spec.bind(*args, **kwargs)
        if supports is not None:
            reason = supports(config)
            if reason:
                raise KernelInputError(
                    f"{config.label}: backend {owner!r} does not serve this configuration: {reason}; through "
                    f"lazyops.{spec.name} it comes from the next backend that does (lazyops.which({spec.name!r}, "
                    "...) says which)"
                )
        return kernel_of(spec, config, build(config), owner, device_type, **conventions)

    factory.__name__ = factory.__qualname__ = spec.name
    factory.__module__ = build.__module__
    factory.__doc__ = spec.factory_doc
    factory.__signature__ = spec.signature()  # type: ignore[attr-defined]
    factory.__annotations__ = dict(type(spec).bind.__annotations__, **{"return": spec.kernel_type})
    factory.lazyops_spec = spec  # type: ignore[attr-defined]
    factory.lazyops_backend = owner  # type: ignore[attr-defined]
    factory.lazyops_conventions = conventions  # type: ignore[attr-defined]
    if supports is not None:
        factory.lazyops_supports = supports  # type: ignore[attr-defined]
    know(owner, spec, factory)
    return factory


def kernel_of(
    spec: KernelSpec,
    config: Any,
    launch: Callable[..., Any],
    backend: str,
    device_type: str | None,
    *,
    strided_rows: bool,
    writes_out: bool,
) -> Callable[..., Any]:
    """The kernel for ``config``: the compile route, the plain route, the checked route (the module's docstring)."""
    import torch

    is_compiling = torch.compiler.is_compiling
    accepts = plain_predicate(spec, config, strided_rows=strided_rows, device_type=device_type)
    checked = checked_route(spec, config, launch, device_type, strided_rows=strided_rows, writes_out=writes_out)
    through_operator = operator_route(spec, config, backend)
    inputs = spec.inputs
    returns_out = spec.returns == "out"
    returned = _picker(() if returns_out else tuple(inputs.index(name) for name in spec.returns))
    # How the plain route allocates the result: like an input (dense, so ``empty_like`` is dense too), or rows of
    # the output's width under the first token-indexed input's token count.
    out = spec.out
    like = inputs.index(out.like) if returns_out and out is not None and out.like is not None else None
    width = spec.out_width(config) if returns_out else None
    first_row = inputs.index(spec.row_inputs[0]) if spec.row_inputs else 0
    out_dtype = spec.out_dtype(config) if returns_out else None
    # ``empty_like(x)`` and ``new_empty(shape)`` without a dtype are the cheapest allocations torch has from Python;
    # the dtype is passed only where it differs from the input's (fp8 outputs)
    same_dtype = returns_out and out_dtype is _input_dtype(spec, config, like if like is not None else first_row)
    empty_like = torch.empty_like

    def kernel(*args: Any, out: Any = None) -> Any:
        if is_compiling():
            return through_operator(args, out)
        if out is None and accepts is not None and accepts(args):
            if not returns_out:
                launch(*args)
                return returned(args)
            if not writes_out:
                return launch(*args)
            if like is not None:
                result = empty_like(args[like]) if same_dtype else empty_like(args[like], dtype=out_dtype)
            elif width is None:  # one value a row (a sampler's tokens)
                result = args[first_row].new_empty(args[first_row].shape[:-1], dtype=out_dtype)
            else:
                first = args[first_row]
                shape = (first.shape[0], width)
                result = first.new_empty(shape) if same_dtype else first.new_empty(shape, dtype=out_dtype)
            launch(*args, result)
            return result
        return checked(args, out)

    if spec.keywords:
        kernel = with_keywords(kernel, spec, config)
    kernel.__name__ = kernel.__qualname__ = stem(spec)
    kernel.__doc__ = spec.kernel_type.__call__.__doc__
    kernel.lazyops_config = config  # type: ignore[attr-defined]
    kernel.lazyops_backend = backend  # type: ignore[attr-defined]  # which implementation runs, for its caller
    # For tools and tests: the custom operators of this kernel, registered if they were not yet.
    kernel.lazyops_operators = lambda: operators(spec, backend, config)  # type: ignore[attr-defined]
    return kernel


def checked_route(
    spec: KernelSpec,
    config: Any,
    launch: Callable[..., Any],
    device_type: str | None,
    *,
    strided_rows: bool,
    writes_out: bool,
) -> Callable[[tuple[Any, ...], Any], Any]:
    """``checked(args, out)``: the spec's checks (``_checks``, imported by the first call that takes them), then the
    call adapted to what the launch takes (see ``KernelSpec.implementation`` for the two flags)."""
    import torch

    aliasing = bool(spec.mutates)
    is_grad_enabled = torch.is_grad_enabled
    inference_mode = torch.is_inference_mode_enabled
    current_device = torch.cuda.current_device
    label = config.label
    inputs = spec.inputs
    returns_out = spec.returns == "out"
    returned = tuple(inputs.index(name) for name in spec.returns) if not returns_out else ()
    written = tuple(sorted(inputs.index(name) for name in spec.mutates))
    out_shape = spec.out_shape
    row_positions = tuple(inputs.index(name) for name in spec.row_inputs)
    ranks = flat_ranks(spec)
    token_position = row_positions[0] if row_positions else 0

    def refuse_grad(args: tuple[Any, ...], out: Any) -> None:
        for name, tensor in (*zip(inputs, args, strict=False), ("out", out)):
            if tensor is not None and tensor.requires_grad:
                raise KernelInputError(
                    f"{label}: {name} requires grad while grad mode is on; lazyops kernels are for inference and "
                    "record no autograd graph: run them under torch.inference_mode() or torch.no_grad(), or pass "
                    f"{name}.detach()"
                )

    def writes_inference_tensors(args: tuple[Any, ...], out: Any) -> bool:
        """Whether the call writes a tensor made under ``torch.inference_mode()`` outside it, as a model loaded in
        inference mode and called under ``no_grad`` does: torch refuses such a write, so the call runs in inference
        mode (whose only other effect here is that a new output is an inference tensor too)."""
        if inference_mode():
            return False
        # a written keyword buffer the call left out is None
        written_inference = any(args[index] is not None and args[index].is_inference() for index in written)
        return written_inference or (out is not None and out.is_inference())

    def run(args: tuple[Any, ...], out: Any) -> Any:
        flat = args
        for index, rank in ranks:
            if args[index].dim() != rank:
                flat = as_rows(spec, config, *args)
                break
        first_dims = args[token_position].dim() if row_positions else 2
        if row_positions and flat[token_position].shape[0] == 0:  # no tokens: nothing to launch, whatever the backend
            if not returns_out:
                return tuple(args[index] for index in returned)
            return output(args) if out is None else out
        copied: list[tuple[Any, Any]] = []
        if not strided_rows and not all(flat[index].is_contiguous() for index in row_positions):
            dense_args = list(flat)
            for index in row_positions:
                if not dense_args[index].is_contiguous():
                    dense = dense_args[index].contiguous()
                    if index in written:
                        copied.append((dense_args[index], dense))
                    dense_args[index] = dense
            flat = tuple(dense_args)
        result: Any
        if not returns_out:
            launch(*flat)
            result = tuple(args[index] for index in returned)
        elif out is None and not writes_out:
            # The launch allocates its own result: returned as it is (no second tensor, no copy), shaped as the
            # caller's leading dimensions when they were flattened.
            made = launch(*flat)
            result = made if flat is args or made.dim() == first_dims else made.view(out_shape(config, *args))
        else:
            result = output(args) if out is None else out
            target = out_as_rows(spec, config, result)
            if not writes_out:
                target.copy_(launch(*flat))
            elif strided_rows or target.is_contiguous():
                launch(*flat, target)
            else:
                dense_target = target.new_empty(target.shape)
                launch(*flat, dense_target)
                target.copy_(dense_target)
        for view, dense in copied:
            view.copy_(dense)
        return result

    def wrong_device(first: Any) -> None:
        raise KernelInputError(
            f"{label}: the inputs are on {first.device}; this backend's kernels take {device_type} tensors "
            "(select the 'torch' backend for tensors elsewhere)"
        )

    def output(args: tuple[Any, ...]) -> Any:
        from lazyops.specs._checks import empty_output

        return empty_output(spec, config, *args)

    def checked(args: tuple[Any, ...], out: Any) -> Any:
        from lazyops.specs import _checks as checks

        checks.check_call(spec, config, *args)
        if out is not None:
            if not returns_out:
                raise KernelInputError(f"{label}: takes no out= (it writes its inputs in place)")
            checks.check_out(spec, config, out, *args)
        if aliasing:
            checks.check_aliasing(spec, config, *args)
        if is_grad_enabled():
            refuse_grad(args, out)
        first = args[0]
        elsewhere = False
        if device_type == "cuda":
            if not first.is_cuda:  # ``is_cuda``: a flag read, where ``device.type`` builds a device object
                wrong_device(first)
            elsewhere = first.get_device() != current_device()
        elif device_type is not None and first.device.type != device_type:
            wrong_device(first)
        if (written or returns_out) and writes_inference_tensors(args, out):
            with torch.inference_mode():
                if not elsewhere:
                    return run(args, out)
                with torch.cuda.device(first.device):
                    return run(args, out)
        if elsewhere:  # a launch goes to the current device; tensors on another GPU are served there
            with torch.cuda.device(first.device):
                return run(args, out)
        return run(args, out)

    return checked


# -- the compile route: the kernel as its custom operator while torch.compile traces it --------------------------
# The factories and the operators' names are kept here, as factories are made; ``_ops`` registers the operators,
# imported only when a trace first needs them, so that a program that never compiles never loads it.

#: (backend, kernel) -> (spec, factory): every factory :func:`implementation` made, known by its names, so that a
#: compiled graph can build the kernel of any configuration it was traced with
_factories: dict[tuple[str, str], tuple[KernelSpec, Callable[..., Any]]] = {}


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


def operators(spec: KernelSpec, backend: str, config: Any) -> tuple[Any, Any]:
    """The custom operators of ``spec`` in ``backend`` (``_ops.operators``), registered if they were not yet:
    the kernel's, and its ``out=`` form (None for a kernel that writes its inputs in place). ``config``: any
    configuration of the kernel, which gives the schema's scalar types."""
    from lazyops.specs import _ops

    return _ops.operators(
        spec,
        backend,
        config,
        _factories[(backend, spec.name)][1],
        namespace=namespace_of(backend),
        operator=stem(spec),
        fields=static_fields(config),
    )


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
        registered = getattr(torch.ops, namespace)
        if out is not None:
            if not returns_out:
                raise KernelInputError(f"{label}: takes no out= (it writes its inputs in place)")
            getattr(registered, stem(spec) + "_out").default(*args, out, *values)
            return out
        result = getattr(registered, stem(spec)).default(*args, *values)
        return result if returns_out else tuple(args[index] for index in returned)

    return through_operator


# -- the plain route: the predicate that recognises the call engines make on every step --------------------
class PlainInput(NamedTuple):
    """How one input of a plain call looks (see :func:`plain_call`; made by the functions below)."""

    #: ``"rows"`` (``[tokens, width]``), ``"tokens"`` (``[tokens]``), ``"fixed"`` (exactly ``shape``, dense) or
    #: ``"shaped"`` (``shape``'s sizes as :func:`shaped_input` says)
    kind: str
    #: a ``torch.dtype``, or a tuple of those taken
    dtype: Any
    width: int = 0
    #: rows of any multiple of ``head`` (``width`` then ignored); 0: of ``width``
    head: int = 0
    shape: tuple[Any, ...] = ()
    #: rows: ``"strided"`` (a row-strided view, where the launch takes one) or ``"dense"``; shaped: ``"dense"``,
    #: ``"rows"`` (the last dimension contiguous), ``"columns"`` (2-D, the transpose dense) or a tuple of them
    layout: Any = "dense"
    #: a keyword tensor: ``"required"``, ``"absent"`` (None, or empty and of its dtype) or ``"optional"``; ``""``: not
    presence: str = ""


def rows_input(width: int, dtype: Any, *, head: int = 0, strided: bool = False) -> PlainInput:
    """A token-indexed input of a plain call: ``[tokens, width]`` (``head``: any multiple of it), dense, or strided
    rows (last stride 1, one row stride) where the launch takes them."""
    return PlainInput("rows", dtype, width, head, layout="strided" if strided else "dense")


def tokens_input(dtype: Any) -> PlainInput:
    """A token-indexed input without features (rope's positions): ``[tokens]``, dense."""
    return PlainInput("tokens", dtype)


def fixed_input(shape: tuple[int, ...], dtype: Any) -> PlainInput:
    """An input of a plain call that is not indexed by token (a weight, a scale): exactly ``shape``, dense."""
    return PlainInput("fixed", dtype, shape=shape)


def shaped_input(
    shape: tuple[Any, ...], dtype: Any, *, layout: str | tuple[str, ...] = "dense", presence: str = ""
) -> PlainInput:
    """An input of declared sizes (``_params.Tensor``): each an int, a ``range`` of those allowed, None (any), a
    symbol (``"B"``, ``"B+1"``; ``"T"``: the token count) that the first input having it binds and the others
    equal, or a function of the token count (``_params.FromTokens``, its configuration bound)."""
    return PlainInput("shaped", dtype, shape=shape, layout=layout, presence=presence)


def plain_call(
    layout: tuple[PlainInput, ...],
    written: tuple[int, ...] = (),
    device_type: str | None = None,
    *,
    strided_rows: bool = False,
    values: Any = None,
    validate: bool = False,
) -> Any:
    """A predicate over a call's packed arguments that recognises, in a few attribute reads, the call engines make
    on every step: every input a tensor of its dtype on the first input's device, none requiring grad while grad
    mode is on, the token-indexed ones ``[tokens, width]`` (or ``[tokens]``) with the same ``tokens > 0``, dense
    (rows strided where the layout says so and ``strided_rows``: the launch indexes rows by their stride), the others
    of their declared shape and layout, each ``written`` input sharing no element with any other input (whatever its
    dtype) and writable here (not an inference tensor outside ``torch.inference_mode()``), and the device one of
    ``device_type`` (the current one, for CUDA: a launch goes to the current device). ``values(*args)``: the index
    values' check (``KernelSpec.check_values``), run where they are read: on the host, and with ``validate`` on a
    device too.

    It is the kernel's fast path, its layout declared by the spec's parameters: where it answers True, the full
    checks would accept the call and the launch needs no adaptation; where it answers False (a non-tensor, a wrong
    count, an index value the checks refuse included), the call takes the full checks, which accept it or say what
    is wrong. So it may refuse what the checks accept (a 3-D input), never the reverse:
    ``tests/core/test_plain_call.py`` holds it to that.

    Its cost is the kernel's host cost on every step, so it runs in one frame, reads each attribute once and loops
    only over what a kernel declares: the first token-indexed input on its own, then the other rows, the fixed
    inputs and the shaped ones in one loop each.
    """
    import torch

    is_grad_enabled = torch.is_grad_enabled
    inference_mode = torch.is_inference_mode_enabled
    current_device = torch.cuda.current_device
    count = len(layout)
    token_inputs = [
        index
        for index, each in enumerate(layout)
        if each.kind in ("rows", "tokens") or (each.kind == "shaped" and TOKENS in each.shape)
    ]
    if not token_inputs or layout[token_inputs[0]].kind == "shaped":
        raise ValueError(
            f"plain_call{layout!r}: no token-indexed input to count the tokens by; declare one with Rows, or let "
            "plain_layout(spec, config) return None for the spec (no fast path)"
        )
    first_index = token_inputs[0]
    first = layout[first_index]
    first_rank = 1 if first.kind == "tokens" else 2
    first_strided = strided_rows and first.layout == "strided"
    rows = tuple(  # the other token-indexed inputs, [tokens, width] or [tokens]
        (
            index,
            each.dtype,
            2 if each.kind == "rows" else 1,
            -1 if each.head else each.width,
            each.head,
            strided_rows and each.layout == "strided",
        )
        for index, each in enumerate(layout)
        if each.kind in ("rows", "tokens") and index != first_index
    )
    fixed = tuple((index, each.dtype, each.shape) for index, each in enumerate(layout) if each.kind == "fixed")
    slots = {TOKENS: 0}
    declared: dict[tuple[Any, ...], int] = {}
    shaped = []
    for index, each in enumerate(layout):
        if each.kind != "shaped":
            continue
        exact = each.shape if all(type(size) is int for size in each.shape) else None
        like = declared.get(each.shape, -1) if None not in each.shape else -1
        dims: list[tuple[int, int, Any, int]] = []
        for position, size in enumerate(each.shape):
            symbol = symbol_of(size)
            if symbol is not None:  # 0: compared with a bound size, 1: binding it
                binds = symbol[0] not in slots
                slot = slots.setdefault(symbol[0], len(slots))
                dims.append((position, 1 if binds else 0, slot, symbol[1]))
            elif isinstance(size, range):
                dims.append((position, 2, size, 0))
            elif callable(size):  # a size the token count gives (``_params.FromTokens``)
                dims.append((position, 4, size, 0))
            elif size is not None:
                dims.append((position, 3, size, 0))
        if not each.presence:
            declared.setdefault(each.shape, index)
        rank = len(each.shape)
        layouts = each.layout if isinstance(each.layout, tuple) else (each.layout,)
        # 0: dense only; else the layouts taken, 1: rows, 2: columns, 4: dense
        loose = (
            0
            if layouts == ("dense",)
            else ("rows" in layouts) | ("columns" in layouts) << 1 | ("dense" in layouts) << 2
        )
        shaped.append((index, each.dtype, rank, exact, like, tuple(dims), loose, each.presence))
    symbols = len(slots)
    first_dtype, first_width, first_head = first.dtype, -1 if first.head else first.width, first.head
    # each written input against every other input, each pair once
    pairs = tuple(
        (index, tuple(other for other in range(count) if other != index and not (other in written and other < index)))
        for index in written
    )
    on_cuda = device_type == "cuda"
    other_kind = device_type if device_type not in (None, "cuda") else None

    def accepts(args: tuple[Any, ...]) -> bool:
        try:
            if len(args) != count:
                return False
            grad = is_grad_enabled()
            token_input = args[first_index]
            dtype = token_input.dtype
            if dtype is not first_dtype and (type(first_dtype) is not tuple or dtype not in first_dtype):
                return False
            if grad and token_input.requires_grad:
                return False
            sizes = token_input.shape
            if len(sizes) != first_rank:
                return False
            if first_rank == 2 and sizes[1] != first_width and (not first_head or sizes[1] % first_head):
                return False
            tokens = sizes[0]
            if tokens <= 0:
                return False
            if not token_input.is_contiguous():
                if not first_strided:
                    return False
                row_step, step = token_input.stride()
                if (step != 1 and sizes[1] > 1) or (tokens > 1 and row_step < sizes[1]):
                    return False
            if on_cuda:  # ``is_cuda``: a flag read, where ``device.type`` builds a device object
                if not token_input.is_cuda or token_input.get_device() != current_device():
                    return False
            elif other_kind is not None and token_input.device.type != other_kind:
                return False
            if count == 1:
                return True
            device = token_input.device
            for index, want, rank, width, head, strided in rows:
                arg = args[index]
                dtype = arg.dtype
                if dtype is not want and (type(want) is not tuple or dtype not in want):
                    return False
                sizes = arg.shape
                if len(sizes) != rank or sizes[0] != tokens:
                    return False
                if rank == 2 and sizes[1] != width and (not head or sizes[1] % head):
                    return False
                if (grad and arg.requires_grad) or arg.device != device:
                    return False
                if not arg.is_contiguous():
                    if not strided:
                        return False
                    row_step, step = arg.stride()
                    if (step != 1 and sizes[1] > 1) or (tokens > 1 and row_step < sizes[1]):
                        return False
            for index, want, shape in fixed:
                arg = args[index]
                if arg.dtype is not want or not arg.is_contiguous() or (grad and arg.requires_grad):
                    return False
                if arg.shape != shape or arg.device != device:
                    return False
            if shaped:
                bound = [tokens, *(None,) * (symbols - 1)]
                for index, want, rank, exact, like, dims, loose, presence in shaped:
                    arg = args[index]
                    if presence:
                        if arg is None or (not arg.numel() and arg.dtype is want):  # left out
                            if presence == "required" or (grad and arg is not None and arg.requires_grad):
                                return False
                            continue
                        if presence == "absent":
                            return False
                    dtype = arg.dtype
                    if dtype is not want and (type(want) is not tuple or dtype not in want):
                        return False
                    if (grad and arg.requires_grad) or arg.device != device:
                        return False
                    sizes = arg.shape
                    if exact is not None:
                        if sizes != exact:
                            return False
                    elif like >= 0:
                        if sizes != args[like].shape:
                            return False
                    elif len(sizes) != rank:
                        return False
                    else:
                        for position, kind, size, offset in dims:
                            got = sizes[position]
                            if kind == 0:
                                if got != bound[size] + offset:
                                    return False
                            elif kind == 1:
                                bound[size] = got - offset
                            elif kind == 2:
                                if got not in size:
                                    return False
                            elif kind == 4:
                                if got != size(tokens):
                                    return False
                            elif got != size:
                                return False
                    if not loose:
                        if not arg.is_contiguous():
                            return False
                    elif not (
                        (loose & 1 and (sizes[-1] < 2 or arg.stride(-1) == 1))
                        or (
                            loose & 2
                            and (sizes[0] < 2 or arg.stride(0) == 1)
                            and (sizes[1] < 2 or arg.stride(1) == sizes[0])
                        )
                        or (loose & 4 and arg.is_contiguous())
                    ):
                        return False
            if pairs:
                if not inference_mode():
                    for index, _ in pairs:
                        written = args[index]
                        if written is not None and written.is_inference():
                            return False  # written under torch.inference_mode() by the checked path
                extents = []  # each input's byte range [start, end), once
                for arg in args:
                    if arg is None:  # a keyword tensor left out
                        extents.append((0, 0))
                        continue
                    start = arg.data_ptr()
                    if arg.is_contiguous():
                        extents.append((start, start + arg.nbytes))
                    else:  # checked: 2-D, rows one stride apart (or columns: the transpose dense)
                        (height, width), (step, unit) = arg.shape, arg.stride()
                        extents.append(
                            (start, start + ((height - 1) * step + (width - 1) * unit + 1) * arg.element_size())
                        )
                for index, others in pairs:
                    start, end = extents[index]
                    for other_index in others:
                        other_start, other_end = extents[other_index]
                        if start >= other_end or other_start >= end or start == end or other_start == other_end:
                            continue
                        # interleaved byte ranges: apart only as distinct columns of one row stride (the slices of
                        # a packed qkv), as ``overlap`` finds
                        target, other = args[index], args[other_index]
                        if target.dim() != 2 or other.dim() != 2:
                            return False
                        (_, width), (_, other_width) = target.shape, other.shape
                        (step, unit), (other_step, other_unit) = target.stride(), other.stride()
                        size = target.element_size()
                        if step != other_step or step < width or step < other_width or other.element_size() != size:
                            return False
                        if (unit != 1 and width > 1) or (other_unit != 1 and other_width > 1):
                            return False
                        period = step * size
                        apart = (other_start - start) % period
                        if apart < width * size or period - apart < other_width * size:
                            return False
            if values is not None and (token_input.is_cpu or (validate and not token_input.is_meta)):
                values(*args)  # reads the index values: a refusal is the full checks' to word
            return True
        except (AttributeError, TypeError, ValueError, KernelInputError):  # a non-tensor, a refused index value...
            return False

    return accepts


# -- the spec's declarations, read for the routes: the plain route's layout and predicate, the row views a launch
# -- receives; what ``KernelSpec`` derives from its parameters at build and call time, kept where it runs
def plain_layout(spec: KernelSpec, config: Any) -> tuple[PlainInput, ...] | None:
    """How the call engines make on every step looks, one entry per parameter of ``spec`` (rows ``[tokens, width]``,
    dense or row-strided; fixed tensors of their exact shape; tensors of their declared sizes, ``"*T"`` one dimension
    of tokens there), or None where the spec has no fast path (a rows parameter whose width the spec checks
    itself)."""
    layout = []
    for param in spec.params:
        if isinstance(param, Rows) and (param.width is not None or param.head is not None):
            width = 0 if param.width is None else size_of(param.width, config)
            head = size_of(param.head, config) if param.width is None else 0
            layout.append(rows_input(width, dtype_of(param.dtype, config), head=head, strided=True))
        elif isinstance(param, Fixed):
            shape = tuple(size_of(size, config) for size in param.shape)
            layout.append(fixed_input(shape, dtype_of(param.dtype, config)))
        elif isinstance(param, Tensor) and param.shape == (TOKEN_DIMS,) and not param.keyword:
            layout.append(tokens_input(dtype_of(param.dtype, config)))
        elif isinstance(param, Tensor):
            declared = resolved(param, config)
            presence = ""
            if declared.keyword:
                needed = None if declared.present is None else declared.present(config)
                presence = "optional" if needed is None else "required" if needed else "absent"
                if declared.together and presence == "optional":  # a pair given takes the full checks
                    presence = "absent"
            declared_shape = shape_of(declared)
            # "*T": one token dimension here; the sizes of a tensor this configuration must not have are never
            # compared (it is left out)
            plain = (TOKENS, *declared_shape[1:]) if token_indexed(declared) else declared_shape
            sizes = tuple(None if presence == "absent" else _plain_size(size, config) for size in plain)
            dtype = dtype_of(declared.dtype, config)
            layout.append(shaped_input(sizes, dtype, layout=layout_of(declared), presence=presence))
        else:
            return None
    return tuple(layout)


def plain_predicate(
    spec: KernelSpec, config: Any, *, strided_rows: bool, device_type: str | None
) -> Callable[[tuple[Any, ...]], bool] | None:
    """The kernel's fast path: a predicate over a call's packed arguments that answers True only for a call the
    full checks accept (grad mode, aliasing, inference tensors and index values included) and the launch takes
    as it is (rows ``[tokens, width]`` with tokens, dense or, where the launch takes them, row-strided, on one
    device of ``device_type``, the current one for CUDA). None: every call takes the full checks. Derived from
    :func:`plain_layout` (:func:`plain_call`)."""
    layout = plain_layout(spec, config)
    if layout is None:
        return None
    written = tuple(sorted(spec.inputs.index(name) for name in spec.written(config)))
    accepts: Callable[[tuple[Any, ...]], bool] = plain_call(
        layout,
        written,
        device_type,
        strided_rows=strided_rows,
        values=functools.partial(spec.check_values, config) if spec.value_checks else None,
        validate=bool(getattr(config, "validate", False)),
    )
    return accepts


def token_count(spec: KernelSpec, config: Any, *args: Any) -> int:
    """The call's token count: the product of the first token-indexed input's leading dimensions (an input
    ``[1, 64, 256]`` is 64 tokens; a query ``[T, H, D]``, T; positions ``[B, S]``, ``B * S``)."""
    if not spec.row_inputs:
        return math.prod(args[0].shape[:-1])
    return math.prod(leading_dims(spec, config, args))


def leading_dims(spec: KernelSpec, config: Any, args: tuple[Any, ...]) -> tuple[int, ...]:
    """The first token-indexed input's leading (token) dimensions."""
    index = spec.inputs.index(spec.row_inputs[0])
    arg = args[index]
    return tuple(arg.shape[: arg.dim() - _features(config, spec.params[index], arg, 1)])


def as_rows(spec: KernelSpec, config: Any, *args: Any) -> tuple[Any, ...]:
    """The call's arguments as a launch receives them: each token-indexed input as a ``[rows, width]`` view
    (heads given as a dimension of their own folded into the row), or ``[rows]`` (rope's positions)."""
    leading = leading_dims(spec, config, args)
    tokens, lead = math.prod(leading), len(leading)
    keywords, row_inputs = spec.keywords, spec.row_inputs
    return tuple(
        arg.view(tokens, *((math.prod(arg.shape[lead:]),) if arg.dim() > lead else ()))
        if name in row_inputs and not (name in keywords and (arg is None or not arg.numel()))
        else arg
        for name, arg in zip(spec.inputs, args, strict=True)
    )


def out_as_rows(spec: KernelSpec, config: Any, out: Any) -> Any:
    """``out`` as the ``[rows, width]`` view a launch writes (itself when 2-D), heads folded into the row; ``[rows]``
    where the kernel returns one value a row (``_checks.one_a_row``)."""
    declared = spec.out
    if declared is not None and declared.like is None and spec.out_width(config) is None:
        return out.reshape(-1)
    if out.dim() == 2:
        return out
    like = rows_like(declared, spec.params)
    if like is not None and like.head is not None and like.width is not None:
        return out.view(-1, size_of(like.width, config))
    return out.view(-1, out.shape[-1])


def flat_ranks(spec: KernelSpec) -> tuple[tuple[int, int], ...]:
    """``(position, rank)`` of each token-indexed input as a launch receives it: 2 for rows (``[rows, width]``),
    a token-indexed tensor's own (rope's positions ``[tokens]``: 1). Not a keyword tensor, which may be left out:
    :func:`as_rows` flattens it with the others."""
    return tuple(
        (index, len(shape_of(param)) if isinstance(param, Tensor) else 2)
        for index, param in enumerate(spec.params)
        if param.name in spec.row_inputs and not getattr(param, "keyword", False)
    )


def _plain_size(size: Any, config: Any) -> Any:
    """A :class:`Tensor`'s size as :func:`shaped_input` takes it: a symbol as it is, a :class:`FromTokens` as a
    function of the token count alone, else ``_params.declared_size``."""
    if symbol_of(size):
        return size
    if isinstance(size, FromTokens):
        return functools.partial(size.size, config)
    return declared_size(size, config)


def _features(config: Any, param: Param, arg: Any, lead: int) -> int:
    """How many trailing dimensions of a checked token-indexed ``arg`` are not tokens (``lead``: as for
    ``_checks._check_tokens``)."""
    if isinstance(param, Tensor):
        return len(shape_of(param)) - 1
    if isinstance(param, Rows) and param.head is not None and arg.dim() == lead + 2:
        head, shape = size_of(param.head, config), arg.shape
        if shape[-1] == head and (param.width is None or shape[-2] * head == size_of(param.width, config)):
            return 2
    return 1


def with_keywords(kernel: Callable[..., Any], spec: KernelSpec, config: Any) -> Callable[..., Any]:
    """``kernel`` taking ``spec``'s keyword-only parameters (``k_scale=``) by keyword, or positionally after the
    others, as the conformance kit passes every input: each is handed on as a trailing positional argument, ``None``
    where the call left it out."""
    keywords, count = spec.keywords, len(spec.inputs)
    positional = count - len(keywords)
    absent = (None,) * len(keywords)
    label = config.label

    def call(*args: Any, out: Any = None, **given: Any) -> Any:
        if len(args) == positional:
            args = (*args, *(given.pop(name, None) for name in keywords)) if given else (*args, *absent)
        if given or len(args) != count:
            raise KernelInputError(
                f"{label}: takes {positional} tensors, then {', '.join(f'{name}=' for name in keywords)} by keyword "
                f"and out=; got {len(args)} positional arguments" + (f" and {', '.join(given)}=" if given else "")
            )
        return kernel(*args, out=out)

    return call


def _picker(positions: tuple[int, ...]) -> Callable[[tuple[Any, ...]], Any]:
    """``pick(args)``: the inputs at ``positions`` as a tuple, by a C call where it can (no Python frame)."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        only = positions[0]
        return lambda args: (args[only],)
    return lambda args: ()


def _input_dtype(spec: KernelSpec, config: Any, position: int) -> Any:
    return dtype_of(getattr(spec.params[position], "dtype", "dtype"), config)
