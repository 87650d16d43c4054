"""What the README and the scripts say about the kernels, the kit and the files stays true (issue 27.11): counts
and lists from the kernel list itself, paths that exist and do what is said of them, the kit's own extra."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lazyops.specs import _engine, kernel_names

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def documents() -> dict[str, str]:
    return {path.name: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}


def test_every_kernel_count_in_the_docs_is_the_number_of_kernels():
    total = len(kernel_names())
    found = 0
    for name, text in documents().items():
        for pattern in (r"\b\d+ of (\d+) (?:known )?kernels\b", r"\ball (\d+) known kernels\b"):
            for match in re.finditer(pattern, " ".join(text.split())):
                found += 1
                assert int(match[1]) == total, f"{name}: {match[0]!r}; there are {total} kernels"
    assert found >= 2


def test_the_readme_intro_names_every_kernel():
    intro = README.split("\n## ", 1)[0]
    missing = [kernel for kernel in kernel_names() if f"`{kernel}`" not in intro]
    assert not missing, f"the README's first paragraphs do not name {missing}"


def test_the_file_test_sh_names_for_the_triton_interpreter_sets_it():
    comment = (ROOT / "scripts" / "test.sh").read_text()
    (named,) = re.findall(r"\((\S+\.py) sets TRITON_INTERPRET", comment)
    assert 'os.environ.setdefault("TRITON_INTERPRET", "1")' in (ROOT / named).read_text(), named


def test_the_kit_has_its_own_small_extra_and_the_readme_points_to_it():
    (line,) = re.findall(r"^kit = (\[.*\])$", (ROOT / "pyproject.toml").read_text(), re.MULTILINE)  # no tomllib on 3.10
    kit = {re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0] for requirement in json.loads(line)}
    assert kit == {"hypothesis", "numpy", "pytest"}
    assert "pip install 'lazyops[kit]'" in README and "pip install 'lazyops[test]'" not in README


def test_adding_a_backend_shows_the_build_system_a_host_variant_and_the_operator_namespace():
    section = README.split("## Adding a backend", 1)[1].split("\n## ", 1)[0]
    assert "[build-system]" in section and "build-backend" in section
    assert 'device_type="cuda"' not in section and "device_type=default_device()" in section
    package = re.search(r'mybackend = "([\w.]+)"', section)[1]
    namespace = _engine.namespace_of(_engine.backend_of_module(f"{package}.rmsnorm"))
    assert f"`{namespace}::rmsnorm`" in section and namespace == "lazyops_mypackage"


def test_what_the_readme_says_of_the_example_engine_is_true():
    """Issue 33: "under 200 lines" of a 214-line file; `--hf` needing transformers nothing installed; a trace -> tune
    section running a `serve.py` the repository does not have."""
    engine = ROOT / "examples" / "generate.py"
    (claimed,) = re.findall(r"\[`examples/generate\.py`\]\(examples/generate\.py\) \((\d+) lines", README)
    actual = len(engine.read_text().splitlines())
    assert abs(int(claimed) - actual) <= actual // 10, f"the README says {claimed} lines; it has {actual}"
    assert "pip install 'lazyops[transformers]'" in engine.read_text()  # --hf without it: that line, no traceback
    assert "setup.sh cli,transformers" in (ROOT / "scripts" / "doctor.sh").read_text()
    section = " ".join(README.split("## Trace → tune → plan → run", 1)[1].split("\n## ", 1)[0].split())
    steps = section.split("```")[1]
    assert "serve.py" not in steps and "examples/generate.py" in steps
    assert "stands in" in section and "a CPU-only plan can choose nothing but torch" in section
