"""The plan drives resolution (issue 30): each configuration a plan names comes from the plan's backend, with a
token switch where the plan measured one; configurations it does not name resolve as without it; a plan made
elsewhere, or a stale entry, is said once and not applied (``LAZYOPS_PLAN_STRICT=1``: a ``ConfigError``). Fresh
interpreters: what a process reads and prints at its first resolution is the product."""

from __future__ import annotations

import json
import textwrap

import pytest

from fresh_interpreter import run_python

#: Two ports of rmsnorm built on its spec: "left" declines widths over 128, "right" serves everything. Each adds
#: its own mark to the result so a test can see which ran.
PORTS = {
    "left": ("left_port", "None if config.n <= 128 else 'rows of up to 128 features'", 1.0),
    "right": ("right_port", "None", 2.0),
}
PORT = """
import torch
from lazyops.specs import rmsnorm

@rmsnorm.spec.implementation(supports=lambda config: {supports})
def rmsnorm_tl(config):
    def launch(x, weight):
        return torch.full_like(x, {mark})
    return launch
"""


def ports(fake_backends) -> None:
    for name, (package, supports, mark) in PORTS.items():
        directory = fake_backends.root / package
        directory.mkdir()
        (directory / "__init__.py").write_text(textwrap.dedent(PORT.format(supports=supports, mark=mark)))
        fake_backends.register(name, package, f"{name}-port")


def write_plan(fake_backends, tmp_path, entries, environment=None, backends=("torch", "left", "right")) -> str:
    """A plan made here (its environment this machine's, locked to ``backends``) with ``entries`` (kernel, n,
    choice, switch)."""
    script = f"""
        import json, torch
        from lazyops import _api, _plan
        from lazyops.specs.rmsnorm import spec
        entries = []
        for n, choice, switch in {entries!r}:
            config = spec.bind(n, torch.float32)
            timed = {{backend: _plan.Candidate({{1: 1.0}}) for backend in (choice, *(switch[1:] if switch else ()))}}
            entries.append(_plan.Entry("rmsnorm_tl", _plan.config_fields(config), config.label, choice,
                                       _plan.Switch(*switch) if switch else None, timed))
        registered = _api.backend_origins()
        environment = _plan.environment_here({{name: registered.get(name) for name in {tuple(backends)!r}}})
        environment.update({environment or {}!r})
        plan = _plan.Plan("2026-12-01T00:00:00", "a test", environment, {{"method": "host", "tokens": [1]}}, entries)
        _plan.save(plan, {str(tmp_path / "plan.json")!r})
    """
    result = run_python(script, fake_backends.env())
    assert result.returncode == 0, result.stderr
    return str(tmp_path / "plan.json")


RUN = """
import torch, lazyops
def mark(n, tokens=2):
    kernel = lazyops.rmsnorm_tl(n, torch.float32)
    return float(kernel(torch.randn(tokens, n), torch.randn(n))[0, 0])
"""


def test_a_plan_names_the_backend_of_each_configuration_it_names(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "right", None), (96, "left", None)])
    result = run_python(
        RUN
        + """
print(mark(64), mark(96), mark(256))
r = lazyops.which("rmsnorm_tl", 64, torch.float32)
print(r.backend, r.reason, lazyops.which("rmsnorm_tl", 256, torch.float32).backend)
""",
        fake_backends.env(LAZYOPS_BACKEND="left", LAZYOPS_PLAN=plan),
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    # 64: the plan's right; 96: the plan's left; 256: not in the plan, left declines it, torch's rmsnorm runs
    assert first.split()[:2] == ["2.0", "1.0"] and first.split()[2] not in ("1.0", "2.0")
    assert second == "right plan torch"


def test_a_token_switch_runs_one_backend_below_its_count_and_the_other_from_there(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "right", (8, "left"))])
    result = run_python(RUN + "print(mark(64, tokens=7), mark(64, tokens=8))", fake_backends.env(LAZYOPS_PLAN=plan))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1.0", "2.0"]


def test_a_plan_made_elsewhere_is_said_once_and_not_applied(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "right", None)], {"device": "NVIDIA H200", "capability": "9.0"})
    result = run_python(RUN + "print(mark(64), mark(64))", fake_backends.env(LAZYOPS_BACKEND="left", LAZYOPS_PLAN=plan))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1.0", "1.0"], "the plan must not be applied"
    lines = [line for line in result.stderr.splitlines() if "was made elsewhere or is stale" in line]
    assert len(lines) == 1 and "device: plan NVIDIA H200, here" in lines[0] and "lazyops tune" in lines[0], (
        result.stderr
    )
    strict = run_python(RUN + "print(mark(64))", fake_backends.env(LAZYOPS_PLAN=plan, LAZYOPS_PLAN_STRICT="1"))
    assert strict.returncode != 0 and "ConfigError" in strict.stderr and "LAZYOPS_PLAN_STRICT=1" in strict.stderr


