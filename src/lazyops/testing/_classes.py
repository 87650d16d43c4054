"""One case per configuration class: the conformance check a GPU session can afford.

A backend that compiles each configuration (TileLang: seconds of lowering and nvcc a program, several programs a
configuration) pays one compile per drawn example, and drawn examples rarely share a configuration. What changes
the code a backend compiles is mostly the dtype it computes in and the options a factory sets away from their
defaults (a window, a soft-cap, an fp8 cache, a float32 weight, Gemma's offset): those are a case's *classes*.

:func:`class_cases` draws cases (cheap: nothing is built or run) and keeps, for each dtype the backend serves, the
first drawn case of it that sets the fewest options (the plain path an engine takes, in each dtype); then, while an
option drawn somewhere is set by no kept case, the first case that sets the most of those (options together, in
whatever dtype it was drawn). Every dtype and every option the spec draws is checked at least once, at one compile
per kept case: three to five a kernel.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from lazyops.testing import strategies
from lazyops.testing._case import Case

#: How many cases are drawn to find the classes among: the spec's options are each drawn about one time in four.
DRAWS = 200


def classes_of(case: Case) -> frozenset[str]:
    """``case``'s classes: ``dtype=<its dtype>`` and each field of its bound configuration that its options move
    from what the factory's required arguments alone give (``sliding_window``, ``weight_dtype``, ...)."""
    from lazyops.specs import spec

    kernel_spec = spec(case.kernel)
    config = kernel_spec.bind(*case.args, **case.kwargs)
    parameters = kernel_spec.signature().parameters
    required = {
        name: value
        for name, value in case.kwargs.items()
        if name in parameters and parameters[name].default is inspect.Parameter.empty
    }
    plain = kernel_spec.bind(*case.args, **required)
    options = {
        field.name
        for field in dataclasses.fields(config)
        if field.name != "label" and getattr(config, field.name) != getattr(plain, field.name)
    }
    return frozenset({f"dtype={str(config.dtype).removeprefix('torch.')}", *options})


def class_cases(kernel: str, factory: Any = None, *, seed: int = 0, draws: int = DRAWS) -> list[Case]:
    """One drawn case of ``kernel`` per configuration class (module docstring), the same ones on every run for a
    ``seed``; with a backend's ``factory``, among the configurations it serves only."""
    import hypothesis
    from hypothesis import HealthCheck, Phase, given

    drawn: list[Case] = []

    @hypothesis.settings(
        max_examples=draws,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategies.cases(kernel, factory))
    def collect(case: Case) -> None:
        drawn.append(case)

    hypothesis.seed(seed)(collect)()
    return covering(drawn)


def covering(cases: list[Case]) -> list[Case]:
    """The cases :func:`class_cases` keeps of ``cases`` (module docstring), in the order kept."""
    classes = [classes_of(case) for case in cases]
    options = [{name for name in found if not name.startswith("dtype=")} for found in classes]
    dtypes = list(dict.fromkeys(name for found in classes for name in found if name.startswith("dtype=")))
    kept: list[int] = []
    for dtype in dtypes:
        of_dtype = [index for index, found in enumerate(classes) if dtype in found]
        kept.append(min(of_dtype, key=lambda index: len(options[index])))  # the first of the plainest
    uncovered = set().union(*options) if options else set()
    for index in kept:
        uncovered -= options[index]
    while uncovered:
        best = max(range(len(cases)), key=lambda index: len(options[index] & uncovered))
        kept.append(best)
        uncovered -= options[best]
    return [cases[index] for index in kept]
