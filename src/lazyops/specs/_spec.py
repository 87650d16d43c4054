"""``KernelSpec``: a kernel's contract, written once, that every backend's implementation is held to.

A spec says what a kernel *is*, apart from how any backend computes it: the factory's signature and docstring
(:meth:`KernelSpec.bind`, which normalises the factory's arguments into the kernel's static configuration), the
call's parameters (``params``, ``out``: ``lazyops.specs._params``) and the float64 :meth:`~KernelSpec.reference`.
Everything else is derived from the declared parameters: the checks every call passes before anything is written,
the layout the engine's fast path recognises, the output's shape, for rows, fixed tensors and tensors of declared
shapes alike (caches, index tensors, scales, optional keyword buffers). What a kernel is tried on (the
conformance cases, the inputs of one call, the traffic model, the benchmark's configuration) is not the contract:
it lives in ``lazyops.testing.cases.<kernel>``, which reads the spec; the spec never imports it.

A backend module keeps only what is its own (layout, launch, the kernel body) and turns it into the public factory
with :meth:`KernelSpec.implementation` (the engine that builds the call is ``lazyops.specs._engine``):

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
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from lazyops._errors import KernelInputError
from lazyops.specs._params import (
    TOKEN_DIMS,
    TOKENS,
    Fixed,
    FromTokens,
    Out,
    Param,
    Rows,
    Tensor,
    allowed_of,
    dtype_of,
    size_of,
    symbol_of,
)

if TYPE_CHECKING:
    import torch

    from lazyops.specs import _checks as checks
    from lazyops.specs._engine import PlainInput


@dataclass(frozen=True)
class Traffic:
    """What one call moves and computes: bytes (each input read once, each output written once) and FLOPs. A record
    of the examples (``lazyops.testing.cases``), kept here with :class:`Example` so that specs and tools name them
    without importing the examples.

    ``bound`` names the one that limits the kernel, so a benchmark reports GB/s or TFLOP/s accordingly.
    """

    bytes: int
    flops: int = 0
    bound: str = "memory"


@dataclass(frozen=True)
class Example:
    """The static configuration and input geometry one benchmark or check uses (args and kwargs of the factory)."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    geometry: Mapping[str, Any] = field(default_factory=dict)


