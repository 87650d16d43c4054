"""What adversarial use used to break: faulty backends and entry points, failing traces, reloads, pickling, types.

Each test names the behaviour it holds; together with tests/core/test_threads_and_imports.py and the CLI and
plugin tests they cover the reliability defects of issue 8.
"""

from __future__ import annotations

import copy
import json
import pickle
import sys

import pytest

import lazyops
from fresh_interpreter import run_python
from lazyops import BackendError, ConfigError, _api
from lazyops._namespace import Namespace


@pytest.fixture
def ns(monkeypatch):
    """The real ``lazyops`` module, rediscovering backends, with no LAZYOPS_* variable set."""
    for variable in (
        "LAZYOPS_BACKEND",
        "LAZYOPS_FALLBACK",
        "LAZYOPS_STRICT",
        "LAZYOPS_VERBOSE",
        "LAZYOPS_TRACE",
        "LAZYOPS_TRACE_ARGS",
        "RANK",
        "LOCAL_RANK",
        "EAGER_IMPORT",
    ):
        monkeypatch.delenv(variable, raising=False)
    _api.reset()
    yield lazyops
    _api.reset()


# -- a backend hook that raises --------------------------------------------------------------------------------
@pytest.mark.parametrize("raised", ["RuntimeError('driver exploded')", "AttributeError('no such device')"])
def test_unavailable_reason_that_raises_is_a_backend_error_naming_the_backend(fake_backends, ns, raised):
    fake_backends.make("flaky", ["alpha_tl"], init_code=f"def unavailable_reason():\n    raise {raised}\n")
    _api.reset()
    ns.configure(backend="flaky")
    with pytest.raises(BackendError) as caught:
        ns.alpha_tl
    assert caught.value.backend == "flaky" and "unavailable_reason() raised" in str(caught.value)
    assert type(caught.value.__cause__).__name__ == raised.partition("(")[0]
    with pytest.raises(BackendError):  # not a quiet False from hasattr
        hasattr(ns, "alpha_tl")


def test_unavailable_reason_returning_a_non_string_is_a_backend_error(fake_backends, ns):
    fake_backends.make("odd", ["alpha_tl"], init_code="def unavailable_reason():\n    return 42\n")
    _api.reset()
    ns.configure(backend="odd")
    with pytest.raises(BackendError, match="returned 42"):
        ns.alpha_tl


# -- trace failures and ranks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["/dev/full", "a directory", "a name too long"])
def test_a_trace_that_cannot_be_written_warns_once_and_never_breaks_a_kernel(
    fake_backends, ns, tmp_path, monkeypatch, capsys, target
):
    fake_backends.make("ext", ["alpha_tl", "beta_tl"])
    path = {"/dev/full": "/dev/full", "a directory": str(tmp_path), "a name too long": str(tmp_path / ("t" * 300))}[
        target
    ]
    monkeypatch.setenv("LAZYOPS_TRACE", path)
    _api.reset()
    ns.configure(backend="ext")
    for _ in range(3):
        assert ns.alpha_tl(8)[:2] == ("ext", "alpha_tl")
        assert ns.beta_tl(8)[:2] == ("ext", "beta_tl")
    warnings = [line for line in capsys.readouterr().err.splitlines() if "cannot be written" in line]
    assert len(warnings) == 1, warnings
    assert "kernels are unaffected" in warnings[0] and repr(path) in warnings[0]


@pytest.mark.parametrize("variable", ["RANK", "LOCAL_RANK"])
def test_a_bad_rank_raises_the_same_config_error_on_every_access(fake_backends, ns, monkeypatch, variable):
    fake_backends.make("ext", ["alpha_tl"])  # a partial port: its first access prints a summary on rank 0
    _api.reset()
    monkeypatch.setenv("LAZYOPS_BACKEND", "ext")
    monkeypatch.setenv(variable, "zero")
    for _ in range(3):
        with pytest.raises(ConfigError, match=f"{variable}='zero' is not an integer rank"):
            ns.alpha_tl
    monkeypatch.setenv(variable, "0")
    ns.configure()
    assert ns.alpha_tl()[0] == "ext"


