"""``KernelSpec``: a kernel's contract, written once, that every backend's implementation is held to.

A spec says what a kernel *is*, apart from how any backend computes it: the factory's signature and docstring
(its argument normalisation), the checks every call passes before anything is written, the float64 reference,
the examples the conformance kit draws, and the traffic model benchmarks turn times into GB/s or TFLOP/s with.
A backend module keeps only what is its own (layout, launch, the kernel body) and turns it into the public
factory with :meth:`KernelSpec.implementation`:

    from lazyops.specs.rmsnorm import spec

    @spec.implementation(device_type="cuda")
    def rmsnorm_tl(config):          # config: the normalised static configuration
        def launch(x, weight):       # already checked: shapes, dtypes, devices, layout, autograd
            ...
        return launch

so that the signature, the checks and the error messages cannot drift between backends, and what a third-party
backend implements is checked exactly as the built-ins are.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from lazyops._errors import KernelInputError

if TYPE_CHECKING:
    import torch
    from hypothesis import strategies as st

    from lazyops.testing._case import Case
    from lazyops.testing._compare import Inputs


@dataclass(frozen=True)
class Traffic:
    """What one call moves and computes: bytes (each input read once, each output written once) and FLOPs.

    ``bound`` names the one that limits the kernel, so a benchmark reports GB/s or TFLOP/s accordingly.
    """

    bytes: int
    flops: int = 0
    bound: str = "memory"


@dataclass(frozen=True)
class RowConfig:
    """The static configuration of a kernel over rows of ``n`` features that takes nothing else: ``label`` is how the
    kernel names itself in messages (``softmax_tl(n=4096, dtype=torch.bfloat16)``)."""

    n: int
    dtype: torch.dtype
    label: str


@dataclass(frozen=True)
class Example:
    """The static configuration and input geometry one benchmark or check uses (args and kwargs of the factory)."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    geometry: Mapping[str, Any] = field(default_factory=dict)


