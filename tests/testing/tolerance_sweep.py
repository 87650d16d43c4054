"""Many drawn cases through the judge at once: how often it refuses a correct kernel, and a wrong one.

The conformance run draws 25 cases a kernel, so a tolerance that a correct kernel breaks once in a few thousand
cases shows up as a CI failure now and then, never on demand. Here the same cases (the spec's strategy, every
calling convention) are drawn by the thousand, deterministically, and judged outside hypothesis: every refusal
is collected instead of stopping at the first, with the worst error seen as a share of its tolerance.

A module of its own (not a test file): ``test_tolerances.py`` runs it light in every run and heavy under
``-m slow``, and ``python tests/testing/tolerance_sweep.py`` prints the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings

from lazyops.specs import kernel_names, spec
from lazyops.testing import Case, ConformanceError, strategies
from lazyops.testing._compare import DTYPES, TOLERANCE
from lazyops.testing._conformance import judge_case

#: One example's largest input in the sweep: the tolerances are about values, not sizes, and small inputs keep
#: 2,000 cases a kernel and dtype to seconds on a CPU.
MAX_ELEMENTS = 4096


def drawn_cases(kernel: str, dtype: torch.dtype, count: int) -> list[Case]:
    """``count`` cases of ``kernel`` from its spec's strategy, in ``dtype``, the same ones on every run.

    Hypothesis draws them (derandomised: the cases are a function of the kernel alone), without judging anything:
    a refusal must not stop the draw, and shrinking is not wanted here.
    """
    drawn: list[Case] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategies.cases(kernel))
    def collect(case: Case) -> None:
        drawn.append(in_dtype(case, dtype))

    collect()
    return drawn


def in_dtype(case: Case, dtype: torch.dtype) -> Case:
    """``case`` with its kernel dtype (the factory argument that is a ``torch.dtype``) replaced by ``dtype``."""
    return replace(case, args=tuple(dtype if isinstance(arg, torch.dtype) else arg for arg in case.args))


@dataclass
class Sweep:
    """What the judge said about one kernel in one dtype over many cases."""

    kernel: str
    dtype: torch.dtype
    cases: int = 0
    #: ``(case, message)`` for each case the judge refused
    refused: list[tuple[Case, str]] = field(default_factory=list)
    #: the largest error seen in an accepted case, as a share of its dtype's tolerance
    worst_share: float = 0.0

    def __str__(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return (
            f"{self.kernel:18} {dtype:9} {self.cases:5} cases, {len(self.refused):5} refused, "
            f"worst accepted error {self.worst_share:.2f} of the tolerance"
        )


def sweep(factory: Callable[..., Any], kernel: str, dtype: torch.dtype, count: int) -> Sweep:
    """Judge ``factory`` (a kernel factory, ``rmsnorm_tl(n, dtype, ...)``) on ``count`` drawn cases in ``dtype``."""
    result = Sweep(kernel, dtype)
    for case in drawn_cases(kernel, dtype, count):
        result.cases += 1
        try:
            error, judged_dtype = judge_case(factory, case, device="cpu", max_elements=MAX_ELEMENTS)
        except ConformanceError as refusal:
            result.refused.append((case, str(refusal)))
        else:
            result.worst_share = max(result.worst_share, error / TOLERANCE[judged_dtype])
    return result


def torch_factory(kernel: str) -> Callable[..., Any]:
    """The torch backend's factory of ``kernel``: a correct kernel, the one every backend is compared with."""
    from lazyops import _api

    return _api.kernel_factory("torch", kernel)


def scaled(kernel: str, factor: float) -> Callable[..., Any]:
    """The torch backend's ``kernel`` with every result it produces (the returned tensor, each input it updates)
    multiplied by ``factor``: a kernel off by ``factor - 1``."""
    kernel_spec = spec(kernel)
    factory = torch_factory(kernel)

    def scale(tensor: torch.Tensor) -> None:
        tensor.copy_((tensor.to(torch.float64) * factor).to(tensor.dtype))

    def wrong_factory(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        right = factory(*args, **kwargs)

        def wrong(*inputs: Any, **options: Any) -> Any:
            result = right(*inputs, **options)
            results = [result] if kernel_spec.returns == "out" else []
            results += [inputs[kernel_spec.inputs.index(name)] for name in kernel_spec.mutates]
            for tensor in {id(tensor): tensor for tensor in results}.values():  # an aliased out= scaled once
                scale(tensor)
            return result

        return wrong

    return wrong_factory


def without_eps(kernel: str) -> Callable[..., Any]:
    """The torch backend's ``kernel`` built with a negligible ``eps`` whatever the caller asks: a norm that forgets
    ``eps`` (the factories refuse ``eps=0``)."""
    factory = torch_factory(kernel)

    def wrong_factory(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        return factory(*args, **dict(kwargs, eps=1e-30))

    return wrong_factory


def returns_float8(kernel: str) -> bool:
    """The fp8 norms return float8_e4m3fn, whose spacing is 6 % of a value: 1 % off is below what it resolves."""
    kernel_spec = spec(kernel)
    case = drawn_cases(kernel, torch.float16, 1)[0]
    config = kernel_spec.bind(*case.args, **case.kwargs)
    return kernel_spec.returns == "out" and kernel_spec.out_dtype(config).itemsize == 1


def off_by(kernel: str) -> float:
    """How far off the wrong kernel is: 1 %, or 10 % for a float8 output (its tolerance is 6 %)."""
    return 1.10 if returns_float8(kernel) else 1.01


def takes_eps(kernel: str) -> bool:
    return "eps" in spec(kernel).signature().parameters


def main() -> None:
    """Print the sweep of every kernel and dtype: the torch backend, then the same kernels 1 % off and without eps."""
    import argparse

    from lazyops.testing import _compare

    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases per kernel and dtype (default 2000)")
    parser.add_argument(
        "--wrong-cases", type=int, default=300, help="cases per kernel and dtype of the wrong kernels (default 300)"
    )
    parser.add_argument("--kernels", default=",".join(kernel_names()), help="comma-separated kernel names")
    parser.add_argument(
        "--variants", default="torch,off,no-eps", help="which kernels: torch, off (1 %%, 10 %% for fp8 out), no-eps"
    )
    parser.add_argument(
        "--floor-factor",
        type=float,
        default=1.0,
        help="judge with the absolute floor's arithmetic share times this (below 1: how much margin it has)",
    )
    arguments = parser.parse_args()
    _compare.ARITHMETIC *= arguments.floor_factor
    variants = arguments.variants.split(",")
    for kernel in arguments.kernels.split(","):
        for dtype in DTYPES:
            factories = {"torch": torch_factory(kernel), "off": scaled(kernel, off_by(kernel))}
            if takes_eps(kernel):
                factories["no-eps"] = without_eps(kernel)
            for variant in [variant for variant in variants if variant in factories]:
                count = arguments.cases if variant == "torch" else arguments.wrong_cases
                result = sweep(factories[variant], kernel, dtype, count)
                label = f"x{off_by(kernel):.2f}" if variant == "off" else variant
                print(f"{label:7} {result}", flush=True)
                if variant == "torch":
                    for case, message in result.refused[:5]:
                        print(f"          {message.splitlines()[0]}\n            {case!r}")


if __name__ == "__main__":
    main()
