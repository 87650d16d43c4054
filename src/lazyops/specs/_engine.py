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

Each route is a few frames deep on purpose: at one token a kernel's host time is its cost, and every Python frame
between the caller and the launch is paid on every step of every layer.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeAlias

from lazyops._errors import KernelInputError

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
    reference; it is known to ``_ops`` by (backend, kernel), so that a compiled graph can build its kernels."""
    from lazyops.specs import _ops

    owner = backend or _ops.backend_of_module(build.__module__)
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
    _ops.know(owner, spec, factory)
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

    from lazyops.specs import _ops

    is_compiling = torch.compiler.is_compiling
    accepts = spec.plain_predicate(config, strided_rows=strided_rows, device_type=device_type)
    checked = checked_route(spec, config, launch, device_type, strided_rows=strided_rows, writes_out=writes_out)
    through_operator = _ops.operator_route(spec, config, backend)
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
    kernel.__name__ = kernel.__qualname__ = spec.name.removesuffix("_tl")
    kernel.__doc__ = spec.kernel_type.__call__.__doc__
    kernel.lazyops_config = config  # type: ignore[attr-defined]
    kernel.lazyops_backend = backend  # type: ignore[attr-defined]  # which implementation runs, for its caller
    # For tools and tests: the custom operators of this kernel, registered if they were not yet.
    kernel.lazyops_operators = lambda: _ops.operators(spec, backend, config)  # type: ignore[attr-defined]
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
    """``checked(args, out)``: the spec's checks, then the call adapted to what the launch takes (see
    ``KernelSpec.implementation`` for the two flags)."""
    import torch

    check, check_out, check_aliasing = spec.check, spec.check_out, spec.check_aliasing
    aliasing = bool(spec.mutates)
    is_grad_enabled = torch.is_grad_enabled
    inference_mode = torch.is_inference_mode_enabled
    current_device = torch.cuda.current_device
    label = config.label
    inputs = spec.inputs
    returns_out = spec.returns == "out"
    returned = tuple(inputs.index(name) for name in spec.returns) if not returns_out else ()
    written = tuple(sorted(inputs.index(name) for name in spec.mutates))
    output, out_shape, rows, out_rows = spec.output, spec.out_shape, spec.rows, spec.out_rows
    row_positions = tuple(inputs.index(name) for name in spec.row_inputs)
    flat_ranks = spec.flat_ranks()
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
        for index, rank in flat_ranks:
            if args[index].dim() != rank:
                flat = rows(config, *args)
                break
        first_dims = args[token_position].dim() if row_positions else 2
        if row_positions and flat[token_position].shape[0] == 0:  # no tokens: nothing to launch, whatever the backend
            if not returns_out:
                return tuple(args[index] for index in returned)
            return output(config, *args) if out is None else out
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
            result = output(config, *args) if out is None else out
            target = out_rows(config, result)
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

    def checked(args: tuple[Any, ...], out: Any) -> Any:
        check(config, *args)
        if out is not None:
            if not returns_out:
                raise KernelInputError(f"{label}: takes no out= (it writes its inputs in place)")
            check_out(config, out, *args)
        if aliasing:
            check_aliasing(config, *args)
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
    from lazyops.specs._params import dtype_of

    return dtype_of(getattr(spec.params[position], "dtype", "dtype"), config)
