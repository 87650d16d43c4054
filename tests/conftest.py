"""Shared fixtures: backend packages written to disk and registered through a real entry point."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

import hypothesis_profiles
import lazyops

# Hypothesis runs pinned (derandomised, no database, no deadline) unless HYPOTHESIS_PROFILE says otherwise: see
# tests/hypothesis_profiles.py, and the README's "Running the tests" for an exhaustive run.
hypothesis_profiles.load()

# The lazyops this test run imports (the checkout's src/ unless PYTHONPATH points elsewhere): subprocesses get the
# same one, so a test run against another tree tests that tree throughout.
SRC = str(Path(lazyops.__file__).resolve().parents[1])


def _plugin_installed() -> bool:
    """Whether lazyops' pytest plugin comes by its entry point (lazyops installed). A source tree on PYTHONPATH alone,
    as on the GPU machine, has no entry point: the plugin is loaded here instead, so the kernel tests run there too."""
    from importlib.metadata import entry_points

    return any(point.value == "lazyops.pytest_plugin" for point in entry_points(group="pytest11"))


# The plugin tests (tests/plugin) run pytest inside pytest; pytest only honours pytest_plugins in this top-level
# conftest, not in tests/plugin/conftest.py.
pytest_plugins = ["pytester"] + ([] if _plugin_installed() else ["lazyops.pytest_plugin"])


class BackendFactory:
    """Writes importable backend packages plus a ``.dist-info`` whose entry point registers them.

    Each package's kernels are factories returning a tuple that names the backend and the kernel, so a test can
    see where a resolved kernel came from by calling it.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def make(
        self,
        name: str,
        kernels: list[str],
        *,
        stub: bool = True,
        package: str | None = None,
        init_code: str = "",
        kernel_code: str = "",
        distribution: str | None = None,
        register: bool = True,
    ) -> str:
        package = package or f"lazyops_fake_{name}"
        directory = self.root / package
        directory.mkdir()
        body = [f'"""A fake backend {name!r} for tests."""', "import lazy_loader" if stub else "", init_code]
        if stub:
            body.append("__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)")
            lines = [f"from .{kernel.removesuffix('_tl')} import {kernel} as {kernel}" for kernel in kernels]
            (directory / "__init__.pyi").write_text("\n".join(lines) + "\n")
            for kernel in kernels:
                (directory / f"{kernel.removesuffix('_tl')}.py").write_text(_kernel_source(name, kernel, kernel_code))
        else:
            body.extend(_kernel_source(name, kernel, "") for kernel in kernels)
        (directory / "__init__.py").write_text("\n".join(textwrap.dedent(part) for part in body) + "\n")
        if register:
            self.register(name, package, distribution or f"fake-{name}")
        return package

    def register(self, name: str, module: str, distribution: str) -> None:
        dist_info = self.root / f"{distribution.replace('-', '_')}-1.0.dist-info"
        dist_info.mkdir(exist_ok=True)
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
        entry_points = dist_info / "entry_points.txt"
        existing = entry_points.read_text() if entry_points.exists() else "[lazyops.backends]\n"
        entry_points.write_text(existing + f"{name} = {module}\n")

    def env(self, **variables: str) -> dict[str, str]:
        """A clean environment for a subprocess that sees these packages and lazyops' source."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("LAZYOPS_") and k not in ("RANK", "LOCAL_RANK", "EAGER_IMPORT")
        }
        # what this run's PYTHONPATH adds stays after them (on the GPU machine: the folder TileLang is installed in)
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), SRC, *filter(None, [os.environ.get("PYTHONPATH")])])
        env.update(variables)
        return env


def _kernel_source(backend: str, kernel: str, extra: str) -> str:
    return textwrap.dedent(
        f'''
        {extra}
        def {kernel}(*args, **kwargs):
            """{kernel} of the fake backend {backend!r}."""
            return ({backend!r}, {kernel!r}, args, kwargs)
        '''
    )


@pytest.fixture
def fake_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Fake backends on ``sys.path`` of this process (and, through ``.env()``, of subprocesses)."""
    factory = BackendFactory(tmp_path / "site")
    monkeypatch.syspath_prepend(str(factory.root))
    yield factory
    for name in [m for m in sys.modules if m.startswith("lazyops_fake_")]:
        del sys.modules[name]
