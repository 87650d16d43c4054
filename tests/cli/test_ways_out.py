"""Every way out a backend's message offers works on the machine that printed it (issue 27.5): the advice is
parsed from what ``doctor`` and ``list`` print, then followed, by building and calling a kernel in a subprocess.

Run here twice: as the machine is, and as after ``bash scripts/doctor.sh``, which installs no Triton (the package is
hidden by a ``sitecustomize`` that makes ``import triton`` fail, as for a package that is not there).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from cli_support import lazyops_cli

#: Build rmsnorm_tl from wherever it resolves and call it once on that backend's device.
FOLLOW = """
import lazyops, torch
from lazyops import _api
device = _api.default_device(lazyops.which("rmsnorm_tl").backend)
kernel = lazyops.rmsnorm_tl(64, torch.float32)
kernel(torch.ones(2, 64, device=device), torch.ones(64, device=device))
"""


def ways_out(backend: str, reason: str) -> list[dict[str, str]]:
    """The environments a reason's advice asks for: ``set X=1`` (the backend itself selected), and each
    ``select 'name'`` or ``'name' with X=1``."""
    found = [{"LAZYOPS_BACKEND": backend, name: value} for name, value in re.findall(r"\bset (\w+)=(\w+)", reason)]
    choices = reason.split("select ", 1)[1] if "select " in reason else ""
    for name, variable, value in re.findall(r"'(\w+)'(?: with (\w+)=(\w+))?", choices):
        found.append({"LAZYOPS_BACKEND": name, **({variable: value} if variable else {})})
    return found


def follow(advice: dict[str, str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", FOLLOW], env={**env, **advice}, capture_output=True, text=True, timeout=300
    )


def reasons_from_doctor(env: dict[str, str]) -> dict[str, str]:
    result = lazyops_cli("doctor", "--json", "--backend", "torch", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return {b["name"]: b["reason"] for b in json.loads(result.stdout)["backends"] if b["reason"]}


def reasons_from_list(env: dict[str, str]) -> dict[str, str]:
    result = lazyops_cli("list", "--json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return {name: status for name, status in json.loads(result.stdout)["backends"].items() if status != "ok"}


def without_triton(env: dict[str, str], tmp_path) -> dict[str, str]:
    shim = tmp_path / "no_triton"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['triton'] = None  # import triton: not installed\n")
    return {**env, "PYTHONPATH": os.pathsep.join([str(shim), env["PYTHONPATH"]])}


def test_the_ways_out_doctor_and_list_offer_work_here(env, tmp_path):
    hidden = without_triton(env, tmp_path)
    machines = {"after scripts/doctor.sh (no triton)": (hidden, reasons_from_doctor(hidden))}
    machines["as it is"] = (env, reasons_from_list(env))
    followed = 0
    for machine, (environment, reasons) in machines.items():
        tried: list[dict[str, str]] = []
        for backend, reason in reasons.items():
            for advice in ways_out(backend, reason):
                if advice in tried:
                    continue
                tried.append(advice)
                result = follow(advice, environment)
                assert result.returncode == 0, f"{machine}: {backend} says {reason!r}; {advice} fails:\n{result.stderr}"
                followed += 1
    hidden_reasons = machines["after scripts/doctor.sh (no triton)"][1]
    assert "triton" in hidden_reasons and "TRITON_INTERPRET" not in " ".join(hidden_reasons.values())
    assert "pip install 'lazyops[triton]'" in hidden_reasons["triton"]
    assert followed >= 1
