"""Import-time behaviour, observed in fresh interpreters: it is the product, and one process can only import once."""

from __future__ import annotations

import json
import textwrap

import pytest

from fresh_interpreter import run_python
from lazyops.specs import kernel_names

# __future__ too: `from __future__ import annotations` is a real import, about 0.3 ms, in a module `import lazyops` runs.
HEAVY = ["torch", "numpy", "triton", "tilelang", "lazy_loader", "importlib.metadata", "typing", "inspect", "__future__"]
BUILTIN_BACKENDS = ["lazyops._backends.torch", "lazyops._backends.triton", "lazyops._backends.tilelang"]

REPORT_MODULES = f"""
import json, sys
def report(**extra):
    names = {HEAVY!r} + {BUILTIN_BACKENDS!r}
    print(json.dumps(dict(loaded=sorted(n for n in names if n in sys.modules), **extra)))
"""


def loaded_after(code: str, env: dict) -> dict:
    result = run_python(REPORT_MODULES + textwrap.dedent(code), env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_lazyops_imports_nothing_heavy_and_no_backend(fake_backends):
    report = loaded_after("import lazyops\nreport()", fake_backends.env())
    assert report["loaded"] == []


def test_dir_and_kernels_list_every_kernel_without_importing_kernel_modules(fake_backends):
    fake_backends.make("ext", ["alpha_tl"])
    code = """
    import sys, lazyops
    names = dir(lazyops)
    report(alpha="alpha_tl" in names, rms="rmsnorm_tl" in names, kernels=list(lazyops.kernels()),
           kernel_modules=sorted(m for m in sys.modules if m.count(".") >= 3 or m.startswith("lazyops_fake_ext.")))
    """
    report = loaded_after(code, fake_backends.env())
    assert report["alpha"] and report["rms"]
    assert {*kernel_names(), "alpha_tl"} <= set(report["kernels"])
    assert report["kernel_modules"] == []
    assert "torch" not in report["loaded"]


def test_first_access_imports_one_kernel_module_of_one_backend(fake_backends):
    code = """
    import sys, lazyops
    lazyops.rmsnorm_tl
    report(kernel_modules=sorted(m for m in sys.modules if m.startswith("lazyops._backends.")))
    """
    report = loaded_after(code, fake_backends.env())
    assert report["kernel_modules"] == ["lazyops._backends.torch", "lazyops._backends.torch.rmsnorm"]


def test_a_resolved_kernel_is_stored_and_later_reads_skip_getattr(fake_backends):
    code = """
    import lazyops, lazyops._backends.torch.softmax as impl
    first = lazyops.softmax_tl
    calls = []
    original = lazyops._state_object.attribute
    lazyops._state_object.attribute = lambda name: calls.append(name) or original(name)
    again = lazyops.softmax_tl
    report(same=first is again is impl.softmax_tl, in_dict="softmax_tl" in vars(lazyops), getattr_calls=calls)
    """
    report = loaded_after(code, fake_backends.env())
    assert report == {**report, "same": True, "in_dict": True, "getattr_calls": []}


def test_strict_never_imports_the_default_or_the_reference(fake_backends):
    fake_backends.make("ext", ["alpha_tl", "rmsnorm_tl"])
    code = """
    import lazyops
    lazyops.rmsnorm_tl
    try:
        lazyops.softmax_tl
    except lazyops.KernelUnavailableError as error:
        unavailable = [error.kernel, error.backend, list(error.available_in)]
    report(unavailable=unavailable)
    """
    report = loaded_after(code, fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_STRICT="1"))
    assert report["unavailable"] == ["softmax_tl", "ext", ["torch", "triton", "tilelang"]]
    assert not set(BUILTIN_BACKENDS) & set(report["loaded"])


