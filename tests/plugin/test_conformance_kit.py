"""lazyops.testing: a third-party backend checks itself the way the built-ins are checked.

Two ports registered by entry point: 'goodport' (its kernels wrap the torch backend's) passes; 'badport' (a softmax
that normalises by the first 64 columns only, an rmsnorm whose keyword is misspelt) fails, and the failure names
the kernel, the error and the smallest failing case.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

import lazyops
from lazyops import BackendError, ConfigError, _api
from lazyops._backends.torch.add_rmsnorm import add_rmsnorm_tl
from lazyops._backends.torch.rope import rope_tl
from lazyops._backends.torch.softmax import softmax_tl
from lazyops.specs import kernel_names


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


testing = pytest.importorskip("lazyops.testing")

GOODPORT = {
    "__init__": '''
        """A port that wraps the reference (no stub: lazyops imports it to list its kernels)."""
        from .kernels import gelu_tl, rmsnorm_tl, silu_and_mul_tl, softmax_tl
    ''',
    "kernels": """
        # Built through the specs, as a port should be: the factories take the spec's signature, and every calling
        # convention (leading dimensions, strided rows, out=) reaches the launches below as [rows, width] tensors.
        import torch
        from lazyops.specs import rmsnorm, silu_and_mul, softmax

        @softmax.spec.implementation
        def softmax_tl(config):
            return lambda x: torch.softmax(x.float(), dim=-1).to(config.dtype)

        @rmsnorm.spec.implementation
        def rmsnorm_tl(config):
            def launch(x, weight):
                return rmsnorm.rmsnorm_reference(x.float(), weight.float(), config.eps, config.weight_offset)
            return lambda x, weight: launch(x, weight).to(config.dtype)

        @silu_and_mul.spec.implementation
        def silu_and_mul_tl(config):
            n = config.n
            return lambda x: (torch.nn.functional.silu(x[:, :n].float()) * x[:, n:].float()).to(config.dtype)

        def gelu_tl(n, dtype):  # a kernel of its own, which lazyops.testing has no check for
            return lambda x: torch.nn.functional.gelu(x)
    """,
}

#: The specified kernels goodport exports (besides a kernel of its own, gelu_tl).
GOODPORT_KERNELS = {"rmsnorm_tl", "silu_and_mul_tl", "softmax_tl"}


def not_exported(kernels: set[str]) -> list[str]:
    """The specified kernels a partial port lacks, as the report lists them."""
    return sorted(set(kernel_names()) - kernels)


BADPORT = {
    "__init__": '''
        """A port with two bugs."""
        from .kernels import rmsnorm_tl, softmax_tl
    ''',
    "kernels": """
        import torch
        from lazyops.specs import softmax as softmax_spec
        from lazyops.specs.rmsnorm import rmsnorm_reference

        @softmax_spec.spec.implementation
        def softmax_tl(config):
            def softmax(x):
                e = torch.exp(x.float() - x.float().amax(dim=-1, keepdim=True))
                return (e / e[:, :64].sum(dim=-1, keepdim=True)).to(config.dtype)  # the bug: the first block's sum
            return softmax

        def rmsnorm_tl(n, dtype, epsilon=1e-6):  # the bug: callers pass eps=
            return lambda x, weight: rmsnorm_reference(x.float(), weight.float(), epsilon).to(dtype)
    """,
}


def test_a_third_party_backend_checks_itself_through_the_plugin_fixture(project):
    project.write_backend("goodport", GOODPORT)
    project.write_backend("badport", BADPORT)
    project.tests(
        """
        import lazyops.testing

        def test_conformance(lazyops_backend):
            print(lazyops.testing.run_conformance(lazyops_backend, max_examples=5, seed=0))
        """
    )
    result = project.run("--lazyops-backend", "goodport,badport", "-v", "-s", hypothesis=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_engine.py::test_conformance[[]goodport] lazyops conformance of backend 'goodport' on cpu (up to 5 "
            "examples per kernel):",
            "  passed        rmsnorm_tl: 5 examples, worst relative error *",
            "  passed        silu_and_mul_tl: 5 examples, *",
            "  passed        softmax_tl: 5 examples, *",
            f"  not exported  {', '.join(not_exported(GOODPORT_KERNELS))}",
            "  unchecked     gelu_tl (lazyops.testing has no conformance check for it)",
            "PASSED",
            "test_engine.py::test_conformance[[]badport] FAILED",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E   * lazyops.testing.ConformanceError: lazyops conformance of backend 'badport' on cpu (up to 5 examples "
            "per kernel):",
            "E   *  FAILED        rmsnorm_tl: backend 'badport', rmsnorm_tl: parameter 'eps' is missing (the canonical "
            "signature ('lazyops.specs') has `eps: float = 1e-06`); *backend 'badport', rmsnorm_tl: parameter 'epsilon' is "
            "not in the canonical signature ('lazyops.specs') (it has (n, dtype, eps, weight_dtype, weight_offset))",
            "E   *  FAILED        softmax_tl: ConformanceError: M=*: relative error * > 1e-0* (torch.*)",
            "E   *                smallest failing case: softmax_tl(*",
            "E   *                rerun it: lazyops.testing.check_case(factory, Case(kernel='softmax_tl'*",
            f"E   *  not exported  {', '.join(not_exported({'rmsnorm_tl', 'softmax_tl'}))}",
        ]
    )


def test_a_failed_check_reports_the_test_line_and_the_verdict_not_the_kits_source(project):
    """pytest prints the source of every frame of a failure's traceback: without the kit's frames hidden, a failed
    conformance test showed some 60 lines of lazyops.testing before its message."""
    project.write_backend("badport", BADPORT)
    project.tests(
        """
        import torch
        import lazyops.testing
        from lazyops._backends.torch.softmax import softmax_tl

        def test_conformance():
            lazyops.testing.run_conformance("badport", kernels=["softmax_tl"], max_examples=5)

        def one_percent_off(n, dtype):
            right = softmax_tl(n, dtype)
            return lambda x: right(x) * 1.01

        def test_one_case():
            case = lazyops.testing.Case("softmax_tl", (100, torch.float16), {}, (5,), seed=7)
            lazyops.testing.check_case(one_percent_off, case, device="cpu")
        """
    )
    result = project.run(hypothesis=True)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            ">       lazyops.testing.run_conformance(*",
            "E       lazyops.testing.ConformanceError: lazyops conformance of backend 'badport' on cpu *",
            "E         FAILED        softmax_tl: ConformanceError: M=*: relative error *",
            "test_engine.py:6: ConformanceError",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            ">       lazyops.testing.check_case(one_percent_off, case, device=*",
            "E       lazyops.testing.ConformanceError: M=5: relative error * > 1e-03 (torch.float16)",
            "test_engine.py:14: ConformanceError",
        ]
    )
    output = result.stdout.str()
    assert "lazyops/testing/" not in output, output  # no frame of the kit: neither its files nor their source
    for kit_line in ("raise ConformanceError", "judge_case(factory", "report = ConformanceReport"):
        assert kit_line not in output, output


# -- the same, in this process: the report itself ------------------------------------------------------------
def test_report_of_a_passing_partial_port(installed):
    installed("goodport", GOODPORT)
    report = testing.run_conformance("goodport", max_examples=3, seed=1)
    assert report.passed == sorted(GOODPORT_KERNELS)
    assert report.not_exported == not_exported(GOODPORT_KERNELS)
    assert report.unchecked == ["gelu_tl"]
    assert report.failed == []
    # running the suite changes nothing about what lazyops resolves
    assert lazyops.which("softmax_tl").backend == "torch"


def test_a_failure_names_the_kernel_the_error_and_a_case_that_reruns_it(installed):
    installed("badport", BADPORT)
    with pytest.raises(testing.ConformanceError) as failure:
        testing.run_conformance("badport", kernels=["softmax_tl"], max_examples=10, seed=2)
    # an AssertionError, as the README promises: pytest reports it as a failure, and older code that caught
    # AssertionError still does
    assert isinstance(failure.value, AssertionError)
    message = str(failure.value)
    assert "FAILED        softmax_tl: ConformanceError: M=" in message and "relative error" in message
    case_text = message.split("rerun it: lazyops.testing.check_case(factory, ")[1].rsplit(")", 1)[0]
    case = eval(
        case_text, {"Case": testing.Case, "Layout": testing.Layout, "torch": torch}
    )  # the printed case is the case
    with pytest.raises(testing.ConformanceError, match="relative error"):
        testing.check_case(_api.kernel_factory("badport", "softmax_tl"), case, device="cpu")
    assert testing.check_case(softmax_tl, case, device="cpu") < testing.TOLERANCE[case.dtype]


def test_the_torch_backend_conforms():
    report = testing.run_conformance("torch", max_examples=8, device="cpu")
    assert report.passed == list(kernel_names())


def test_a_conformance_run_draws_the_same_cases_every_time():
    """A backend's CI must pass or fail on its kernels, never on the draw: the cases are a function of the seed,
    0 unless given."""
    runs = [str(testing.run_conformance("torch", kernels=["gelu_and_mul_tl"], max_examples=6)) for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] == str(testing.run_conformance("torch", kernels=["gelu_and_mul_tl"], max_examples=6, seed=0))


def test_one_case_per_configuration_class_covers_every_dtype_and_option():
    """What a GPU session checks (``per_class=True``): for each dtype, the plainest case drawn in it; then cases
    setting every option drawn anywhere; the same cases on every run, and only configurations the backend serves."""
    cases = testing.class_cases("paged_attention_tl")
    classes = [testing.classes_of(case) for case in cases]
    assert [sorted(found) for found in classes[:3]] == [["dtype=float32"], ["dtype=bfloat16"], ["dtype=float16"]]
    options = {"max_seq_len", "scale", "sliding_window", "softcap", "cache_dtype"}
    assert set().union(*classes) - {"dtype=float32", "dtype=bfloat16", "dtype=float16"} == options
    assert len(cases) <= 3 + len(options)
    assert testing.class_cases("paged_attention_tl") == cases

    def declines_float32(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("only drawn, never built")

    declines_float32.lazyops_supports = lambda config: "no float32" if config.dtype is torch.float32 else None  # type: ignore[attr-defined]
    served = testing.class_cases("paged_attention_tl", declines_float32)
    assert all(case.dtype is not torch.float32 for case in served) and len(served) >= 3


def test_a_per_class_run_checks_the_class_cases_and_says_so():
    report = testing.run_conformance("torch", kernels=["rmsnorm_tl"], per_class=True, device="cpu")
    (result,) = report.results
    assert result.examples == len(testing.class_cases("rmsnorm_tl", _api.kernel_factory("torch", "rmsnorm_tl")))
    assert "(one case per configuration class per kernel)" in str(report)


def test_a_call_with_no_tokens_is_part_of_every_case_that_draws_one():
    geometry = {
        "rotary_dim": 64,
        "query_heads": 8,
        "key_heads": 2,
        "cache_rows": 512,
        "cache_dtype": "float32",
        "positions_dtype": torch.int64,
    }
    case = testing.Case("rope_tl", (128, torch.bfloat16), {"is_neox": False}, (1, 17, 0, 64), 0, geometry)
    assert testing.check_case(rope_tl, case, device="cpu") < testing.TOLERANCE[torch.bfloat16]


def test_errors_of_the_caller_are_not_conformance_failures(installed):
    installed("offline", {"__init__": "def unavailable_reason():\n    return 'needs the Frobnicator board'\n"})
    with pytest.raises(ConfigError, match="no backend of that name is registered; known backends: torch"):
        testing.run_conformance("tourch")
    with pytest.raises(ValueError, match="no conformance check for 'gelu_tl'"):
        testing.run_conformance("torch", kernels=["gelu_tl"])
    with pytest.raises(BackendError, match="backend 'offline' cannot run here: needs the Frobnicator board"):
        testing.run_conformance("offline")


# -- check_case: what a wrong kernel looks like --------------------------------------------------------------
def case_of(kernel: str, *args, tokens=(5, 0, 3), **kwargs) -> testing.Case:
    return testing.Case(kernel, args, kwargs, tokens, seed=7)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda n, dtype: lambda x: softmax_reference(x.float()).to(dtype) * 1.01, "relative error"),
        (lambda n, dtype: lambda x: softmax_reference(x.float()), "dtype torch.float32, expected torch.float16"),
        (lambda n, dtype: lambda x: softmax_reference(x.float()).to(dtype)[:, :-1], "shape"),
        (lambda n, dtype: lambda x: torch.full_like(x, float("nan")), "are NaN or infinite"),
    ],
    ids=["off by 1%", "wrong dtype", "wrong shape", "unwritten (NaN)"],
)
def test_check_case_refuses_a_wrong_out_of_place_kernel(wrong, message):
    case = case_of("softmax_tl", 100, torch.float16)
    assert testing.check_case(softmax_tl, case, device="cpu") < testing.TOLERANCE[torch.float16]
    with pytest.raises(testing.ConformanceError, match=message):
        testing.check_case(wrong, case, device="cpu")


def test_check_case_checks_every_element_of_an_in_place_result():
    def forgets_the_last_row(n, dtype, eps=1e-6):
        kernel = add_rmsnorm_tl(n, dtype, eps)

        def add_rmsnorm(x, residual, weight):
            last = residual[-1:].clone()
            y = kernel(x, residual, weight)
            residual[-1:] = last  # one row of many not updated: invisible in a norm over the whole tensor
            return y

        return add_rmsnorm

    case = case_of("add_rmsnorm_tl", 64, torch.bfloat16, eps=1e-6, tokens=(300,))
    with pytest.raises(testing.ConformanceError, match=r"M=300: residual: \d+ of 19200 elements off"):
        testing.check_case(forgets_the_last_row, case, device="cpu")


def test_check_case_requires_rope_to_rotate_in_place():
    def returns_copies(head_dim, dtype, is_neox=True):
        kernel = rope_tl(head_dim, dtype, is_neox)
        return lambda positions, query, key, cache: kernel(positions, query.clone(), key.clone(), cache)

    geometry = {
        "rotary_dim": 32,
        "query_heads": 4,
        "key_heads": 2,
        "cache_rows": 64,
        "cache_dtype": "float32",
        "positions_dtype": torch.int64,
    }
    case = testing.Case("rope_tl", (64, torch.float16), {"is_neox": True}, (9,), 3, geometry)
    assert testing.check_case(rope_tl, case, device="cpu") < testing.TOLERANCE[torch.float16]
    with pytest.raises(testing.ConformanceError, match="rope_tl must return its arguments"):
        testing.check_case(returns_copies, case, device="cpu")


def test_references_are_the_torch_definitions_in_float64():
    x = torch.randn(4, 10, dtype=torch.float16)
    expected = softmax_reference(x.double())
    got = testing.REFERENCES["softmax_tl"](x, n=10, dtype=torch.float16)
    assert got.dtype == torch.float64
    assert torch.equal(got, expected)
    assert sorted(testing.REFERENCES) == sorted(lazyops.kernels())


def test_import_lazyops_and_the_plugin_import_neither_the_kit_nor_hypothesis():
    code = "import sys, lazyops, lazyops.pytest_plugin; print(sorted(m for m in ('lazyops.testing', 'hypothesis', 'torch') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_signature_check_takes_missing_annotations_but_not_other_names_defaults_or_types():
    from lazyops.specs.rmsnorm import spec

    def unannotated(n, dtype, eps=1e-6, *, weight_dtype=None, weight_offset=0.0):
        pass

    def other_default(n, dtype, eps=1e-5, *, weight_dtype=None, weight_offset=0.0):
        pass

    def other_type(n: str, dtype, eps=1e-6, *, weight_dtype=None, weight_offset=0.0):
        pass

    assert testing.signature_mismatch(unannotated, spec) is None
    assert "parameter 'eps' has default 1e-05" in testing.signature_mismatch(other_default, spec)
    assert "parameter 'n' is annotated str" in testing.signature_mismatch(other_type, spec)
