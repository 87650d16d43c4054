"""The pytest plugin, seen from a user's project: skips that name the missing kernel, and the switches around them.

The project under test has 'halfport' installed, a port with two of the six kernels; the inner runs select it
strict (through the options or the environment), so every other kernel raises ``KernelUnavailableError``.
"""

from __future__ import annotations

import json

import pytest

from lazyops._backends import platform_default

HALF_PORT = ("--lazyops-backend", "halfport", "--lazyops-strict")
ROPE_MISSING = "lazyops: backend 'halfport' lacks kernel 'rope_tl' (available in: torch"


def skipped(count: int, rest: str) -> str:
    """A -rs line as an fnmatch pattern (``[`` opens a character class there)."""
    return f"SKIPPED [[]{count}] {rest}"


TESTS = """
    import lazyops

    def test_has_rmsnorm():
        assert lazyops.rmsnorm_tl()[0] == "halfport"

    def test_needs_rope():
        lazyops.rope_tl  # line 7 (pytester drops the leading blank line)
"""


def test_a_missing_kernel_skips_the_test_with_a_reason_naming_kernel_backend_and_where_it_is(project):
    project.tests(TESTS)
    result = project.run(*HALF_PORT, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([skipped(1, f"test_engine.py:7: {ROPE_MISSING}*")])
    # the to-do list at the end of the run
    result.stdout.fnmatch_lines(
        ["*lazyops: tests skipped for missing kernels*", "backend 'halfport' lacks rope_tl (1 test)"]
    )


def test_strict_mode_from_the_environment_skips_the_same_way(project):
    project.tests(TESTS)
    project.setenv(LAZYOPS_BACKEND="halfport", LAZYOPS_STRICT="1")
    result = project.run("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([skipped(1, f"test_engine.py:7: {ROPE_MISSING}*")])


@pytest.mark.parametrize("switch", ["option", "ini"])
def test_fail_missing_turns_the_skip_into_a_failure_naming_kernel_and_backend(project, switch):
    project.tests(TESTS)
    if switch == "ini":
        project.pytester.makeini("[pytest]\nlazyops_fail_missing = true\n")
    result = project.run(*HALF_PORT, *(["--lazyops-fail-missing"] if switch == "option" else []))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*KernelUnavailableError: kernel 'rope_tl' is not available from backend 'halfport'*",
            "test_engine.py:7: KernelUnavailableError",
            f"{ROPE_MISSING}*This is a failure, not a skip, because of --lazyops-fail-missing*",
            "*lazyops: tests failed for missing kernels*",
        ]
    )
    # the traceback ends at the line that asked for the kernel, not inside lazyops' resolution
    assert "_resolve.py" not in result.stdout.str()


def test_other_attribute_errors_stay_failures(project):
    project.tests(
        """
        import lazyops

        def test_plain_attribute_error():
            object().nope

        def test_unknown_kernel_name():
            lazyops.rmsnrom_tl
        """
    )
    result = project.run(*HALF_PORT)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*AttributeError: 'object' object has no attribute 'nope'*", "*Did you mean 'rmsnorm_tl'?*"]
    )


def test_a_missing_kernel_in_a_fixture_skips_every_test_that_uses_it(project):
    project.conftest(
        """
        import lazyops
        import pytest

        @pytest.fixture(scope="session")
        def engine():
            return lazyops.matmul_tl  # line 6

        @pytest.fixture
        def rope():
            return lazyops.rope_tl  # line 10
        """
    )
    project.tests(
        """
        def test_prefill(engine):
            pass

        def test_decode(engine):
            pass

        def test_rotate(rope):
            pass
        """
    )
    result = project.run(*HALF_PORT, "-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(
        [
            skipped(2, "conftest.py:6: lazyops: backend 'halfport' lacks kernel 'matmul_tl'*"),
            skipped(1, "conftest.py:10: lazyops: backend 'halfport' lacks kernel 'rope_tl'*"),
        ]
    )