class KernelSpec:
    """The contract of one kernel. A subclass declares ``name``, ``kernel_type``, ``params`` and ``out``, and writes
    :meth:`bind` and :meth:`reference`; the rest follows from the declarations.

    Derived once per class from ``params`` and ``out`` (what the conformance kit, the engine and the tools read):
    ``inputs`` (the parameters' names, in call order), ``row_inputs`` (the token-indexed ones: rows, and tensors
    whose shape starts with ``"*T"``), ``mutates`` (those updated in place), ``out_aliases`` (what ``out=`` may be),
    ``returns`` (``"out"``, or the names of the inputs the call updates and returns, rope's ``("query", "key")``),
    ``results`` (what :meth:`reference` returns, in order: ``"out"`` first if there is one, then each updated input)
    and ``free_widths`` (tensors whose last size nothing fixes: a block table's).
    """

    #: the factory's public name (``rmsnorm_tl``)
    name: ClassVar[str]
    #: the Protocol of the kernel call (typed in the stubs)
    kernel_type: ClassVar[Any]
    #: the kernel call's positional parameters, in order
    params: ClassVar[tuple[Param, ...]] = ()
    #: the tensor the call returns; None for a kernel that updates its inputs in place and returns them
    out: ClassVar[Out | None] = None

    inputs: ClassVar[tuple[str, ...]] = ()
    row_inputs: ClassVar[tuple[str, ...]] = ()
    mutates: ClassVar[tuple[str, ...]] = ()
    out_aliases: ClassVar[tuple[str, ...]] = ()
    returns: ClassVar[str | tuple[str, ...]] = "out"
    results: ClassVar[tuple[str, ...]] = ("out",)
    #: how the conformance kit judges the kernel: ``"close"`` to the float64 reference, ``"exact"`` (integer results
    #: only, each element equal to the reference's: no tolerance to try), or ``"draws"`` (a sampler, whose reference
    #: is the distribution it draws from: ``lazyops.testing._draws``)
    judgement: ClassVar[str] = "close"
    #: written inputs computed from a float32 computation's result rather than rounded once from the definition (the
    #: fp8 norms' dynamic scales, from the float32 norm's maximum): the kit judges each element of them to its
    #: dtype's relative tolerance, not to one unit in the last place
    derived_results: ClassVar[tuple[str, ...]] = ()
    #: keyword-only parameters the call may leave out (``Tensor(..., keyword=True)``), the last of :attr:`inputs`
    keywords: ClassVar[tuple[str, ...]] = ()
    free_widths: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _refuse_the_old_form(cls)
        if cls.bind is not KernelSpec.bind and not hasattr(cls.bind, "__wrapped__"):  # its own, or a mixin's
            cls.bind = _factory_named(cls.bind)  # type: ignore[method-assign]
        params, out = cls.params, cls.out
        mutates = tuple(param.name for param in params if getattr(param, "mutated", False))
        derived = {
            "inputs": tuple(param.name for param in params),
            "row_inputs": tuple(param.name for param in params if _token_indexed(param)),
            "mutates": mutates,
            "out_aliases": (out.may_alias,) if out is not None and out.may_alias else (),
            "returns": "out" if out is not None else mutates,
            "results": ("out", *mutates) if out is not None else mutates,
            "free_widths": tuple(
                p.name
                for p in params
                if isinstance(p, Tensor) and isinstance(p.shape, tuple) and p.shape[-1:] == (None,)
            ),
        }
        for name, value in derived.items():
            if name not in cls.__dict__:  # a spec may say more than its declarations
                setattr(cls, name, value)
        _refuse_tokens_before_rows(cls)
        keywords = tuple(param.name for param in params if getattr(param, "keyword", False))
        if keywords and cls.inputs[-len(keywords) :] != keywords:
            raise TypeError(f"{cls.__qualname__}: keyword parameters ({', '.join(keywords)}) must be declared last")
        cls.keywords = keywords

    # -- what a spec writes ----------------------------------------------------------------------------------------
    def bind(self, *args: Any, **kwargs: Any) -> Any:
        """The factory's arguments, checked and normalised into the kernel's static configuration (a frozen
        dataclass with a ``label``), or ``KernelInputError``.

        Its signature and docstring are the public factory's: :meth:`implementation` copies them.
        """
        raise NotImplementedError

    def reference(self, config: Any, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The definition: :attr:`results`, computed in the inputs' dtype (float64 when testing)."""
        raise NotImplementedError

    def tolerance(self, config: Any) -> float | None:
        """The relative tolerance the returned tensor is judged by, where its dtype's (``specs._tolerance.TOLERANCE``)
        is not what a correct kernel reaches (a GEMM's grows with ``k``); None: the dtype's."""
        return None

    # -- the public factory ----------------------------------------------------------------------------------------
    def implementation(
        self,
        build: Callable[[Any], Callable[..., Any]] | None = None,
        *,
        device_type: str | None = None,
        backend: str | None = None,
        strided_rows: bool = False,
        writes_out: bool = False,
        supports: Callable[[Any], str | None] | None = None,
    ) -> Any:
        """Decorator: ``build(config) -> launch`` becomes the public factory of this kernel.

        The factory has the spec's signature and docstring and returns a kernel that checks every call before
        anything is written, then calls ``launch`` with checked, two-dimensional arguments (each token-indexed input
        a ``[rows, width]`` view; never without tokens). ``device_type`` is the device kind the launch dereferences
        (tensors elsewhere are refused; a launch runs on the device of its tensors). Under ``torch.compile`` the
        kernel is the custom operator ``lazyops_<backend>::<kernel>``; ``backend`` defaults to the backend package
        the module belongs to.

        Two flags say how much of the calling conventions the launch serves itself; for what it does not, the
        kernel adapts the call, at the cost of a copy, so that a half-finished port still runs every call:

        - ``strided_rows``: it indexes rows by their stride (``x.stride(0)``), so views of packed buffers reach it
          as they are. Without it, such a view is copied to a contiguous tensor (and copied back if written).
        - ``writes_out``: it is ``launch(*inputs, out)`` and writes the result into ``out`` (a ``[rows, width]``
          view). Without it, ``launch(*inputs)`` returns a new tensor of its own, copied into a caller's ``out=``.

        ``supports(config)``: ``None`` where the launch serves the configuration, else why not (``"head_dim 96:
        the tiles take 64, 128 or 256"``). A configuration it declines goes on down the backend chain to the next
        backend that serves it, as a kernel a backend lacks does (``lazyops.which(name, *args)`` says where); the
        factory called with one directly refuses it with that reason.

        See ``lazyops.specs._engine`` for how a call runs.
        """
        from lazyops.specs._engine import implementation

        def decorate(function: Callable[[Any], Callable[..., Any]]) -> Callable[..., Any]:
            return implementation(
                self,
                function,
                device_type=device_type,
                backend=backend,
                strided_rows=strided_rows,
                writes_out=writes_out,
                supports=supports,
            )

        return decorate if build is None else decorate(build)

    @property
    def factory_doc(self) -> str | None:
        """The public factory's docstring: :meth:`bind`'s, or the spec class's where ``bind`` is a family's own
        (``_norm.NormFamily``) and the member's docstring says what its factory does."""
        return type(self).bind.__doc__ or type(self).__doc__

    def signature(self) -> inspect.Signature:
        """The public factory's signature: :meth:`bind`'s, returning :attr:`kernel_type`."""
        signature = inspect.signature(self.bind, eval_str=True)
        return signature.replace(return_annotation=self.kernel_type)

    # -- derived from the declarations -----------------------------------------------------------------------------
    def check(self, config: Any, *args: Any) -> None:
        """Refuse a call the kernel cannot serve, before anything is written (``KernelInputError``): each declared
        parameter's kind, dtype, device, shape and layout, the sizes the call binds agreeing, the token-indexed
        inputs' leading dimensions equal; then, where they are read, the index values (:meth:`check_values`)."""
        from lazyops.specs import _checks as checks

        label = config.label
        if len(args) != len(self.params):
            keywords = "".join(f", {name}=" for name in self.keywords)
            raise KernelInputError(
                f"{label}: takes {len(self.params) - len(self.keywords)} tensors "
                f"({', '.join(self.inputs[: len(self.params) - len(self.keywords)])}){keywords}; got {len(args)}"
            )
        device = None
        leading = first = None
        bound: checks.Bound = {}
        for param, arg in zip(self.params, args, strict=True):
            name = param.name
            if isinstance(param, Fixed):
                shape = tuple(size_of(size, config) for size in param.shape)
                checks.check_tensor(label, name, arg, shape=shape, dtype=dtype_of(param.dtype, config), device=device)
            elif isinstance(param, Tensor) and param.keyword and not _given(label, config, param, arg, args, self):
                continue
            elif isinstance(param, Tensor) and not _token_indexed(param):
                _check_declared(label, config, _resolved(param, config), arg, device, bound)
            else:  # token-indexed: rows, or a tensor whose shape starts with "*T"
                if isinstance(param, Rows) and param.head is None:  # (rows, as most kernels take: one frame less)
                    width, dtype = size_of(param.width, config), dtype_of(param.dtype, config)
                    checks.check_rows(label, name, arg, width=width, dtype=dtype, device=device)
                    features = 1
                else:
                    lead = 1 if leading is None else len(leading)
                    features = _check_tokens(label, config, param, arg, device, lead, bound)
                token_dims = arg.shape[: arg.dim() - features]
                if leading is None:
                    leading, first = token_dims, name
                    bound[TOKENS] = (math.prod(token_dims), name, tuple(arg.shape))
                elif token_dims != leading:
                    raise KernelInputError(
                        f"{label}: {first} has leading (token) dimensions {tuple(leading)} and {name} "
                        f"{tuple(token_dims)}; they must be equal"
                    )
            if device is None:
                device = arg.device
        if type(self).check_values is not KernelSpec.check_values and checks.reads_values(
            args[0], getattr(config, "validate", False)
        ):
            self.check_values(config, *args)

    def check_values(self, config: Any, *args: Any) -> None:
        """Refuse index values a launch would trust (block ids, lengths, slots, positions): what only reading them
        shows, so it runs where they are read, on the host always and on a device only with the factory's
        ``validate=True`` (a synchronising read), never for tensors without values (``_checks.reads_values``). Called
        by :meth:`check` and by the fast path, with the call's arguments; a spec with index tensors writes it."""

    def written(self, config: Any) -> tuple[str, ...]:
        """The inputs a call writes under ``config``: :attr:`mutates`, less those a ``Tensor.mutated`` function says
        this configuration only reads (a static fp8 scale)."""
        params = self.params
        return tuple(
            name
            for name in self.mutates
            if not callable(mutated := getattr(params[self.inputs.index(name)], "mutated", True)) or mutated(config)
        )

    def plain_layout(self, config: Any) -> tuple[PlainInput, ...] | None:
        """How the call engines make on every step looks, one entry per parameter (rows ``[tokens, width]``, dense or
        row-strided; fixed tensors of their exact shape; tensors of their declared sizes, ``"*T"`` one dimension
        of tokens there), or None where the spec has no fast path (a rows parameter whose width the spec checks
        itself)."""
        from lazyops.specs import _engine as engine

        layout = []
        for param in self.params:
            if isinstance(param, Rows) and (param.width is not None or param.head is not None):
                width = 0 if param.width is None else size_of(param.width, config)
                head = size_of(param.head, config) if param.width is None else 0
                layout.append(engine.rows_input(width, dtype_of(param.dtype, config), head=head, strided=True))
            elif isinstance(param, Fixed):
                shape = tuple(size_of(size, config) for size in param.shape)
                layout.append(engine.fixed_input(shape, dtype_of(param.dtype, config)))
            elif isinstance(param, Tensor) and param.shape == (TOKEN_DIMS,) and not param.keyword:
                layout.append(engine.tokens_input(dtype_of(param.dtype, config)))
            elif isinstance(param, Tensor):
                declared = _resolved(param, config)
                presence = ""
                if declared.keyword:
                    needed = None if declared.present is None else declared.present(config)
                    presence = "optional" if needed is None else "required" if needed else "absent"
                    if declared.together and presence == "optional":  # a pair given takes the full checks
                        presence = "absent"
                declared_shape = _shape(declared)
                # "*T": one token dimension here; the sizes of a tensor this configuration must not have are never
                # compared (it is left out)
                plain = (TOKENS, *declared_shape[1:]) if _token_indexed(declared) else declared_shape
                sizes = tuple(None if presence == "absent" else _plain_size(size, config) for size in plain)
                dtype = dtype_of(declared.dtype, config)
                layout.append(engine.shaped_input(sizes, dtype, layout=_layout(declared), presence=presence))
            else:
                return None
        return tuple(layout)

    def plain_predicate(
        self, config: Any, *, strided_rows: bool, device_type: str | None
    ) -> Callable[[tuple[Any, ...]], bool] | None:
        """The kernel's fast path: a predicate over a call's packed arguments that answers True only for a call the
        full checks accept (grad mode, aliasing, inference tensors and index values included) and the launch takes
        as it is (rows ``[tokens, width]`` with tokens, dense or, where the launch takes them, row-strided, on one
        device of ``device_type``, the current one for CUDA). None: every call takes the full checks. Derived from
        :meth:`plain_layout` (``_engine.plain_call``)."""
        from lazyops.specs import _engine as engine

        layout = self.plain_layout(config)
        if layout is None:
            return None
        written = tuple(sorted(self.inputs.index(name) for name in self.written(config)))
        reads = type(self).check_values is not KernelSpec.check_values
        accepts: Callable[[tuple[Any, ...]], bool] = engine.plain_call(
            layout,
            written,
            device_type,
            strided_rows=strided_rows,
            values=functools.partial(self.check_values, config) if reads else None,
            validate=bool(getattr(config, "validate", False)),
        )
        return accepts

    # -- the output ------------------------------------------------------------------------------------------------
    def out_width(self, config: Any) -> int | None:
        """The width of the returned rows when they are not shaped like an input (a GEMM's ``n``, a gated
        activation's half width); None when the output is shaped like :attr:`Out.like`'s input."""
        out = self.out
        return None if out is None or out.width is None else size_of(out.width, config)

    def out_dtype(self, config: Any) -> torch.dtype:
        """The dtype of the tensor the kernel returns: the factory's, unless the kernel converts (fp8 outputs)."""
        out = self.out
        return dtype_of("dtype" if out is None else out.dtype, config)  # type: ignore[no-any-return]

    def out_shape(self, config: Any, *args: Any) -> tuple[int, ...]:
        """The shape of the tensor the kernel returns, from the call's arguments: that of the input
        :attr:`Out.like` names, else the first token-indexed input's leading dimensions and :meth:`out_width`."""
        out = self.out
        if out is not None and out.like is not None:
            return tuple(args[self.inputs.index(out.like)].shape)
        width = self.out_width(config)
        if width is None or not self.row_inputs:
            raise NotImplementedError(f"{type(self).__name__}: out_shape is the spec's to say")
        return (*args[self.inputs.index(self.row_inputs[0])].shape[:-1], width)

    def output(self, config: Any, *args: Any) -> torch.Tensor:
        """An empty (contiguous) tensor shaped, typed and placed as the kernel's returned one."""
        empty: torch.Tensor = args[0].new_empty(self.out_shape(config, *args), dtype=self.out_dtype(config))
        return empty

    def tokens(self, config: Any, *args: Any) -> int:
        """The call's token count: the product of the first token-indexed input's leading dimensions (an input
        ``[1, 64, 256]`` is 64 tokens; a query ``[T, H, D]``, T; positions ``[B, S]``, ``B * S``)."""
        if not self.row_inputs:
            return math.prod(args[0].shape[:-1])
        return math.prod(self._leading(config, args))

    def _leading(self, config: Any, args: tuple[Any, ...]) -> tuple[int, ...]:
        """The first token-indexed input's leading (token) dimensions."""
        index = self.inputs.index(self.row_inputs[0])
        arg = args[index]
        return tuple(arg.shape[: arg.dim() - _features(config, self.params[index], arg, 1)])

    def rows(self, config: Any, *args: Any) -> tuple[Any, ...]:
        """The call's arguments as a launch receives them: each token-indexed input as a ``[rows, width]`` view
        (heads given as a dimension of their own folded into the row), or ``[rows]`` (rope's positions)."""
        leading = self._leading(config, args)
        tokens, lead = math.prod(leading), len(leading)
        keywords = self.keywords
        return tuple(
            arg.view(tokens, *((math.prod(arg.shape[lead:]),) if arg.dim() > lead else ()))
            if name in self.row_inputs and not (name in keywords and (arg is None or not arg.numel()))
            else arg
            for name, arg in zip(self.inputs, args, strict=True)
        )

    def out_rows(self, config: Any, out: torch.Tensor) -> torch.Tensor:
        """``out`` as the ``[rows, width]`` view a launch writes (itself when 2-D), heads folded into the row."""
        if out.dim() == 2:
            return out
        like = self._out_like()
        if like is not None and like.head is not None and like.width is not None:
            return out.view(-1, size_of(like.width, config))
        return out.view(-1, out.shape[-1])

    def _out_like(self) -> Rows | None:
        """The token-indexed input the output is shaped like, if any."""
        out = self.out
        if out is None or out.like is None:
            return None
        param = self.params[self.inputs.index(out.like)]
        return param if isinstance(param, Rows) else None

    def flat_ranks(self) -> tuple[tuple[int, int], ...]:
        """``(position, rank)`` of each token-indexed input as a launch receives it: 2 for rows (``[rows, width]``),
        a token-indexed tensor's own (rope's positions ``[tokens]``: 1). Not a keyword tensor, which may be left out:
        :meth:`rows` flattens it with the others."""
        return tuple(
            (index, len(_shape(param)) if isinstance(param, Tensor) else 2)
            for index, param in enumerate(self.params)
            if param.name in self.row_inputs and not getattr(param, "keyword", False)
        )

    def check_out(self, config: Any, out: Any, *args: Any) -> None:
        """Refuse an ``out=`` the kernel cannot write: its shape, dtype, device and layout (as the input it is shaped
        like, heads and all), and any overlap with an input other than an exact alias the math allows
        (:attr:`out_aliases`)."""
        from lazyops.specs import _checks as checks

        label = config.label
        expected = self.out_shape(config, *args)
        dtype, device = self.out_dtype(config), args[0].device
        like = self._out_like()
        if like is not None and like.head is not None:
            width = None if like.width is None else size_of(like.width, config)
            head = size_of(like.head, config)
            checks.check_head_rows(
                label, "out", out, width=width, head=head, head_name="head", dtype=dtype, device=device, lead=1
            )
        else:
            checks.check_rows(label, "out", out, width=None, dtype=dtype, device=device)
        if tuple(out.shape) != tuple(expected):
            raise KernelInputError(
                f"{label}: out has shape {tuple(out.shape)}; this call writes {tuple(expected)} (pass out=None to "
                "have the kernel allocate it)"
            )
        for name, arg in zip(self.inputs, args, strict=True):
            if arg is not None and checks.overlap(out, arg):  # (an empty tensor overlaps nothing)
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
        a ``view(dtype)`` of an input is the same memory, and writing it changes what the other reads. A keyword
        tensor left out (None, or empty) shares nothing; an input this configuration only reads (:meth:`written`) is
        compared as any other."""
        from lazyops.specs import _checks as checks

        for written, other in self.aliasing_pairs(config):
            if args[other] is not None and args[written] is not None and checks.overlap(args[written], args[other]):
                inputs = self.inputs
                raise KernelInputError(
                    f"{config.label}: {inputs[written]} overlaps {inputs[other]} in memory; {inputs[written]} is "
                    "written in place, so they must not share elements (not through a view of another dtype "
                    "either): pass separate tensors"
                )

    def aliasing_pairs(self, config: Any = None) -> tuple[tuple[int, int], ...]:
        """The (written input, other input) positions :meth:`check_aliasing` compares, each pair once: those
        :meth:`written` names under ``config`` (None: every input the kernel may write)."""
        inputs = self.inputs
        mutates = self.mutates if config is None else self.written(config)
        return tuple(
            (inputs.index(written), other)
            for position, written in enumerate(mutates)
            for other, name in enumerate(inputs)
            if name != written and name not in mutates[:position]
        )


def _declared(size: Any, config: Any) -> checks.Declared:
    """A :class:`Tensor`'s size for ``config``: None (any), the ``(symbol, offset)`` the call binds, or the int (or
    ``range``) the configuration gives."""
    if size is None:
        return None
    return symbol_of(size) or allowed_of(size, config)


def _fixed(dtype: Any) -> bool:
    """A dtype no factory argument changes (none named by a configuration field): ``_checks.check_kind``'s hint."""
    return not any(isinstance(each, str) for each in (dtype if isinstance(dtype, tuple) else (dtype,)))


