"""The stub tests' setup: Triton's interpreter switch, and lazyops built as a wheel and installed in a fresh venv.

The wheel tests check what a user gets from ``pip install lazyops``, not the source tree: the wheel is built from a
copy of the sources (a build writes ``build/`` and ``*.egg-info`` beside them), installed with ``--no-deps`` into a
new venv, and every tool runs there from a folder holding only the user's files, so nothing resolves ``lazyops`` to
``src/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# As in tests/kernels/conftest.py: Triton reads TRITON_INTERPRET when a kernel module is imported, and the signature
# test imports them; without a GPU the interpreter is the only way they run, so set it before anything imports one.
if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from stub_support import ROOT, USER_CODE, InstalledWheel, run  # noqa: E402


def _copy_sources(destination: Path) -> Path:
    """What a build reads, copied as git has it (the package's stub stays a symlink into ``stubs/``)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    destination.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, destination / name)
    for name in ("src", "stubs"):
        shutil.copytree(ROOT / name, destination / name, symlinks=True, ignore=ignore)
    return destination


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    base = tmp_path_factory.mktemp("wheel")
    sources = _copy_sources(base / "sources")
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(base / "dist"), str(sources)]
    built = run(build, base)
    assert built.returncode == 0, f"building the wheel failed:\n{built.stdout}\n{built.stderr}"
    (wheel,) = (base / "dist").glob("lazyops-*.whl")

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    installed = run(install, base)
    assert installed.returncode == 0, f"installing the wheel failed:\n{installed.stdout}\n{installed.stderr}"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base)
    site_packages = Path(purelib.stdout.strip())
    # lazyops' dependencies (torch, lazy_loader) and the tools (mypy, pyright, jedi) come from this test environment,
    # after the venv's own site-packages: installing torch again would cost minutes. A .pth line is appended to
    # sys.path without that folder's own .pth files being read, so the editable install of lazyops there stays out.
    test_environment = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site_packages / "zz_lazyops_test_environment.pth").write_text("".join(f"{path}\n" for path in test_environment))

    workdir = base / "user"
    shutil.copytree(USER_CODE, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    return InstalledWheel(wheel, venv, python, site_packages, workdir)