def test_a_missing_kernel_at_import_skips_the_module(project):
    project.tests(
        """
        import lazyops

        ROPE = lazyops.rope_tl

        def test_never_collected():
            pass
        """
    )
    result = project.run(*HALF_PORT, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([skipped(1, f"test_engine.py:3: {ROPE_MISSING}*")])

    failing = project.run(*HALF_PORT, "--lazyops-fail-missing")
    failing.assert_outcomes(errors=1)
    failing.stdout.fnmatch_lines(
        [
            "*ERROR collecting test_engine.py*",
            "*KernelUnavailableError: kernel 'rope_tl' is not available from backend 'halfport'*",
            f"{ROPE_MISSING}*because of --lazyops-fail-missing*",
        ]
    )


MARKED = """
    import lazyops
    import pytest

    @pytest.fixture
    def expensive():
        raise AssertionError("the fixture must not be set up")

    @pytest.mark.requires_kernels("rope_tl", "matmul_tl")
    def test_attention(expensive):
        raise AssertionError("the body must not run")

    @pytest.mark.requires_kernels("rmsnorm_tl")
    def test_norm():
        assert lazyops.rmsnorm_tl()[0] == "halfport"
"""


def test_requires_kernels_skips_before_fixtures_and_body(project):
    project.tests(MARKED)
    result = project.run(*HALF_PORT, "-rs", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            skipped(
                1,
                "test_engine.py:8: lazyops: backend 'halfport' lacks kernels 'rope_tl', 'matmul_tl' (available in: torch*",
            ),
        ]
    )

    failing = project.run(*HALF_PORT, "--lazyops-fail-missing")
    failing.assert_outcomes(passed=1, errors=1)
    failing.stdout.fnmatch_lines(
        [
            "lazyops: backend 'halfport' lacks kernels 'rope_tl', 'matmul_tl'*because of --lazyops-fail-missing*"
            "required by @pytest.mark.requires_kernels",
        ]
    )
    assert "must not" not in failing.stdout.str()


def test_requires_kernels_is_satisfied_by_what_the_configuration_supplies(project):
    project.tests(MARKED)
    result = project.run("--lazyops-backend", "halfport")  # not strict: torch supplies the rest
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the fixture must not be set up*"])


def test_requires_kernels_with_a_misspelt_kernel_is_an_error(project):
    project.tests(
        """
        import pytest

        @pytest.mark.requires_kernels("rmsnrom_tl")
        def test_norm():
            pass
        """
    )
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no known backend exports a kernel of that name. Did you mean 'rmsnorm_tl'?*"])


def test_backend_option_selects_the_backend_for_the_session_and_its_subprocesses(project):
    project.tests(
        """
        import os, subprocess, sys
        import lazyops

        def test_selected():
            assert lazyops.which("rmsnorm_tl").backend == "halfport"
            assert lazyops.which("rope_tl").reason == "inherited"

        def test_a_worker_process_sees_the_same_backend():
            code = "import lazyops; print(lazyops.which('rmsnorm_tl').backend)"
            assert subprocess.check_output([sys.executable, "-c", code], text=True).strip() == "halfport"
        """
    )
    project.run("--lazyops-backend", "halfport").assert_outcomes(passed=2)


def test_a_bad_backend_option_is_a_usage_error_naming_the_choices(project):
    project.tests(TESTS)
    result = project.run("--lazyops-backend", "halport")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --lazyops-backend=halport: 'halport' is not a registered backend; choose from: torch, triton, "
            "tilelang, halfport*"
        ]
    )
    assert "Traceback" not in result.stderr.str()


def test_header_line_says_where_the_kernels_come_from(project):
    from lazyops.specs import kernel_names

    project.tests("def test_unrelated():\n    pass\n")
    default = platform_default()
    total = len(kernel_names())
    missing = sorted(set(kernel_names()) - {"rmsnorm_tl", "softmax_tl"})  # what halfport lacks
    inherited = project.run("--lazyops-backend", "halfport")
    inherited.stdout.fnmatch_lines(
        [
            f"lazyops: backend halfport (--lazyops-backend) \N{EM DASH} 2 of {total} kernels from halfport, "
            f"{len(missing)} inherited from {default}"
        ]
    )
    strict = project.run(*HALF_PORT, "--lazyops-fail-missing", "-v")
    strict.stdout.fnmatch_lines(
        [
            f"lazyops: backend halfport (--lazyops-backend, strict) \N{EM DASH} 2 of {total} kernels from halfport, "
            f"{len(missing)} missing (tests that need them fail)",
            f"lazyops: missing: {', '.join(missing)}",
        ]
    )
    chain = project.run("--lazyops-backend", f"halfport,{default}")
    chain.stdout.fnmatch_lines(
        [
            f"lazyops: backend halfport,{default} (--lazyops-backend) * {total} of {total} kernels from "
            f"halfport,{default} (2 halfport, {len(missing)} {default})"
        ]
    )


