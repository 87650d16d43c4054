"""The public API in one process: configure(), which(), errors, threads, tracing, the wrapper."""

from __future__ import annotations

import inspect
import json
import re
import sys
import threading

import pytest

import lazyops
from lazyops import BackendError, ConfigError, KernelUnavailableError, _api


@pytest.fixture
def ns(monkeypatch):
    """The real ``lazyops`` module, as just imported, with no LAZYOPS_* variable set."""
    for variable in (
        "LAZYOPS_BACKEND",
        "LAZYOPS_FALLBACK",
        "LAZYOPS_STRICT",
        "LAZYOPS_VERBOSE",
        "LAZYOPS_TRACE",
        "LAZYOPS_TRACE_ARGS",
        "RANK",
        "LOCAL_RANK",
    ):
        monkeypatch.delenv(variable, raising=False)
    _api.reset()
    yield lazyops
    _api.reset()


def test_public_error_classes_have_the_promised_bases():
    assert issubclass(KernelUnavailableError, AttributeError)
    assert issubclass(ConfigError, ValueError) and not issubclass(ConfigError, AttributeError)
    assert issubclass(BackendError, ImportError)


def test_configure_validates_at_once_and_a_refusal_changes_nothing(ns):
    before = ns.rmsnorm_tl
    with pytest.raises(ConfigError, match=re.escape("configure(backend=...) names backend 'nope'")):
        ns.configure(backend="nope")
    assert vars(ns)["rmsnorm_tl"] is before
    assert ns.which("rmsnorm_tl").backend == "torch"


def test_configure_drops_cached_resolutions_and_keeps_left_out_arguments(fake_backends, ns):
    fake_backends.make("ext", ["rmsnorm_tl", "alpha_tl"])
    _api.reset()  # rediscover, now that the fake backend is installed
    ns.rmsnorm_tl
    ns.configure(backend="ext")
    assert "rmsnorm_tl" not in vars(ns)
    assert ns.rmsnorm_tl() == ("ext", "rmsnorm_tl", (), {})
    ns.configure(strict=True)  # backend left out: stays 'ext'
    assert ns.which("rmsnorm_tl").backend == "ext"
    with pytest.raises(KernelUnavailableError):
        ns.softmax_tl
    assert getattr(ns, "softmax_tl", None) is None and not hasattr(ns, "softmax_tl")
    ns.configure(backend=None, strict=False)  # None: the platform default
    assert ns.which("rmsnorm_tl").backend == "torch"


def test_which_reports_every_reason(fake_backends, ns):
    fake_backends.make("ext", ["rmsnorm_tl", "softmax_tl"])
    _api.reset()
    ns.configure(backend="ext", fallback=["softmax_tl"])
    assert (ns.which("rmsnorm_tl").backend, ns.which("rmsnorm_tl").reason) == ("ext", "selected")
    assert (ns.which("softmax_tl").backend, ns.which("softmax_tl").reason) == ("torch", "fallback-list")
    assert (ns.which("rope_tl").backend, ns.which("rope_tl").reason) == ("torch", "inherited")
    assert "rope_tl" not in vars(ns)  # which() resolves nothing