def _resolved(param: Tensor, config: Any) -> Tensor:
    """``param`` with the attributes a function of the configuration gives (``shape``, ``layout``) for ``config``."""
    if not callable(param.shape) and not callable(param.layout):
        return param
    shape = param.shape(config) if callable(param.shape) else param.shape
    return replace(param, shape=shape, layout=param.layout(config) if callable(param.layout) else param.layout)


def _shape(param: Tensor) -> tuple[Any, ...]:
    """A resolved (or class-level tuple) :class:`Tensor`'s shape (:func:`_resolved`)."""
    return param.shape if isinstance(param.shape, tuple) else ()


def _layout(param: Tensor) -> str | tuple[str, ...]:
    """A resolved :class:`Tensor`'s layout (:func:`_resolved`)."""
    return param.layout if isinstance(param.layout, str | tuple) else "dense"


def _plain_size(size: Any, config: Any) -> Any:
    """A :class:`Tensor`'s size as ``_engine.shaped_input`` takes it: a symbol as it is, a :class:`FromTokens` as a
    function of the token count alone, else :func:`_declared`."""
    if symbol_of(size):
        return size
    if isinstance(size, FromTokens):
        return functools.partial(size.size, config)
    return _declared(size, config)


def _left_out(config: Any, param: Tensor, arg: Any) -> bool:
    """Whether the keyword tensor ``param`` is left out: None, or an empty tensor of its dtype."""
    from lazyops.specs import _checks as checks

    if arg is None:
        return True
    dtype = dtype_of(param.dtype, config)
    return (
        isinstance(arg, checks.tensor_type())
        and not arg.numel()
        and arg.dtype in (dtype if isinstance(dtype, tuple) else (dtype,))
    )