def test_header_prints_a_configuration_mistake_instead_of_crashing(project):
    project.tests("def test_unrelated():\n    pass\n")
    project.setenv(LAZYOPS_BACKEND="bogus")
    result = project.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["lazyops: LAZYOPS_BACKEND names backend 'bogus', which is not registered.*"])


def test_plugin_off_leaves_kernel_unavailable_error_a_plain_failure(project):
    project.tests(TESTS)
    project.setenv(LAZYOPS_BACKEND="halfport", LAZYOPS_STRICT="1")
    result = project.run("-p", "no:lazyops")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*KernelUnavailableError: kernel 'rope_tl' is not available*"])
    result.stdout.no_fnmatch_line("lazyops: backend*")
    assert project.run("-p", "no:lazyops", "--lazyops-fail-missing").ret == pytest.ExitCode.USAGE_ERROR


def test_the_plugin_imports_nothing_heavy_when_loaded(project):
    project.tests(
        """
        import json, sys

        def test_report():
            heavy = ["torch", "numpy", "triton", "tilelang", "lazyops._backends.torch", "lazyops.testing"]
            print("LOADED=" + json.dumps([name for name in heavy if name in sys.modules]))
        """
    )
    result = project.run("-s")
    result.assert_outcomes(passed=1)
    loaded = json.loads(next(line for line in result.outlines if "LOADED=" in line).partition("LOADED=")[2])
    # torch only where the platform default has to ask it whether a GPU is usable
    assert set(loaded) <= ({"torch", "numpy"} if platform_default() != "torch" else set())


# -- the lazyops_backend fixture -----------------------------------------------------------------------------
PER_BACKEND = """
    import lazyops
    import pytest

    def test_each(lazyops_backend):
        assert lazyops.which("rmsnorm_tl").backend == lazyops_backend
        assert lazyops.which("rmsnorm_tl").reason == "selected"

    def test_rope(lazyops_backend):
        lazyops.rope_tl  # strict: halfport lacks it

    @pytest.mark.requires_kernels("rope_tl")
    def test_marked(lazyops_backend):
        assert lazyops_backend != "halfport"

    @pytest.mark.parametrize("lazyops_backend", ["halfport"], indirect=True)
    def test_by_hand(lazyops_backend):
        assert lazyops.rmsnorm_tl()[0] == "halfport"

    def test_afterwards_the_session_configuration_is_back():
        assert lazyops.which("rmsnorm_tl").reason == "selected"
        assert lazyops.which("rope_tl").backend != "halfport"
"""


def test_lazyops_backend_fixture_runs_each_test_once_per_backend_that_can_run_here(project):
    project.backends.make(
        "offline", ["rmsnorm_tl"], init_code="def unavailable_reason():\n    return 'needs the Frobnicator board'\n"
    )
    project.tests(PER_BACKEND)
    result = project.run("-v", "-rs", "-p", "no:randomly")
    outcomes = {
        line.split(" ")[0]: line.split(" ")[1] for line in result.outlines if line.startswith("test_engine.py::")
    }
    assert outcomes["test_engine.py::test_each[torch]"] == "PASSED"
    assert outcomes["test_engine.py::test_each[halfport]"] == "PASSED"
    assert outcomes["test_engine.py::test_each[offline]"] == "SKIPPED"
    assert {"test_engine.py::test_each[triton]", "test_engine.py::test_each[tilelang]"} <= set(outcomes)
    assert outcomes["test_engine.py::test_rope[torch]"] == "PASSED"
    assert outcomes["test_engine.py::test_rope[halfport]"] == "SKIPPED"
    assert outcomes["test_engine.py::test_marked[torch]"] == "PASSED"
    assert outcomes["test_engine.py::test_marked[halfport]"] == "SKIPPED"
    assert outcomes["test_engine.py::test_by_hand[halfport]"] == "PASSED"
    assert outcomes["test_engine.py::test_afterwards_the_session_configuration_is_back"] == "PASSED"
    result.stdout.fnmatch_lines(
        [
            # pytest folds skip marks into one line per file, except for tests with marks of their own (test_marked)
            skipped(2, "test_engine.py: backend 'offline' cannot run here: needs the Frobnicator board"),
            skipped(1, "test_engine.py:9: lazyops: backend 'halfport' lacks kernel 'rope_tl'*"),
            skipped(1, "test_engine.py:11: lazyops: backend 'halfport' lacks kernel 'rope_tl'*"),
        ]
    )


