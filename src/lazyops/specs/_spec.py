"""``KernelSpec``: a kernel's contract, written once, that every backend's implementation is held to.

A spec says what a kernel *is*, apart from how any backend computes it: the factory's signature and docstring
(:meth:`KernelSpec.bind`, which normalises the factory's arguments into the kernel's static configuration), the
call's parameters (``params``, ``out``: ``lazyops.specs._params``) and the float64 :meth:`~KernelSpec.reference`.
The class keeps what its author declares or writes: those, the ClassVars derived once from them, the index values'
check, the output's shape and dtype (hooks, for what ``out`` does not say) and the public factory. What runs on
every call is derived from the declared parameters and kept where it runs, as functions of the spec: the checks
every call passes before anything is written in ``lazyops.specs._checks`` (``check_call``, ``check_out``,
``check_aliasing``, loaded by the first call that takes them), the layout the engine's fast path recognises and
the row views a launch receives in ``lazyops.specs._engine`` (``plain_predicate``, ``as_rows``, ``token_count``),
for rows, fixed tensors and tensors of declared shapes alike (caches, index tensors, scales, optional keyword
buffers). What a kernel is tried on (the conformance cases, the inputs of one call, the traffic model, the
benchmark's configuration) is not the contract: it lives in ``lazyops.testing.cases.<kernel>``, which reads the
spec; the spec never imports it.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from lazyops.specs._params import TOKENS, FromTokens, Out, Param, Tensor, dtype_of, size_of, symbol_of, token_indexed

if TYPE_CHECKING:
    import torch


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

    Derived once per class from ``params`` and ``out`` (what the conformance kit, the engine, the checks and the tools
    read; the checks and the fast path themselves are functions of the spec, in ``_checks`` and ``_engine``):
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
    #: whether the spec writes :meth:`check_values` (what the checks and the fast path call where values are read)
    value_checks: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _refuse_the_old_form(cls)
        if cls.bind is not KernelSpec.bind and not hasattr(cls.bind, "__wrapped__"):  # its own, or a mixin's
            cls.bind = _factory_named(cls.bind)  # type: ignore[method-assign]
        params, out = cls.params, cls.out
        mutates = tuple(param.name for param in params if getattr(param, "mutated", False))
        derived = {
            "inputs": tuple(param.name for param in params),
            "row_inputs": tuple(param.name for param in params if token_indexed(param)),
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
        cls.value_checks = cls.check_values is not KernelSpec.check_values

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

    # -- the index values, and what a call writes ------------------------------------------------------------------
    def check_values(self, config: Any, *args: Any) -> None:
        """Refuse index values a launch would trust (block ids, lengths, slots, positions): what only reading them
        shows, so it runs where they are read, on the host always and on a device only with the factory's
        ``validate=True`` (a synchronising read), never for tensors without values (``_checks.reads_values``). Called
        by the full checks (``_checks.check_call``) and by the fast path (``_engine.plain_predicate``), with the call's
        arguments; a spec with index tensors writes it (:attr:`value_checks` then says so)."""

    def written(self, config: Any) -> tuple[str, ...]:
        """The inputs a call writes under ``config``: :attr:`mutates`, less those a ``Tensor.mutated`` function says
        this configuration only reads (a static fp8 scale)."""
        params = self.params
        return tuple(
            name
            for name in self.mutates
            if not callable(mutated := getattr(params[self.inputs.index(name)], "mutated", True)) or mutated(config)
        )

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
        :attr:`Out.like` names, else the first token-indexed input's leading dimensions and :meth:`out_width` (None:
        one value a row, a sampler's token ids)."""
        out = self.out
        if out is not None and out.like is not None:
            return tuple(args[self.inputs.index(out.like)].shape)
        if out is None or not self.row_inputs:
            raise NotImplementedError(f"{type(self).__name__}: out_shape is the spec's to say")
        width, leading = self.out_width(config), args[self.inputs.index(self.row_inputs[0])].shape[:-1]
        return tuple(leading) if width is None else (*leading, width)


def _refuse_tokens_before_rows(cls: type[KernelSpec]) -> None:
    """``"T"``, the token count, is the first token-indexed input's: a tensor sized by it comes after that input."""
    for param in cls.params:
        if token_indexed(param):
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