class KernelSpec:
    """The contract of one kernel. Subclasses fill in the class attributes and the methods below.

    ``results`` names what a call produces, in the order :meth:`reference` returns them: ``"out"`` for the tensor
    a kernel returns, or an input's name for an input it updates in place (listed in ``mutates`` too).
    ``returns`` is what the kernel call returns: ``"out"``, or a tuple of input names (rope returns its rotated
    ``query`` and ``key``).
    """

    #: the factory's public name (``rmsnorm_tl``)
    name: ClassVar[str]
    #: the kernel call's positional parameters
    inputs: ClassVar[tuple[str, ...]]
    #: inputs indexed by token: ``[..., width]`` with any leading dimensions and strided rows (see
    #: ``_checks.check_rows``); a launch receives them as ``[rows, width]`` views
    row_inputs: ClassVar[tuple[str, ...]] = ()
    #: how many dimensions each of :attr:`row_inputs` has as a launch receives it (2: ``[rows, width]``)
    flat_ranks: ClassVar[tuple[int, ...] | None] = None
    #: inputs the call updates in place
    mutates: ClassVar[tuple[str, ...]] = ()
    #: inputs that ``out=`` may be (the very same view): where the math reads each element before writing it
    out_aliases: ClassVar[tuple[str, ...]] = ()
    #: the input whose shape the returned tensor has (``"x"`` for a norm), or None where :meth:`out_shape` says
    out_like: ClassVar[str | None] = None
    #: what :meth:`reference` returns, in order
    results: ClassVar[tuple[str, ...]] = ("out",)
    returns: ClassVar[str | tuple[str, ...]] = "out"
    #: the Protocol of the kernel call (typed in the stubs)
    kernel_type: ClassVar[Any]

    # -- the factory ---------------------------------------------------------------------------------------------
    def configure(self, *args: Any, **kwargs: Any) -> Any:
        """The normalised static configuration (a frozen dataclass with a ``label``), or ``KernelInputError``.

        Its signature and docstring are the public factory's: :meth:`implementation` copies them.
        """
        raise NotImplementedError

    def check(self, config: Any, *args: Any) -> None:
        """Refuse a call that the kernel cannot serve, before anything is written (``KernelInputError``)."""
        raise NotImplementedError

    # -- the specification ---------------------------------------------------------------------------------------
    def reference(self, config: Any, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The definition: :attr:`results`, computed in the inputs' dtype (float64 when testing)."""
        raise NotImplementedError

    def cases(self) -> st.SearchStrategy[Case]:
        """Hypothesis strategy of whole conformance examples."""
        raise NotImplementedError

    def example_inputs(self, config: Any, tokens: int, draw: Inputs, geometry: Mapping[str, Any]) -> tuple[Any, ...]:
        """The call's arguments for ``tokens`` tokens, drawn with ``draw`` (seeded: reproducible)."""
        raise NotImplementedError

    def token_elements(self, config: Any, geometry: Mapping[str, Any]) -> int:
        """Elements of the largest per-token input: the kit cuts the token count so that inputs stay small."""
        raise NotImplementedError

    def traffic(self, config: Any, tokens: int, geometry: Mapping[str, Any]) -> Traffic:
        raise NotImplementedError

    def benchmark(self, dtype: torch.dtype) -> Example:
        """The engine-sized configuration benchmarks time (hidden 4096, Llama-shaped heads)."""
        raise NotImplementedError

    # -- turning a backend's launch into the public factory ------------------------------------------------------
    def implementation(
        self,
        build: Callable[[Any], Callable[..., Any]] | None = None,
        *,
        device_type: str | None = None,
        backend: str | None = None,
        strided_rows: bool = False,
        writes_out: bool = False,
    ) -> Any:
        """Decorator: ``build(config) -> launch`` becomes the public factory of this kernel.

        The factory has the spec's signature and docstring, normalises its arguments through :meth:`configure`
        and returns a kernel that runs :meth:`check`, refuses inputs that require grad while grad mode is on, and
        (``device_type``: the device kind the launch dereferences) refuses tensors on another kind of device and
        launches on the device of its tensors; then it calls ``launch``, which receives checked arguments only.
        While ``torch.compile`` traces, the kernel is the custom operator ``lazyops_<backend>::<kernel>`` instead
        (see ``lazyops.specs._ops``); ``backend`` defaults to the backend package the module belongs to. The
        factory keeps ``build``'s module and takes the spec's name, so it pickles by reference.

        What the launch receives is always two-dimensional: each token-indexed input as a ``[rows, width]`` view.
        Two flags say how much of the calling conventions the launch serves itself; for what it does not, the
        kernel adapts the call, at the cost of a copy, so that a half-finished port still runs every call:

        - ``strided_rows``: it indexes rows by their stride (``x.stride(0)``), so views of packed buffers reach it
          as they are. Without it, such a view is copied to a contiguous tensor (and copied back if written).
        - ``writes_out``: it is ``launch(*inputs, out)`` and writes the result into ``out`` (a ``[rows, width]``
          view, allocated by the kernel when the caller passed none). Without it, ``launch(*inputs)`` returns a
          new tensor of its own (never a view of an input), copied into the caller's ``out=`` when one was given
          and otherwise returned as it is (reshaped to the inputs' leading dimensions).
        """
        if build is None:
            return functools.partial(
                self.implementation,
                device_type=device_type,
                backend=backend,
                strided_rows=strided_rows,
                writes_out=writes_out,
            )
        from lazyops.specs import _ops

        spec = self
        owner = backend or _ops.backend_of_module(build.__module__)

        def checked(config: Any) -> Callable[..., Any]:
            return spec.guarded(config, build(config), device_type, strided_rows=strided_rows, writes_out=writes_out)

        def factory(*args: Any, **kwargs: Any) -> Any:
            config = spec.configure(*args, **kwargs)
            kernel = checked(config)
            operators = _ops.operators(spec, owner, config, kernel, checked)
            return spec.traceable(config, kernel, *operators)

        factory.__name__ = factory.__qualname__ = self.name
        factory.__module__ = build.__module__
        factory.__doc__ = type(self).configure.__doc__
        factory.__signature__ = self.signature()  # type: ignore[attr-defined]
        factory.__annotations__ = dict(type(self).configure.__annotations__, **{"return": self.kernel_type})
        factory.lazyops_spec = self  # type: ignore[attr-defined]
        factory.lazyops_backend = owner  # type: ignore[attr-defined]
        factory.lazyops_conventions = {"strided_rows": strided_rows, "writes_out": writes_out}  # type: ignore[attr-defined]
        return factory

    def signature(self) -> inspect.Signature:
        """The public factory's signature: :meth:`configure`'s, returning :attr:`kernel_type`."""
        signature = inspect.signature(self.configure, eval_str=True)
        return signature.replace(return_annotation=self.kernel_type)

    def plain_layout(self, config: Any) -> tuple[Any, ...] | None:
        """How the call engines make on every step looks, one ``_checks.rows_input`` or ``_checks.fixed_input`` per
        input, or None (the default) for a kernel whose every call takes the full checks.

        A kernel recognises such a call in a few attribute reads (``_checks.plain_call``) and launches it without
        the general checks and adaptations: a host cost that counts where the kernel itself takes microseconds.
        """
        return None

    def plain_predicate(self, config: Any, *, strided_rows: bool) -> Callable[[tuple[Any, ...]], bool] | None:
        """The guarded kernel's fast path: a predicate over a call's packed arguments that answers True only for a
        call the full checks accept (grad mode and aliasing included) and the launch takes as it is (rows
        ``[tokens, width]`` with tokens, on one device; row-strided views only where ``strided_rows``). None: every
        call takes the full checks.

        By default it is made from :meth:`plain_layout` (``_checks.plain_call``, dense inputs); a spec whose engine
        call does not fit a layout (rope: positions ``[tokens]``, a cache of any length) writes its own.
        """
        layout = self.plain_layout(config)
        if layout is None:
            return None
        from lazyops.specs._checks import plain_call

        predicate: Callable[[tuple[Any, ...]], bool] = plain_call(
            layout, tuple(sorted(self.inputs.index(name) for name in self.mutates))
        )
        return predicate

    def out_shape(self, config: Any, *args: Any) -> tuple[int, ...]:
        """The shape of the tensor the kernel returns (for ``returns == "out"``), from the call's arguments: by
        default that of the input :attr:`out_like` names, else the first token-indexed input's leading dimensions
        and :meth:`out_width`."""
        if self.out_like is not None:
            return tuple(args[self.inputs.index(self.out_like)].shape)
        width = self.out_width(config)
        if width is None or not self.row_inputs:
            raise NotImplementedError
        return (*args[self.inputs.index(self.row_inputs[0])].shape[:-1], width)

    def out_width(self, config: Any) -> int | None:
        """The width of the rows the kernel returns when they are not shaped like an input (a GEMM's ``n``, a gated
        activation's half width): :meth:`out_shape` follows from it, and a plain call allocates ``[tokens, width]``
        without that method's tuple work. None (the default): the result is :attr:`out_like`'s shape, or only an
        overridden :meth:`out_shape` knows it."""
        return None

    def out_dtype(self, config: Any) -> torch.dtype:
        """The dtype of the tensor the kernel returns: the factory's, unless the kernel converts (fp8 outputs)."""
        dtype: torch.dtype = config.dtype
        return dtype

    def output(self, config: Any, *args: Any) -> torch.Tensor:
        """An empty (contiguous) tensor shaped, typed and placed as the kernel's returned one."""
        empty: torch.Tensor = args[0].new_empty(self.out_shape(config, *args), dtype=self.out_dtype(config))
        return empty

    def rows(self, config: Any, *args: Any) -> tuple[Any, ...]:
        """The call's arguments as a launch receives them: each token-indexed input as a ``[rows, width]`` view."""
        from lazyops.specs._checks import rows_of

        return tuple(
            rows_of(arg) if name in self.row_inputs else arg for name, arg in zip(self.inputs, args, strict=True)
        )

    def check_out(self, config: Any, out: Any, *args: Any) -> None:
        """Refuse an ``out=`` the kernel cannot write: its shape, dtype, device and layout, and any overlap with an
        input other than an exact alias the math allows (:attr:`out_aliases`)."""
        from lazyops.specs import _checks as checks

        label = config.label
        expected = self.out_shape(config, *args)
        checks.check_rows(label, "out", out, width=None, dtype=self.out_dtype(config), device=args[0].device)
        if tuple(out.shape) != tuple(expected):
            raise KernelInputError(
                f"{label}: out has shape {tuple(out.shape)}; this call writes {tuple(expected)} (pass out=None to "
                "have the kernel allocate it)"
            )
        for name, arg in zip(self.inputs, args, strict=True):
            if checks.overlap(out, arg):
                if name in self.out_aliases and checks.same_view(out, arg):
                    continue
                allowed = f"; it may be {name} itself" if name in self.out_aliases else ""
                raise KernelInputError(
                    f"{label}: out overlaps {name} in memory{allowed}; the kernel would read what it has already "
                    "written: pass a separate buffer"
                )

    def check_aliasing(self, config: Any, *args: Any) -> None:
        """Refuse a call whose in-place inputs share memory with another input (rope's query and key are two slices
        of one packed buffer: distinct columns of it are fine, the same elements are not), whatever either's dtype:
        a ``view(dtype)`` of an input is the same memory, and writing it changes what the other reads."""
        from lazyops.specs._checks import overlap

        for written, other in self._aliasing_pairs():
            tensor, arg = args[written], args[other]
            if overlap(tensor, arg):
                inputs = self.inputs
                raise KernelInputError(
                    f"{config.label}: {inputs[written]} overlaps {inputs[other]} in memory; {inputs[written]} is "
                    "written in place, so they must not share elements: pass separate tensors"
                )

    def _aliasing_pairs(self) -> tuple[tuple[int, int], ...]:
        """The (written input, other input) positions :meth:`check_aliasing` compares, each pair once (worked out
        on the first call and kept on the spec)."""
        pairs: tuple[tuple[int, int], ...] | None = self.__dict__.get("_pairs")
        if pairs is None:
            inputs = self.inputs
            pairs = self.__dict__["_pairs"] = tuple(
                (inputs.index(written), other)
                for position, written in enumerate(self.mutates)
                for other, name in enumerate(inputs)
                if name != written and name not in self.mutates[:position]
            )
        return pairs

    def guarded(
        self,
        config: Any,
        launch: Callable[..., Any],
        device_type: str | None,
        *,
        strided_rows: bool = False,
        writes_out: bool = False,
    ) -> Callable[..., Any]:
        """The eager kernel: the spec's checks, then the backend's launch, which is never called without tokens (a
        call with none returns an empty output, or its in-place arguments, untouched). See :meth:`implementation`
        for the two flags."""
        import torch

        check = self.check
        check_out = self.check_out
        check_aliasing = self.check_aliasing if len(self.mutates) else None
        is_grad_enabled = torch.is_grad_enabled
        label = config.label
        inputs = self.inputs
        current_device = torch.cuda.current_device
        returns_out = self.returns == "out"
        returned = None if returns_out else tuple(inputs.index(name) for name in self.returns)
        output = self.output
        out_shape = self.out_shape
        rows = self.rows
        row_positions = tuple(inputs.index(name) for name in self.row_inputs)
        flat_ranks = tuple(zip(row_positions, self.flat_ranks or (2,) * len(row_positions), strict=True))
        written = frozenset(inputs.index(name) for name in self.mutates)
        token_position = row_positions[0] if row_positions else 0
        only_row = row_positions[0] if flat_ranks and len(flat_ranks) == 1 and flat_ranks[0][1] == 2 else None

        def refuse_grad(args: tuple[Any, ...], out: Any) -> None:
            for name, tensor in (*zip(inputs, args, strict=False), ("out", out)):
                if tensor is not None and tensor.requires_grad:
                    raise KernelInputError(
                        f"{label}: {name} requires grad while grad mode is on; lazyops kernels are for "
                        "inference and record no autograd graph: run them under torch.inference_mode() or "
                        f"torch.no_grad(), or pass {name}.detach()"
                    )

        def wrong_device(first: Any) -> None:
            raise KernelInputError(
                f"{label}: the inputs are on {first.device}; this backend's kernels take {device_type} tensors "
                "(select the 'torch' backend for tensors elsewhere)"
            )

        def run(args: tuple[Any, ...], out: Any) -> Any:
            flat = args
            if only_row is not None:  # one token-indexed input (most kernels): no loop
                if args[only_row].dim() != 2:
                    flat = rows(config, *args)
            else:
                for index, rank in flat_ranks:
                    if args[index].dim() != rank:
                        flat = rows(config, *args)
                        break
            first_dims = args[token_position].dim() if row_positions else 2
            if flat[token_position].shape[0] == 0:  # no tokens: nothing to launch, whatever the backend
                if returned is not None:
                    return tuple(args[index] for index in returned)
                return output(config, *args) if out is None else out
            copied: list[tuple[Any, Any]] | tuple[()] = ()
            if not strided_rows and not all(flat[index].is_contiguous() for index in row_positions):
                copied = []
                dense_args = list(flat)
                for index in row_positions:
                    if not dense_args[index].is_contiguous():
                        dense = dense_args[index].contiguous()
                        if index in written:
                            copied.append((dense_args[index], dense))
                        dense_args[index] = dense
                flat = tuple(dense_args)
            if not returns_out:
                launch(*flat)
                for view, dense in copied:
                    view.copy_(dense)
                return tuple(args[index] for index in returned)  # type: ignore[union-attr]
            if out is None and not writes_out:
                # The launch allocates its own result: returned as it is (no second tensor, no copy), shaped as
                # the caller's leading dimensions when they were flattened.
                made = launch(*flat)
                for view, dense in copied:
                    view.copy_(dense)
                return made if flat is args or made.dim() == first_dims else made.view(out_shape(config, *args))
            result = output(config, *args) if out is None else out
            target = result if result.dim() == 2 else result.view(-1, result.shape[-1])
            if writes_out:
                dense_target = target if strided_rows or target.is_contiguous() else target.new_empty(target.shape)
                launch(*flat, dense_target)
                if dense_target is not target:
                    target.copy_(dense_target)
            else:
                target.copy_(launch(*flat))
            for view, dense in copied:
                view.copy_(dense)
            return result

        like = None if self.out_like is None else inputs.index(self.out_like)
        out_dtype = self.out_dtype(config) if returns_out else None
        empty_like = torch.empty_like
        accepts = self.plain_predicate(config, strided_rows=strided_rows)

        # A plain call's launch, its inputs as the launch takes them (the predicate said so: rows with tokens,
        # dense or, where the launch takes them, row-strided): one of four, picked here rather than on every call.
        if not returns_out:
            picked = returned or ()

            def run_plain(args: tuple[Any, ...]) -> Any:
                launch(*args)
                return tuple([args[index] for index in picked])
        elif not writes_out:

            def run_plain(args: tuple[Any, ...]) -> Any:
                return launch(*args)
        elif like is None and (out_width := self.out_width(config)) is not None:
            # rows [tokens, width] in the row input's dtype (the predicate checked it), or in out_dtype: ``new_empty``
            # with the shape alone is the cheapest allocation torch has from Python (a GEMM's decode call pays it)
            layout = self.plain_layout(config)
            same_dtype = layout is not None and layout[token_position][0] is out_dtype

            def run_plain(args: tuple[Any, ...]) -> Any:
                first = args[token_position]
                if same_dtype:
                    result = first.new_empty((first.shape[0], out_width))
                else:
                    result = first.new_empty((first.shape[0], out_width), dtype=out_dtype)
                launch(*args, result)
                return result
        elif like is None:

            def run_plain(args: tuple[Any, ...]) -> Any:
                result = output(config, *args)
                launch(*args, result)
                return result
        else:

            def run_plain(args: tuple[Any, ...]) -> Any:
                # dense inputs: ``empty_like`` gives a dense result, for less host time than ``output``
                result = empty_like(args[like], dtype=out_dtype)
                launch(*args, result)
                return result

        # Whether a plain call may launch as it is: on the device kind the launch dereferences, that device the
        # current one (None: any device, nothing to ask).
        launches_here: Callable[[Any], bool] | None = None
        if device_type == "cuda":

            def launches_here(first: Any) -> bool:
                return bool(first.is_cuda and first.get_device() == current_device())
        elif device_type is not None:

            def launches_here(first: Any) -> bool:
                return bool(first.device.type == device_type)

        def checked(args: tuple[Any, ...], out: Any) -> Any:
            check(config, *args)
            if out is not None:
                if not returns_out:
                    raise KernelInputError(f"{label}: takes no out= (it writes its inputs in place)")
                check_out(config, out, *args)
            if check_aliasing is not None:
                check_aliasing(config, *args)
            if is_grad_enabled():
                refuse_grad(args, out)
            if writes_inference_tensors(args, out):
                with torch.inference_mode():
                    return served_on_device(args, out)
            return served_on_device(args, out)

        def writes_inference_tensors(args: tuple[Any, ...], out: Any) -> bool:
            """Whether the call writes a tensor made under ``torch.inference_mode()`` outside it, as a model loaded
            in inference mode and called under ``no_grad`` does: torch refuses such a write, so the call runs in
            inference mode (whose only other effect is that a new output is an inference tensor too)."""
            if (not written and out is None) or torch.is_inference_mode_enabled():
                return False
            return any(args[index].is_inference() for index in written) or (out is not None and out.is_inference())

        def served_on_device(args: tuple[Any, ...], out: Any) -> Any:
            if device_type == "cuda":
                first = args[0]
                if not first.is_cuda:  # ``is_cuda``: a flag read, where ``device.type`` builds a device object
                    wrong_device(first)
                # A launch goes to the current device; tensors on another GPU are served there (cheap to ask).
                if first.get_device() != current_device():
                    with torch.cuda.device(first.device):
                        return run(args, out)
            elif device_type is not None and args[0].device.type != device_type:
                wrong_device(args[0])
            return run(args, out)

        if accepts is None:
            serve = checked
        else:

            def serve(args: tuple[Any, ...], out: Any) -> Any:
                if out is None:
                    try:
                        plain = accepts(args)
                    except (AttributeError, TypeError):  # not a tensor: the checks say so
                        plain = False
                    if plain and (launches_here is None or launches_here(args[0])):
                        return run_plain(args)
                return checked(args, out)

        def kernel(*args: Any, out: Any = None) -> Any:
            return serve(args, out)

        # ``traceable`` calls ``serve`` with the packed arguments, one Python call less on every step.
        kernel.lazyops_serve = serve  # type: ignore[attr-defined]
        return kernel

    def traceable(
        self,
        config: Any,
        kernel: Callable[..., Any],
        operator: Callable[..., Any],
        operator_out: Callable[..., Any] | None = None,
    ) -> Callable[..., Any]:
        """The kernel a factory returns: ``kernel`` when running, the custom operators while compiling
        (``operator_out`` for calls given ``out=``)."""
        import torch

        from lazyops.specs._ops import config_values

        is_compiling = torch.compiler.is_compiling
        serve = getattr(kernel, "lazyops_serve", None)
        if serve is None:  # a kernel not made by ``guarded``

            def serve(args: tuple[Any, ...], out: Any) -> Any:
                return kernel(*args, out=out)

        values = config_values(config)
        returned = None if self.returns == "out" else tuple(self.inputs.index(name) for name in self.returns)
        label = config.label

        def call(*args: Any, out: Any = None) -> Any:
            if is_compiling():
                if out is not None:
                    if operator_out is None:
                        raise KernelInputError(f"{label}: takes no out= (it writes its inputs in place)")
                    operator_out(*args, out, *values)
                    return out
                result = operator(*args, *values)
                return result if returned is None else tuple(args[index] for index in returned)
            return serve(args, out)

        call.__name__ = call.__qualname__ = self.name.removesuffix("_tl")
        call.__doc__ = self.kernel_type.__call__.__doc__
        call.lazyops_config = config  # type: ignore[attr-defined]
        call.lazyops_operator = operator  # type: ignore[attr-defined]
        return call


def spec_of(factory: Any) -> KernelSpec | None:
    """The spec a factory was built from by :meth:`KernelSpec.implementation`, if any (wrappers forwarded)."""
    return getattr(factory, "lazyops_spec", None)