def test_lazyops_backend_fixture_runs_only_over_the_selected_backends(project):
    project.tests(PER_BACKEND)
    result = project.run("--lazyops-backend", "halfport", "-v")
    ids = [line.split(" ")[0] for line in result.outlines if line.startswith("test_engine.py::test_each")]
    assert ids == ["test_engine.py::test_each[halfport]"]
    result.assert_outcomes(passed=3, skipped=2)


def test_configured_holds_for_its_block_only_and_a_refusal_changes_nothing(installed):
    import lazyops
    from lazyops import _api

    lazyops.configure(backend="torch")
    before = _api.settings()
    with _api.configured(strict=True) as inside:
        assert inside.strict and inside.chain == ("torch",)
        assert _api.settings() is inside
    assert _api.settings() == before and not _api.settings().strict
    with pytest.raises(lazyops.ConfigError), _api.configured(backend="nope"):
        pytest.fail("a refused configuration must not enter the block")
    assert _api.settings() == before


# -- what must never take a test run down ----------------------------------------------------------------------
UNRELATED_AND_KERNEL = """
    def test_unrelated():
        pass

    def test_uses_a_kernel():
        import lazyops
        lazyops.rmsnorm_tl
"""


def test_eager_import_with_a_bad_configuration_does_not_crash_pytest(project):
    project.tests(UNRELATED_AND_KERNEL)
    project.setenv(EAGER_IMPORT="1", LAZYOPS_BACKEND="nope")
    result = project.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stderr.str()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "lazyops: EAGER_IMPORT: resolving every kernel at import failed: ConfigError: LAZYOPS_BACKEND names backend "
            "'nope'*",
            "*ConfigError: LAZYOPS_BACKEND names backend 'nope'*",
        ]
    )


def test_eager_import_with_an_unusable_backend_does_not_crash_pytest(project):
    project.backends.make(
        "offline", ["rmsnorm_tl"], init_code="def unavailable_reason():\n    return 'needs the Frobnicator board'\n"
    )
    project.tests(UNRELATED_AND_KERNEL)
    project.setenv(EAGER_IMPORT="1", LAZYOPS_BACKEND="offline")
    result = project.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "lazyops: EAGER_IMPORT: resolving every kernel at import failed: BackendError: backend 'offline' cannot run "
            "here: needs the Frobnicator board*",
        ]
    )


def test_a_backend_whose_unavailable_reason_raises_does_not_crash_pytest(project):
    project.backends.make(
        "flaky", ["rmsnorm_tl"], init_code="def unavailable_reason():\n    raise RuntimeError('driver exploded')\n"
    )
    project.tests(UNRELATED_AND_KERNEL)
    project.setenv(LAZYOPS_BACKEND="flaky")
    result = project.run()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "lazyops: backend 'flaky': its unavailable_reason() raised RuntimeError: driver exploded*",
            "*BackendError: backend 'flaky': its unavailable_reason() raised RuntimeError: driver exploded*",
        ]
    )


def test_a_kernel_the_backend_declines_is_said_to_be_declined_not_missing():
    # seen on an H100 (2026-12-07): TileLang declines paged_attention_tl's head_dim 16, and the skips said it "lacks"
    # the kernel "(available in: torch, triton, tilelang)", sending a porter to port what exists
    from lazyops import KernelUnavailableError
    from lazyops.pytest_plugin import _missing_entries, missing_reason

    reason = "head_dim 16: the tiles take 64, 128 or 256"
    declined = KernelUnavailableError(
        "paged_attention_tl", "tilelang", ("torch", "triton", "tilelang"), "not served", (("tilelang", reason),)
    )
    lacking = KernelUnavailableError("rope_tl", "tilelang", ("torch",), "not available")
    assert missing_reason([lacking, declined]) == (
        "lazyops: backend 'tilelang' lacks kernel 'rope_tl' (available in: torch); "
        f"backend 'tilelang' declines 'paged_attention_tl': {reason}"
    )
    assert _missing_entries([lacking, declined]) == [
        ["rope_tl", "tilelang", "lacks"],
        ["paged_attention_tl", "tilelang", "declines"],
    ]