def _given(label: str, config: Any, param: Tensor, arg: Any, args: tuple[Any, ...], spec: KernelSpec) -> bool:
    """Whether the keyword tensor ``param`` is given (neither None nor an empty tensor of its dtype); refuses one the
    configuration needs and the call left out, or one it must not have (``Tensor.present``), or one given without
    the tensor it goes with (``Tensor.together``)."""
    left_out = _left_out(config, param, arg)
    needed = None if param.present is None else param.present(config)
    if left_out and needed:
        raise KernelInputError(f"{label}: {param.name} is {'None' if arg is None else 'empty'}; {param.why}")
    if not left_out and needed is False:
        raise KernelInputError(f"{label}: {param.name} is given; {param.why}: pass {param.name}=None")
    if param.together:
        partner = spec.params[spec.inputs.index(param.together)]
        partner_left_out = _left_out(config, partner, args[spec.inputs.index(param.together)])  # type: ignore[arg-type]
        if left_out != partner_left_out:
            absent = param.name if left_out else param.together
            raise KernelInputError(
                f"{label}: {param.name} and {param.together} go together; {absent} is absent: pass both or neither"
            )
    return not left_out


def _check_declared(
    label: str, config: Any, param: Tensor, arg: Any, device: Any, bound: checks.Bound, tokens: int = 0
) -> None:
    """``_checks.check_shaped`` of a :class:`Tensor` (``tokens``: the leading dimensions its ``"*T"`` stands for)."""
    from lazyops.specs import _checks as checks

    sizes: tuple[checks.Declared, ...] = (None,) * tokens + tuple(
        size.size(config, bound[TOKENS][0]) if isinstance(size, FromTokens) else _declared(size, config)
        for size in _shape(param)[1 if tokens else 0 :]
    )
    dtype, fixed = dtype_of(param.dtype, config), _fixed(param.dtype)
    checks.check_shaped(
        label, param.name, arg, shape=sizes, dtype=dtype, device=device, layout=_layout(param), bound=bound, fixed=fixed
    )


