"""Helpers of the plan tests: fake ports' sources, a plan made in the test, the command line as users run it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from lazyops import _api, _plan

#: Backend 'fast': an rmsnorm and a softmax built through their specs, right (they compute as the reference does): a
#: candidate that passes its check and is timed.
RIGHT = """
import torch

from lazyops.specs import rmsnorm, softmax

@rmsnorm.spec.implementation
def rmsnorm_tl(config):
    def launch(x, weight):
        return rmsnorm.rmsnorm_reference(x.float(), weight.float(), config.eps, config.weight_offset).to(config.dtype)
    return launch

@softmax.spec.implementation
def softmax_tl(config):
    return lambda x: torch.softmax(x.float(), dim=-1).to(config.dtype)
"""

#: Backend 'wrong': an rmsnorm that forgets to normalise; it must be rejected by its check and never chosen.
WRONG = """
from lazyops.specs.rmsnorm import spec

@spec.implementation
def rmsnorm_tl(config):
    return lambda x, weight: x * weight
"""

#: Backend 'picky': a right rmsnorm that declines every configuration wider than 128, with its reason.
PICKY = """
from lazyops.specs import rmsnorm

@rmsnorm.spec.implementation
def rmsnorm_tl(config):
    def launch(x, weight):
        return rmsnorm.rmsnorm_reference(x.float(), weight.float(), config.eps, config.weight_offset).to(config.dtype)
    return launch

rmsnorm_tl.lazyops_supports = lambda config: f"n {config.n}: picky takes n <= 128" if config.n > 128 else None
"""


def write_port(backends, name: str, source: str, kernels: list[str]) -> None:
    """Backend ``name`` (package ``lazyops_fake_<name>``): ``source`` as its module ``kernels``, registered by an
    entry point, its stub naming ``kernels``."""
    package = backends.root / f"lazyops_fake_{name}"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import lazy_loader\n__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)\n"
    )
    (package / "__init__.pyi").write_text("".join(f"from .kernels import {k} as {k}\n" for k in kernels))
    (package / "kernels.py").write_text(textwrap.dedent(source))
    backends.register(name, package.name, f"fake-{name}")


def lazyops_cli(*args: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lazyops", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def rmsnorm_config(n: int = 256, eps: float = 1e-6):
    from lazyops.specs import spec

    return spec("rmsnorm_tl").bind(n, torch.bfloat16, eps)


def candidate(us: dict[int, float], spread: float = 0.01, error: float | None = 1e-3) -> _plan.Candidate:
    return _plan.Candidate(dict(us), error, {m: spread for m in us})


def a_plan(environment: dict | None = None) -> _plan.Plan:
    """A plan of two rmsnorm configurations, one with a switch, measured 'here' unless ``environment`` says."""
    small, large = rmsnorm_config(256), rmsnorm_config(4096, 1e-5)
    fields = _plan.config_fields
    return _plan.Plan(
        created="2026-12-01T00:00:00+00:00",
        command="lazyops tune --from-trace trace.jsonl",
        environment=environment if environment is not None else _plan.environment_here(origins("torch")),
        timing={"method": "host", "tokens": [1, 16, 128], "rounds": 5, "checked_at": [1, 7]},
        entries=[
            _plan.Entry("rmsnorm_tl", fields(small), small.label, "torch", None, {"torch": candidate({1: 2.0})}),
            _plan.Entry(
                "rmsnorm_tl",
                fields(large),
                large.label,
                "torch",
                _plan.Switch(16, "fast"),
                {"torch": candidate({1: 9.0, 16: 9.0, 128: 10.0}), "fast": candidate({1: 5.0, 16: 12.0, 128: 20.0})},
                rejected={"wrong": "wrong: relative error 0.9 over bfloat16's tolerance"},
                declined={"picky": "n 4096: picky takes n <= 128"},
            ),
        ],
    )


def origins(*names: str) -> dict[str, str | None]:
    """Backend name -> origin as this process registered them (None: not registered), what ``_plan``'s environment
    functions take; every registered backend's when no name is given."""
    registered: dict[str, str | None] = dict(_api.backend_origins())
    return {name: registered.get(name) for name in names} if names else registered
