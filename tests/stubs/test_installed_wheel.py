"""What a user who ``pip install``s lazyops gets: the wheel's stubs, seen by mypy, pyright, stubtest and jedi.

Everything here runs against the wheel installed in a fresh venv (``installed_wheel`` in conftest.py), from a folder
that holds only the user's files (``user_code/``), never against ``src/``. Slow (a wheel build, and mypy reads
torch's sources), so it is marked ``slow``; the default test command runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import zipfile
from collections import defaultdict
from typing import Iterator

import pytest
from stub_support import HERE, ROOT, InstalledWheel

import lazyops

pytestmark = pytest.mark.slow

CORRECT, MISSPELLED, WRONG_TYPE = "calls_every_kernel.py", "misspelled_kernel.py", "wrong_argument_type.py"


@pytest.fixture(scope="module", autouse=True)
def stubtest(installed_wheel: InstalledWheel) -> Iterator[subprocess.Popen[str]]:
    """``python -m mypy.stubtest lazyops``, started first and read last: its minute overlaps mypy's and pyright's."""
    process = installed_wheel.start(
        str(installed_wheel.python), "-m", "mypy.stubtest", "lazyops",
        "--allowlist", str(HERE / "stubtest_allowlist.txt"), "--mypy-config-file", str(HERE / "stubtest_mypy.ini"),
    )
    yield process
    if process.poll() is None:  # its test was deselected
        process.kill()
    process.communicate()


def test_the_wheel_carries_the_stub_inline_and_py_typed(installed_wheel: InstalledWheel):
    with zipfile.ZipFile(installed_wheel.wheel) as wheel:
        names = set(wheel.namelist())
        assert "lazyops/py.typed" in names
        assert wheel.read("lazyops/__init__.pyi").decode() == (ROOT / "stubs/lazyops/__init__.pyi").read_text()
    probe = installed_wheel.run(str(installed_wheel.python), "-c", "import lazyops; print(lazyops.__file__)")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == str(installed_wheel.site_packages / "lazyops" / "__init__.py")


def test_the_correct_user_file_runs(installed_wheel: InstalledWheel):
    result = installed_wheel.run(str(installed_wheel.python), CORRECT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")


def mypy_errors(output: str) -> dict[str, list[str]]:
    """``{file: ["line: message  [code]", ...]}`` from mypy's output."""
    errors: dict[str, list[str]] = defaultdict(list)
    for line in output.splitlines():
        match = re.match(r"(?P<file>[^:]+\.py):(?P<line>\d+): error: (?P<message>.*)", line)
        if match:
            errors[match["file"]].append(f"{match['line']}: {match['message']}")
    return errors


def test_mypy_accepts_correct_calls_and_reports_a_misspelled_kernel_and_wrong_types(installed_wheel: InstalledWheel):
    result = installed_wheel.run(
        str(installed_wheel.python), "-m", "mypy", "--cache-dir", str(installed_wheel.mypy_cache),
        "--python-executable", str(installed_wheel.python), CORRECT, MISSPELLED, WRONG_TYPE,
    )
    errors = mypy_errors(result.stdout)
    assert result.returncode == 1, result.stdout + result.stderr
    assert CORRECT not in errors, errors[CORRECT]
    assert errors[MISSPELLED] == ['7: Module has no attribute "rmsnrom_tl"  [attr-defined]'], result.stdout
    assert errors[WRONG_TYPE] == [
        '7: Argument 1 to "rmsnorm_tl" has incompatible type "str"; expected "int"  [arg-type]',
        '8: Argument 1 to "__call__" of "_SoftmaxKernel" has incompatible type "list[float]"; expected "Tensor"  '
        "[arg-type]",
    ], result.stdout


def test_pyright_accepts_correct_calls_and_reports_a_misspelled_kernel_and_wrong_types(installed_wheel: InstalledWheel):
    result = installed_wheel.run(
        str(installed_wheel.python), "-m", "pyright", "--outputjson", "--pythonpath", str(installed_wheel.python),
        CORRECT, MISSPELLED, WRONG_TYPE,
    )
    report = json.loads(result.stdout)
    found: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for diagnostic in report["generalDiagnostics"]:
        name = diagnostic["file"].rsplit("/", 1)[-1]
        line = diagnostic["range"]["start"]["line"] + 1
        found[name].append((line, diagnostic.get("rule", ""), diagnostic["message"]))
    assert CORRECT not in found, found[CORRECT]
    assert report["summary"]["errorCount"] == 3, found
    ((line, rule, message),) = found[MISSPELLED]
    assert (line, rule) == (7, "reportAttributeAccessIssue")
    assert message == '"rmsnrom_tl" is not a known attribute of module "lazyops"'
    factory, kernel = sorted(found[WRONG_TYPE])
    assert (factory[:2], kernel[:2]) == ((7, "reportArgumentType"), (8, "reportArgumentType"))
    assert factory[2].startswith(
        'Argument of type "Literal[\'4096\']" cannot be assigned to parameter "n" of type "int" '
        'in function "rmsnorm_tl"'
    )
    assert kernel[2].startswith(
        'Argument of type "list[float]" cannot be assigned to parameter "x" of type "Tensor" in function "__call__"'
    )