def _check_tokens(
    label: str, config: Any, param: Rows | Tensor, arg: Any, device: Any, lead: int, bound: checks.Bound
) -> int:
    """Check a token-indexed input of heads, or a ``"*T"`` tensor, given ``lead`` token dimensions (those of the call's
    first token-indexed input; 1 for the first); returns how many of its trailing dimensions are not tokens."""
    from lazyops.specs import _checks as checks

    if isinstance(param, Tensor):  # ``("*T", ...)``: any leading dimensions (at least one), then its own sizes
        rest = len(_shape(param)) - 1
        _check_declared(label, config, param, arg, device, bound, max(1, len(getattr(arg, "shape", ())) - rest))
        return rest
    return checks.check_head_rows(
        label,
        param.name,
        arg,
        width=None if param.width is None else size_of(param.width, config),
        head=size_of(param.head, config),
        head_name=param.head if isinstance(param.head, str) else "head",
        dtype=dtype_of(param.dtype, config),
        device=device,
        lead=lead,
    )


def _features(config: Any, param: Param, arg: Any, lead: int) -> int:
    """How many trailing dimensions of a checked token-indexed ``arg`` are not tokens (``lead``: as for
    :func:`_check_tokens`)."""
    if isinstance(param, Tensor):
        return len(_shape(param)) - 1
    if isinstance(param, Rows) and param.head is not None and arg.dim() == lead + 2:
        head, shape = size_of(param.head, config), arg.shape
        if shape[-1] == head and (param.width is None or shape[-2] * head == size_of(param.width, config)):
            return 2
    return 1


