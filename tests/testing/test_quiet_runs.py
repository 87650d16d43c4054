"""Nothing of lazyops' own lands in a user's test run: no warning from the paths a conformance run or a compiled
model takes, and no page of the kit's source above a failed check."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import Phase, given, settings

from fresh_interpreter import run_python
from lazyops import testing
from lazyops.specs import kernel_names, spec
from lazyops.testing.cases import examples


@pytest.mark.parametrize("kernel", kernel_names())
def test_drawing_a_kernels_inputs_warns_nothing(kernel):
    """The kit draws every call's inputs from the spec, no tokens included (an engine makes such calls); a warning
    there would show in every conformance run (layernorm's ``std()`` over no rows did)."""
    kernel_spec = spec(kernel)

    @settings(max_examples=5, database=None, deadline=None, phases=[Phase.generate], derandomize=True)
    @given(case=examples(kernel_spec).cases())
    def draw(case: testing.Case) -> None:
        config = kernel_spec.bind(*case.args, **case.kwargs)
        for tokens in (0, 1, 3):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                examples(kernel_spec).example_inputs(config, tokens, testing.Inputs(case.seed, "cpu"), case.geometry)

    draw()


#: Every kernel's custom operators (the one that allocates, and ``<kernel>_out``) on the fake tensors
#: ``torch.compile`` and ``torch.export`` trace with, warnings as errors. In a fresh interpreter: torch warns of a
#: fake tensor's ``data_ptr()`` once a process, so a run that has seen the warning already could not see it again.
FAKE_CALLS = """
    import warnings
    import torch
    from hypothesis import HealthCheck, Phase, given, settings
    from torch._subclasses.fake_tensor import FakeTensorMode

    import lazyops
    from lazyops import testing
    from lazyops.specs import _engine, kernel_names, spec
    from lazyops.testing.cases import examples

    warnings.simplefilter("error")
    for kernel in kernel_names():
        kernel_spec = spec(kernel)

        @settings(max_examples=3, database=None, deadline=None, phases=[Phase.generate], derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=examples(kernel_spec).cases())
        def trace(case):
            call = getattr(lazyops, kernel)(*case.args, **case.kwargs)
            config = call.lazyops_config
            args = examples(kernel_spec).example_inputs(config, 3, testing.Inputs(case.seed, "cpu"), case.geometry)
            operator, operator_out = _engine.operators(kernel_spec, "torch", config)
            values = _engine.config_values(config)
            with FakeTensorMode() as mode:
                fake = [mode.from_tensor(arg) if isinstance(arg, torch.Tensor) else arg for arg in args]
                operator(*fake, *values)
                if operator_out is not None:
                    out = fake[0].new_empty(kernel_spec.out_shape(config, *fake), dtype=kernel_spec.out_dtype(config))
                    operator_out(*fake, out, *values)

        trace()
        print(kernel, "traced")
"""


def test_tracing_the_kernels_operators_warns_nothing(fake_backends):
    """The operators' fake implementations run the spec's checks on fake tensors; the overlap check read their
    ``data_ptr()``, which torch deprecates with a warning in the user's run ("Accessing the data pointer of
    FakeTensor is deprecated")."""
    ran = run_python(FAKE_CALLS, fake_backends.env())
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == [word for kernel in kernel_names() for word in (kernel, "traced")]