def test_a_stale_entry_is_said_and_the_configuration_resolves_as_without_a_plan(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(256, "left", None)])  # left declines 256
    result = run_python(RUN + "print(mark(256))", fake_backends.env(LAZYOPS_BACKEND="right", LAZYOPS_PLAN=plan))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.0"]
    assert "the plan in force names 'left' for rmsnorm_tl(n=256" in result.stderr
    assert "'left' declines it (rows of up to 128 features)" in result.stderr


def test_configure_sets_and_clears_the_plan(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "right", None)])
    result = run_python(
        RUN + f"print(mark(64)); lazyops.configure(plan={plan!r}); print(mark(64)); lazyops.configure(plan=None); "
        "print(mark(64))",
        fake_backends.env(LAZYOPS_BACKEND="left"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1.0", "2.0", "1.0"]


def test_a_malformed_plan_is_a_configuration_error_naming_the_file(fake_backends, tmp_path):
    ports(fake_backends)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema": "lazyops-plan", "version": 0}))
    result = run_python(RUN + "print(hasattr(lazyops, 'rmsnorm_tl'))", fake_backends.env(LAZYOPS_PLAN=str(path)))
    assert result.returncode != 0 and "ConfigError" in result.stderr and str(path) in result.stderr


def test_a_plan_runs_the_triton_backend_in_its_interpreter_and_its_switch_to_torch(fake_backends, tmp_path):
    """The built-in backends under a plan, as the issue asks of the CPU: at 64 features the plan's Triton (its
    interpreter) from 8 tokens and its switch, torch, under 8; 96 features, not in the plan, resolve as without it
    (torch, the default here). What ran is read from the backends' code the call entered; every result is
    rmsnorm's."""
    pytest.importorskip("triton")
    plan = write_plan(fake_backends, tmp_path, [(64, "triton", (8, "torch"))], backends=("torch", "triton"))
    script = """
import sys, torch, lazyops
from lazyops.specs.rmsnorm import rmsnorm_reference

def backends_run(call):
    # which backends' code a call runs: the lazyops._backends packages whose functions it enters
    seen = set()
    def profile(frame, event, arg):
        path = frame.f_code.co_filename.replace(chr(92), "/")
        if event == "call" and "/lazyops/_backends/" in path:
            seen.add(path.split("/lazyops/_backends/")[1].split("/")[0])
    sys.setprofile(profile)
    try:
        return call(), ",".join(sorted(seen))
    finally:
        sys.setprofile(None)

for n in (64, 96):
    kernel = lazyops.rmsnorm_tl(n, torch.float32)
    ran = []
    for tokens in (7, 8):
        x, weight = torch.randn(tokens, n), torch.randn(n)
        expected = rmsnorm_reference(x.double(), weight.double(), 1e-6).float()
        got, backends = backends_run(lambda: kernel(x, weight))
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6), (n, tokens)
        ran.append(backends)
    where = lazyops.which("rmsnorm_tl", n, torch.float32)
    print(n, where.backend, where.reason.split()[0], *ran)
"""
    result = run_python(script, fake_backends.env(LAZYOPS_PLAN=plan, TRITON_INTERPRET="1"))
    assert result.returncode == 0, result.stderr
    planned, unplanned = (line.split() for line in result.stdout.splitlines())
    assert planned == ["64", "triton", "plan", "torch", "triton"], result.stdout  # 7 tokens: torch; 8: Triton
    assert unplanned[:2] == ["96", "torch"] and unplanned[3:] == ["torch", "torch"], result.stdout
    assert "made elsewhere or is stale" not in result.stderr, result.stderr


def test_a_plan_string_reaches_stderr_escaped(fake_backends, tmp_path):
    """Issue 33.11: environment.device = "\\u001b[31mcpu" wrote the escape byte itself into the stale-plan warning."""
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "right", None)], {"device": "\u001b[31mcpu", "capability": "9.0"})
    result = run_python(RUN + "print(mark(64))", fake_backends.env(LAZYOPS_BACKEND="left", LAZYOPS_PLAN=plan))
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr and "device: plan \\x1b[31mcpu, here" in result.stderr, result.stderr