def test_priority_chain_takes_each_kernel_from_the_first_backend_that_has_it(fake_backends, ns):
    fake_backends.make("first", ["rmsnorm_tl"])
    fake_backends.make("second", ["rmsnorm_tl", "softmax_tl"])
    _api.reset()
    ns.configure(backend="first,second")
    assert ns.rmsnorm_tl() == ("first", "rmsnorm_tl", (), {})
    assert ns.softmax_tl() == ("second", "softmax_tl", (), {})


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({"fallback": ["softmax_tl"], "strict": True}, "forbids every fallback"),
        ({"backend": ["torch", "torch"]}, "more than once"),
        ({"backend": []}, "empty list of backends"),
        ({"strict": "yes"}, "must be True or False"),
        ({"fallback": [3]}, "must be strings"),
    ],
)
def test_configure_mistakes(ns, arguments, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ns.configure(**arguments)


def test_fallback_name_the_default_lacks_is_refused(fake_backends, ns):
    fake_backends.make("ext", ["alpha_tl"])
    _api.reset()
    with pytest.raises(ConfigError, match="platform default 'torch' does not export"):
        ns.configure(backend="ext", fallback="alpha_tl")


def test_threads_racing_on_a_first_access_resolve_once(fake_backends, ns):
    fake_backends.make("slow", ["alpha_tl"], kernel_code="import time; time.sleep(0.2)")
    _api.reset()
    ns.configure(backend="slow")
    barrier = threading.Barrier(16)
    results = []

    def race():
        barrier.wait()
        results.append(ns.alpha_tl)

    threads = [threading.Thread(target=race) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 16 and all(result is results[0] for result in results)
    assert "lazyops_fake_slow" in sys.modules  # loaded once, by whichever thread came first


def test_trace_writes_one_line_per_first_construction(ns, tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYOPS_TRACE", str(tmp_path / "trace-{pid}.jsonl"))
    ns.configure()
    factory = ns.softmax_tl
    factory(8, "float32")
    factory(16, "float32")
    ns.rmsnorm_tl(8, "bfloat16")
    (trace,) = tmp_path.glob("trace-*.jsonl")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["kernel"], r["backend"], r["reason"]) for r in records] == [
        ("softmax_tl", "torch", "selected"),
        ("rmsnorm_tl", "torch", "selected"),
    ]
    assert "args" not in records[0] and records[0]["construct_ms"] >= 0


def test_trace_args_writes_one_line_per_distinct_argument_combination(ns, tmp_path, monkeypatch):
    path = tmp_path / "trace-rank{rank}.jsonl"
    monkeypatch.setenv("LAZYOPS_TRACE", str(path))
    monkeypatch.setenv("LAZYOPS_TRACE_ARGS", "1")
    monkeypatch.setenv("RANK", "3")
    ns.configure()
    for n in (8, 16, 8):
        ns.softmax_tl(n, dtype="float32")
    records = [json.loads(line) for line in (tmp_path / "trace-rank3.jsonl").read_text().splitlines()]
    assert [r["args"] for r in records] == ["8, dtype='float32'", "16, dtype='float32'"]
    assert all(r["rank"] == 3 for r in records)


def test_the_wrapper_forwards_every_attribute(ns, tmp_path, monkeypatch):
    import lazyops._backends.torch.rmsnorm as impl

    impl.rmsnorm_tl.custom_marker = "kept"
    try:
        monkeypatch.setenv("LAZYOPS_TRACE", str(tmp_path / "t.jsonl"))
        ns.configure()
        wrapped = ns.rmsnorm_tl
        assert wrapped is not impl.rmsnorm_tl and wrapped.__wrapped__ is impl.rmsnorm_tl
        assert wrapped.__name__ == "rmsnorm_tl" and wrapped.__doc__ == impl.rmsnorm_tl.__doc__
        assert inspect.signature(wrapped) == inspect.signature(impl.rmsnorm_tl)
        assert wrapped.custom_marker == "kept"
        assert "torch" in repr(wrapped)
    finally:
        del impl.rmsnorm_tl.custom_marker


def test_trace_into_a_missing_directory_is_a_config_error(ns, tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYOPS_TRACE", str(tmp_path / "missing" / "t.jsonl"))
    with pytest.raises(ConfigError, match="does not exist"):
        ns.configure()


def test_unknown_names_get_a_suggestion(ns):
    with pytest.raises(AttributeError, match="Did you mean 'softmax_tl'") as caught:
        ns.sofmax_tl
    assert not isinstance(caught.value, KernelUnavailableError)


def test_backends_and_kernels(ns):
    assert ns.backends()[:3] == ("torch", "triton", "tilelang")
    from lazyops.specs import kernel_names

    assert set(ns.kernels()) >= set(kernel_names())
    assert set(ns.kernels()) <= set(dir(ns))