def test_stubtest_finds_the_stubs_true_to_the_runtime(stubtest: subprocess.Popen[str]):
    missing = [package for package in ("triton", "tilelang") if importlib.util.find_spec(package) is None]
    if missing:
        pytest.skip(
            f"stubtest imports every module of lazyops, and its backends' modules need {' and '.join(missing)}: "
            "pip install 'lazyops[test,triton,tilelang]'"
        )
    output, _ = stubtest.communicate(timeout=600)
    assert stubtest.returncode == 0, output
    assert "Success: no issues found" in output


def test_jedi_completes_kernels_with_their_signatures_from_the_installed_wheel(installed_wheel: InstalledWheel):
    import jedi

    # The wheel's interpreter as an editor starts it: without this run's PYTHONPATH (a checkout's ``src`` there would
    # come first on its path and be what jedi completes from)
    clean = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment = jedi.create_environment(str(installed_wheel.python), safe=False, env_vars=clean)
    path = installed_wheel.workdir / "editing.py"
    completions = jedi.Script("import lazyops\nlazyops.rmsnorm_t", path=path, environment=environment).complete()
    assert [c.name for c in completions] == ["rmsnorm_tl"]
    assert completions[0].module_path == installed_wheel.site_packages / "lazyops" / "__init__.pyi"
    (signature,) = completions[0].get_signatures()
    assert [p.name for p in signature.params] == ["n", "dtype", "eps", "weight_dtype", "weight_offset"]
    assert signature.to_string() == (
        "rmsnorm_tl(n: int, dtype: torch.dtype | str, eps: float=1e-06, *, weight_dtype: torch.dtype | str | None=None, "
        "weight_offset: float=0.0) -> _RMSNormKernel"
    )


def test_every_kernel_is_in_the_installed_stub(installed_wheel: InstalledWheel):
    text = (installed_wheel.site_packages / "lazyops" / "__init__.pyi").read_text()
    for kernel in lazyops.kernels():
        assert f"\ndef {kernel}(" in text


ALPHA_BACKEND_KERNEL = """
from __future__ import annotations

from typing import Protocol


class AlphaKernel(Protocol):
    def __call__(self, values: list[float], /) -> list[float]:
        \"\"\"Each value times the scale.\"\"\"
        ...


def alpha_tl(n: int, scale: float = 2.0) -> AlphaKernel:
    \"\"\"Scales n values.\"\"\"
    return lambda values: [scale * value for value in values]
"""

USES_ALPHA = """import lazyops

kernel = lazyops.alpha_tl(8, scale=3.0)
values: list[float] = kernel([1.0, 2.0])
lazyops.alpha_tl("8")
"""


def test_a_project_with_a_third_party_backend_type_checks_its_extra_kernels(
    installed_wheel: InstalledWheel, fake_backends, tmp_path
):
    package = fake_backends.make("ext", ["alpha_tl"])
    (fake_backends.root / package / "alpha.py").write_text(ALPHA_BACKEND_KERNEL)
    project = tmp_path / "project"
    project.mkdir()
    (project / "uses_alpha.py").write_text(USES_ALPHA)
    sees_backend = {"PYTHONPATH": str(fake_backends.root)}  # as if the backend's distribution were installed

    output = "typings/lazyops/__init__.pyi"  # pyright's default stubPath; mypy is pointed at it with MYPYPATH
    generated = installed_wheel.run(
        str(installed_wheel.python), "-m", "lazyops", "stubs", "--backends", "torch,triton,tilelang,ext",
        "--output", output, cwd=project, **sees_backend,
    )
    assert generated.returncode == 0, generated.stderr
    assert "\ndef alpha_tl(n: int, scale: float = 2.0) -> _AlphaKernel:" in (project / output).read_text()

    mypy = installed_wheel.run(
        str(installed_wheel.python), "-m", "mypy", "--cache-dir", str(installed_wheel.mypy_cache), "uses_alpha.py",
        cwd=project, MYPYPATH="typings", **sees_backend,
    )
    assert mypy_errors(mypy.stdout) == {
        "uses_alpha.py": ['5: Argument 1 to "alpha_tl" has incompatible type "str"; expected "int"  [arg-type]']
    }, mypy.stdout + mypy.stderr

    pyright = installed_wheel.run(
        str(installed_wheel.python), "-m", "pyright", "--outputjson", "--pythonpath", str(installed_wheel.python),
        "uses_alpha.py", cwd=project, **sees_backend,
    )
    diagnostics = [
        (d["range"]["start"]["line"] + 1, d.get("rule")) for d in json.loads(pyright.stdout)["generalDiagnostics"]
    ]
    assert diagnostics == [(5, "reportArgumentType")], pyright.stdout


def test_an_installed_lazyops_asks_where_to_write_the_stub(installed_wheel: InstalledWheel):
    result = installed_wheel.run(str(installed_wheel.python), "-m", "lazyops", "stubs")
    assert result.returncode == 2
    assert "not run from a source checkout" in result.stderr and "pass --output" in result.stderr