def test_partial_port_prints_one_summary_and_one_notice_per_inherited_kernel(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    code = """
    import lazyops
    lazyops.rmsnorm_tl; lazyops.rmsnorm_tl
    softmax = lazyops.softmax_tl          # resolved: no notice yet
    import sys; print("--resolved--", file=sys.stderr)
    softmax(8, "float32"); softmax(8, "float32")
    lazyops.configure(); lazyops.softmax_tl(8, "float32")   # afresh after configure: still one line per process
    """
    result = run_python(code, fake_backends.env(LAZYOPS_BACKEND="ext"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    lacking = sorted(set(kernel_names()) - {"rmsnorm_tl"})
    assert lines[0].startswith(
        f"lazyops: backend 'ext' lacks {len(lacking)} of {len(kernel_names())} known kernels; {len(lacking)} inherited "
        f"from 'torch': {lacking[0]} and {len(lacking) - 1} more"
    )
    assert "LAZYOPS_VERBOSE=1" in lines[0]
    assert lines[1] == "--resolved--"
    assert lines[2:] == [
        "lazyops: softmax_tl runs from 'torch' (inherited): the selected backend 'ext' does not export it"
    ]


def test_verbose_summary_names_every_inherited_kernel(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    result = run_python(
        "import lazyops; lazyops.rmsnorm_tl", fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_VERBOSE="1")
    )
    assert ", ".join(sorted(set(kernel_names()) - {"rmsnorm_tl"})) in result.stderr


@pytest.mark.parametrize("rank, verbose, prints", [("0", "0", True), ("1", "0", False), ("3", "1", True)])
def test_only_rank_zero_prints_unless_verbose(fake_backends, rank, verbose, prints):
    fake_backends.make("ext", ["rmsnorm_tl"])
    env = fake_backends.env(LAZYOPS_BACKEND="ext", RANK=rank, LAZYOPS_VERBOSE=verbose)
    result = run_python("import lazyops; lazyops.rmsnorm_tl; lazyops.softmax_tl(4, 'float32')", env)
    assert result.returncode == 0, result.stderr
    assert ("lazyops:" in result.stderr) is prints


@pytest.mark.parametrize(
    "variable, value, fragment",
    [
        ("LAZYOPS_STRICT", "maybe", "LAZYOPS_STRICT='maybe' is not a boolean"),
        ("LAZYOPS_BACKEND", "trition", "Did you mean 'triton'?"),
        ("LAZYOPS_BACKEND", "torch,,triton", "empty entry"),
        ("LAZYOPS_FALLBACK", "rmsnorm", "which no backend exports. Did you mean 'rmsnorm_tl'"),
        ("LAZYOPS_VERBOSE", "2", "LAZYOPS_VERBOSE='2'"),
    ],
)
def test_environment_mistakes_are_config_errors_even_through_hasattr(fake_backends, variable, value, fragment):
    code = """
    import lazyops
    try:
        hasattr(lazyops, "rmsnorm_tl")
    except lazyops.ConfigError as error:
        report(error=str(error), attribute_error=isinstance(error, AttributeError), value_error=isinstance(error, ValueError))
    """
    report = loaded_after(code, fake_backends.env(**{variable: value}))
    assert fragment in report["error"]
    assert report["value_error"] and not report["attribute_error"]


def test_strict_with_fallback_is_a_config_error(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    env = fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_STRICT="1", LAZYOPS_FALLBACK="rmsnorm_tl")
    result = run_python("import lazyops; lazyops.rmsnorm_tl", env)
    assert result.returncode != 0
    assert "ConfigError: LAZYOPS_STRICT forbids every fallback, but LAZYOPS_FALLBACK lists rmsnorm_tl" in result.stderr


def test_configuration_is_not_read_at_import(fake_backends):
    report = loaded_after("import lazyops\nreport()", fake_backends.env(LAZYOPS_STRICT="maybe"))
    assert report["loaded"] == []


def test_private_names_never_read_the_configuration(fake_backends):
    code = """
    import lazyops
    report(probe=hasattr(lazyops, "_ipython_canary_method_should_not_exist_"), wrapped=hasattr(lazyops, "__wrapped__"))
    """
    report = loaded_after(code, fake_backends.env(LAZYOPS_STRICT="maybe"))
    assert report["probe"] is False and report["wrapped"] is False


def test_eager_import_resolves_everything_at_import(fake_backends):
    code = """
    import lazyops
    report(stored=sorted(n for n in vars(lazyops) if n.endswith("_tl")))
    """
    report = loaded_after(code, fake_backends.env(EAGER_IMPORT="1"))
    assert report["stored"] == list(kernel_names())


def test_eager_import_surfaces_configuration_errors_at_import(fake_backends):
    result = run_python("import lazyops", fake_backends.env(EAGER_IMPORT="1", LAZYOPS_BACKEND="nope"))
    assert result.returncode != 0 and "ConfigError" in result.stderr


@pytest.mark.parametrize("value", ["", "0"])
def test_eager_import_off_values(fake_backends, value):
    report = loaded_after("import lazyops\nreport()", fake_backends.env(EAGER_IMPORT=value))
    assert report["loaded"] == []


def test_strict_summary_is_printed_even_when_the_first_access_raises(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    code = """
    import lazyops
    try:
        lazyops.softmax_tl
    except lazyops.KernelUnavailableError:
        pass
    """
    result = run_python(code, fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_STRICT="1"))
    assert result.returncode == 0, result.stderr
    lacking = sorted(set(kernel_names()) - {"rmsnorm_tl"})
    assert result.stderr.strip() == (
        f"lazyops: backend 'ext' (strict) lacks {len(lacking)} of {len(kernel_names())} known kernels; "
        f"{len(lacking)} unavailable (KernelUnavailableError): {lacking[0]} and {len(lacking) - 1} more "
        "(LAZYOPS_VERBOSE=1 names them all)"
    )


@pytest.mark.parametrize("rank, prints", [("0", True), ("1", False)])
def test_a_misspelt_variable_is_named_once_at_the_first_resolution(fake_backends, rank, prints):
    code = """
    import sys, lazyops, lazyops._backends
    lazyops._backends.platform_default = lambda: "torch"  # a GPU's default backend may print lines of its own
    print("--imported--", file=sys.stderr)
    lazyops.rmsnorm_tl; lazyops.softmax_tl
    lazyops.configure(); lazyops.rmsnorm_tl
    """
    result = run_python(code, fake_backends.env(LAZYOPS_BAKEND="triton", LAZYOPS_CACHE_DIR="/tmp", RANK=rank))
    assert result.returncode == 0, result.stderr
    expected = [
        "lazyops: LAZYOPS_BAKEND is not a lazyops variable and is ignored; did you mean LAZYOPS_BACKEND?",
        "lazyops: LAZYOPS_CACHE_DIR is not a lazyops variable and is ignored; the variables lazyops reads are "
        "LAZYOPS_BACKEND, LAZYOPS_FALLBACK, LAZYOPS_STRICT, LAZYOPS_VERBOSE, LAZYOPS_TRACE, LAZYOPS_TRACE_ARGS, "
        "LAZYOPS_PLAN, LAZYOPS_PLAN_STRICT",
    ]
    assert result.stderr.strip().splitlines() == ["--imported--", *(expected if prints else [])]