def _token_indexed(param: Param) -> bool:
    return isinstance(param, Rows) or (
        isinstance(param, Tensor) and isinstance(param.shape, tuple) and param.shape[:1] == (TOKEN_DIMS,)
    )


def _refuse_tokens_before_rows(cls: type[KernelSpec]) -> None:
    """``"T"``, the token count, is the first token-indexed input's: a tensor sized by it comes after that input."""
    for param in cls.params:
        if _token_indexed(param):
            return
        if (
            isinstance(param, Tensor)
            and isinstance(param.shape, tuple)
            and any((symbol_of(size) or ("",))[0] == TOKENS or isinstance(size, FromTokens) for size in param.shape)
        ):
            raise TypeError(
                f"{cls.__qualname__}: {param.name} is sized by T, the token count, before any token-indexed input "
                "(Rows, or a Tensor whose shape starts with '*T'): declare one first"
            )


def _factory_named(bind: Callable[..., Any]) -> Callable[..., Any]:
    """``bind``, whose ``TypeError`` for arguments its signature does not take names the public factory (``bind``
    is its signature, but users call ``paged_attention_tl(...)``, not ``PagedAttentionSpec.bind()``) and says which
    keyword arguments have no default."""

    @functools.wraps(bind)
    def factory(self: KernelSpec, *args: Any, **kwargs: Any) -> Any:
        try:
            return bind(self, *args, **kwargs)
        except TypeError:
            signature = inspect.signature(bind)
            try:
                signature.bind(self, *args, **kwargs)
            except TypeError as wrong:
                missing = [
                    name
                    for name, parameter in signature.parameters.items()
                    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
                    and parameter.default is inspect.Parameter.empty
                    and name not in kwargs
                ]
                hint = "".join(f" ({name}= is a required keyword argument: it has no default)" for name in missing)
                raise TypeError(f"{self.name}(): {wrong}{hint}") from None
            raise  # raised inside bind: not the call's arguments

    return factory


def _refuse_the_old_form(cls: type) -> None:
    """A spec written for lazyops 0.1's ``KernelSpec`` (``configure``, names in ``inputs``) fails here, saying how to
    move, rather than later with an error about a missing method."""
    old = [name for name in ("configure", "guarded", "traceable", "plain_layout_of") if name in cls.__dict__]
    if isinstance(cls.__dict__.get("inputs"), tuple) and any(isinstance(n, str) for n in cls.__dict__["inputs"]):
        old.append("inputs = (names...)")
    if old:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} is written for lazyops 0.1's KernelSpec ({', '.join(old)}): since "
            "0.2 a spec declares its call's parameters in `params` (Rows, Fixed, Tensor from lazyops.specs) "
            "and its output in `out` (Out), and normalises the factory's arguments in `bind` (0.1's `configure`); see "
            "the README, 'Adding a kernel', and CHANGELOG.md"
        )


def spec_of(factory: Any) -> KernelSpec | None:
    """The spec a factory was built from by :meth:`KernelSpec.implementation`, if any (wrappers forwarded)."""
    return getattr(factory, "lazyops_spec", None)
