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
    #: inputs the call updates in place
    mutates: ClassVar[tuple[str, ...]] = ()
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
    ) -> Any:
        """Decorator: ``build(config) -> launch`` becomes the public factory of this kernel.

        The factory has the spec's signature and docstring, normalises its arguments through :meth:`configure`
        and returns a kernel that runs :meth:`check`, refuses inputs that require grad while grad mode is on, and
        (``device_type``: the device kind the launch dereferences) refuses tensors on another kind of device and
        launches on the device of its tensors; then it calls ``launch``, which receives checked arguments only.
        While ``torch.compile`` traces, the kernel is the custom operator ``lazyops_<backend>::<kernel>`` instead
        (see ``lazyops.specs._ops``); ``backend`` defaults to the backend package the module belongs to. The
        factory keeps ``build``'s module and takes the spec's name, so it pickles by reference.
        """
        if build is None:
            return functools.partial(self.implementation, device_type=device_type, backend=backend)
        from lazyops.specs import _ops

        spec = self
        owner = backend or _ops.backend_of_module(build.__module__)

        def checked(config: Any) -> Callable[..., Any]:
            return spec.guarded(config, build(config), device_type)

        def factory(*args: Any, **kwargs: Any) -> Any:
            config = spec.configure(*args, **kwargs)
            kernel = checked(config)
            operator = _ops.operator(spec, owner, config, kernel, checked)
            return spec.traceable(config, kernel, operator)

        factory.__name__ = factory.__qualname__ = self.name
        factory.__module__ = build.__module__
        factory.__doc__ = type(self).configure.__doc__
        factory.__signature__ = self.signature()  # type: ignore[attr-defined]
        factory.__annotations__ = dict(type(self).configure.__annotations__, **{"return": self.kernel_type})
        factory.lazyops_spec = self  # type: ignore[attr-defined]
        factory.lazyops_backend = owner  # type: ignore[attr-defined]
        return factory

    def signature(self) -> inspect.Signature:
        """The public factory's signature: :meth:`configure`'s, returning :attr:`kernel_type`."""
        signature = inspect.signature(self.configure, eval_str=True)
        return signature.replace(return_annotation=self.kernel_type)

    def output(self, config: Any, *args: Any) -> Any:
        """An empty tensor shaped, typed and placed as the kernel's returned one (for ``returns == "out"``)."""
        raise NotImplementedError

    def guarded(self, config: Any, launch: Callable[..., Any], device_type: str | None) -> Callable[..., Any]:
        """The eager kernel: the spec's checks, then the backend's launch, which is never called without tokens (the
        token count is the first input's leading size): a call with none returns an empty output, or its in-place
        arguments, untouched."""
        import torch

        check = self.check
        is_grad_enabled = torch.is_grad_enabled
        label = config.label
        inputs = self.inputs
        current_device = torch.cuda.current_device
        returned = None if self.returns == "out" else tuple(inputs.index(name) for name in self.returns)
        output = self.output

        def empty(args: tuple[Any, ...]) -> Any:
            if returned is None:
                return output(config, *args)
            return tuple(args[index] for index in returned)

        def kernel(*args: Any) -> Any:
            check(config, *args)
            if is_grad_enabled():
                for name, tensor in zip(inputs, args, strict=False):
                    if tensor.requires_grad:
                        raise KernelInputError(
                            f"{label}: {name} requires grad while grad mode is on; lazyops kernels are for "
                            "inference and record no autograd graph: run them under torch.inference_mode() or "
                            f"torch.no_grad(), or pass {name}.detach()"
                        )
            if device_type is not None and args[0].device.type != device_type:
                raise KernelInputError(
                    f"{label}: the inputs are on {args[0].device}; this backend's kernels take {device_type} "
                    "tensors (select the 'torch' backend for tensors elsewhere)"
                )
            if args[0].shape[0] == 0:  # no tokens: nothing to launch, whatever the backend
                return empty(args)
            if device_type == "cuda":
                device = args[0].device
                # A launch goes to the current device; tensors on another GPU are served there (cheap to ask).
                if device.index != current_device():
                    with torch.cuda.device(device):
                        return launch(*args)
            return launch(*args)

        return kernel

    def traceable(self, config: Any, kernel: Callable[..., Any], operator: Callable[..., Any]) -> Callable[..., Any]:
        """The kernel a factory returns: ``kernel`` when running, the custom ``operator`` while compiling."""
        import torch

        from lazyops.specs._ops import config_values

        is_compiling = torch.compiler.is_compiling
        values = config_values(config)
        returned = None if self.returns == "out" else tuple(self.inputs.index(name) for name in self.returns)

        def call(*args: Any) -> Any:
            if is_compiling():
                result = operator(*args, *values)
                return result if returned is None else tuple(args[index] for index in returned)
            return kernel(*args)

        call.__name__ = call.__qualname__ = self.name.removesuffix("_tl")
        call.__doc__ = self.kernel_type.__call__.__doc__
        call.lazyops_config = config  # type: ignore[attr-defined]
        call.lazyops_operator = operator  # type: ignore[attr-defined]
        return call


def spec_of(factory: Any) -> KernelSpec | None:
    """The spec a factory was built from by :meth:`KernelSpec.implementation`, if any (wrappers forwarded)."""
    return getattr(factory, "lazyops_spec", None)