# -- reload ----------------------------------------------------------------------------------------------------
def test_reload_drops_stale_kernels_and_keeps_one_alias_finder(fake_backends):
    fake_backends.make("ext", ["alpha_tl"])
    fake_backends.make("other", ["alpha_tl"])
    code = """
    import importlib, json, sys
    import lazyops
    lazyops.configure(backend="ext")
    before = lazyops.alpha_tl()[0]
    for _ in range(3):
        importlib.reload(lazyops)
    finders = sum(type(f).__name__ == "BackendAliasFinder" for f in sys.meta_path)
    stale = "alpha_tl" in vars(lazyops)
    after = lazyops.alpha_tl()[0]  # LAZYOPS_BACKEND=other: a reload reads the environment afresh
    print(json.dumps({"before": before, "after": after, "stale": stale, "finders": finders}))
    """
    result = run_python(code, fake_backends.env(LAZYOPS_BACKEND="other"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"before": "ext", "after": "other", "stale": False, "finders": 1}


# -- pickling and copying wrapped factories --------------------------------------------------------------------
def test_inherited_and_traced_factories_copy_and_pickle_as_the_factory_they_wrap(fake_backends, tmp_path):
    fake_backends.make("ext", ["alpha_tl"])
    fake_backends.make("base", ["alpha_tl", "beta_tl"])
    environ = {"LAZYOPS_BACKEND": "ext", "LAZYOPS_TRACE": str(tmp_path / "trace.jsonl")}
    namespace = Namespace({}, environ=environ, default=lambda: "base")
    traced, inherited = namespace.attribute("alpha_tl"), namespace.attribute("beta_tl")
    assert inherited.lazyops_resolution.reason == "inherited"
    for wrapper in (traced, inherited):
        assert copy.copy(wrapper) is wrapper and copy.deepcopy(wrapper) is wrapper
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            restored = pickle.loads(pickle.dumps(wrapper, protocol))
            assert restored is wrapper.__wrapped__  # by reference: the backend's own factory
            assert restored.__module__.startswith("lazyops_fake_")


# -- rollback --------------------------------------------------------------------------------------------------
def test_a_failed_load_removes_only_the_modules_it_added(fake_backends, ns, tmp_path):
    flag = tmp_path / "refuse"
    flag.write_text("")
    init = f"""
    import pathlib
    def register_backend():
        from . import late  # added by this load: rolled back
        if pathlib.Path({str(flag)!r}).exists():
            raise RuntimeError("registration refused")
    """
    package = fake_backends.make("used", ["alpha_tl"], init_code=init)
    (fake_backends.root / package / "helpers.py").write_text("VALUE = 1\n")
    (fake_backends.root / package / "late.py").write_text("VALUE = 2\n")
    import importlib

    already = importlib.import_module(package)  # the program uses the package before lazyops loads it
    helpers = importlib.import_module(f"{package}.helpers")
    _api.reset()
    ns.configure(backend="used")
    with pytest.raises(BackendError, match="registration refused"):
        ns.alpha_tl
    assert sys.modules[package] is already and sys.modules[f"{package}.helpers"] is helpers
    assert f"{package}.late" not in sys.modules
    flag.unlink()
    assert ns.alpha_tl()[0] == "used"


# -- a stub naming a module that is not there ------------------------------------------------------------------
def test_a_stub_naming_an_absent_module_names_that_module_not_a_missing_package(fake_backends, ns):
    package = fake_backends.make("partial", ["alpha_tl", "beta_tl"])
    (fake_backends.root / package / "beta.py").unlink()
    _api.reset()
    ns.configure(backend="partial")
    assert ns.alpha_tl()[0] == "partial"
    with pytest.raises(BackendError) as caught:
        ns.beta_tl
    message = str(caught.value)
    assert f"its module '{package}.beta' does not exist" in message and "is installed" in message
    assert "not installed" not in message and not caught.value.missing


# -- configure() argument types --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({"backend": {"torch"}}, "an unordered set"),
        ({"backend": frozenset({"torch", "triton"})}, "an unordered set"),
        ({"backend": 123}, "got a int"),
        ({"backend": b"torch"}, "got a bytes"),
        ({"backend": {"torch": 1}}, "got a dict"),
        ({"fallback": 123}, "got a int"),
        ({"fallback": {"softmax_tl": True}}, "got a dict"),
        ({"strict": 1}, "must be True or False"),
        ({"strict": None}, "must be True or False"),
    ],
)
def test_configure_refuses_arguments_of_the_wrong_type_with_a_config_error(ns, arguments, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ns.configure(**arguments)


def test_configure_takes_a_set_of_fallback_names(fake_backends, ns):
    fake_backends.make("ext", ["softmax_tl"])
    _api.reset()
    ns.configure(backend="ext", fallback={"softmax_tl"})
    assert ns.which("softmax_tl").reason == "fallback-list"


# -- bad entry points ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, value, fragment",
    [
        ("torch", "lazyops_rogue", "claimed by built-in and by"),
        ("Bad-Name", "lazyops_rogue", "lowercase letters"),
        ("colon", "lazyops_rogue:backend", "no ':attribute'"),
    ],
)
def test_one_bad_entry_point_is_refused_and_everything_else_keeps_working(fake_backends, ns, name, value, fragment):
    fake_backends.make("ext", ["alpha_tl"])
    fake_backends.register(name, value, "rogue-dist")
    _api.reset()
    assert "alpha_tl" in ns.kernels()  # discovery does not raise
    assert ns.which("rmsnorm_tl").backend == "torch"
    ns.configure(backend="ext")  # and configure() works
    assert ns.alpha_tl()[0] == "ext"
    (refused,) = _api.sources().refused
    assert "rogue-dist" in refused and fragment in refused
    if name != "torch":
        with pytest.raises(BackendError, match=fragment):
            ns.configure(backend=name)
            ns.alpha_tl


# -- the default_device() hook ---------------------------------------------------------------------------------
def test_default_device_is_the_backend_hook_or_cpu(fake_backends, ns):
    fake_backends.make("gpu", ["alpha_tl"], init_code="def default_device():\n    return 'cuda:1'\n")
    fake_backends.make("plain", ["alpha_tl"])
    fake_backends.make("broken", ["alpha_tl"], init_code="def default_device():\n    raise OSError('no driver')\n")
    _api.reset()
    assert _api.default_device("gpu") == "cuda:1"
    assert _api.default_device("plain") == "cpu"
    with pytest.raises(BackendError, match=r"backend 'broken': its default_device\(\) raised OSError: no driver"):
        _api.default_device("broken")
    with pytest.raises(ConfigError, match="no backend named 'nope' is registered"):
        _api.default_device("nope")
