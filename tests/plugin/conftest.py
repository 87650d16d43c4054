"""Running pytest inside pytest, with fake backends registered by entry point, as a user's project would.

Every inner run is a subprocess: the plugin is loaded from lazyops' own ``pytest11`` entry point, exactly as in a
user's project, and each run discovers the backends afresh (an in-process run would share this process's lazyops
state). The fake backends live in a directory put on the inner run's ``PYTHONPATH``, with a ``.dist-info`` whose
``lazyops.backends`` entry point registers them.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import lazyops
from lazyops import _api

# The lazyops this test run imports (the checkout's src/ unless PYTHONPATH points elsewhere): subprocesses get the
# same one, so a test run against another tree tests that tree throughout.
SRC = str(Path(lazyops.__file__).resolve().parents[1])
CLEARED = (
    "LAZYOPS_BACKEND",
    "LAZYOPS_FALLBACK",
    "LAZYOPS_STRICT",
    "LAZYOPS_VERBOSE",
    "LAZYOPS_TRACE",
    "LAZYOPS_TRACE_ARGS",
    "EAGER_IMPORT",
    "RANK",
    "LOCAL_RANK",
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    # tests/kernels sets it in this process; the inner runs must see this machine as it is.
    "TRITON_INTERPRET",
)


class Project:
    """A user's project under test: its files (through pytester), its installed fake backends, its runs."""

    def __init__(self, pytester: pytest.Pytester, backends, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pytester = pytester
        self.backends = backends
        for variable in CLEARED:
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(backends.root), SRC]))
        self._monkeypatch = monkeypatch

    def setenv(self, **variables: str) -> None:
        for name, value in variables.items():
            self._monkeypatch.setenv(name, value)

    def tests(self, source: str, name: str = "test_engine") -> Path:
        return self.pytester.makepyfile(**{name: textwrap.dedent(source)})

    def conftest(self, source: str) -> Path:
        return self.pytester.makeconftest(textwrap.dedent(source))

    def run(self, *args: str, hypothesis: bool = False) -> pytest.RunResult:
        # Hypothesis' own plugin costs a second per run; only the conformance runs need it.
        quiet = () if hypothesis else ("-p", "no:hypothesispytest")
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *quiet, *args)

    def write_backend(self, name: str, modules: dict[str, str]) -> None:
        write_backend(self.backends, name, modules)


def write_backend(backends, name: str, modules: dict[str, str]) -> None:
    """A backend package ``lazyops_fake_<name>`` from source texts (``{"__init__": ..., "softmax": ...}``),
    registered by an entry point under ``name``."""
    package = backends.root / f"lazyops_fake_{name}"
    package.mkdir()
    for module, source in modules.items():
        (package / f"{module}.py").write_text(textwrap.dedent(source))
    backends.register(name, package.name, f"fake-{name}")


@pytest.fixture
def project(pytester: pytest.Pytester, fake_backends, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A project with 'halfport' installed: a port with two of the six kernels (rmsnorm_tl and softmax_tl)."""
    fake_backends.make("halfport", ["rmsnorm_tl", "softmax_tl"])
    return Project(pytester, fake_backends, monkeypatch)


@pytest.fixture
def installed(fake_backends, monkeypatch: pytest.MonkeyPatch):
    """Install backends from sources into this process (``installed("name", {"__init__": ...})``); lazyops
    rediscovers its backends now and again after the test."""

    for variable in CLEARED:
        monkeypatch.delenv(variable, raising=False)

    def install(name: str, modules: dict[str, str]) -> None:
        write_backend(fake_backends, name, modules)
        _api.reset()

    _api.reset()
    yield install
    _api.reset()
