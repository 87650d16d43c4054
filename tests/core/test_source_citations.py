"""The package cites no result file or note, and names no benchmark script that does not exist.

Result files are rewritten by each run and notes are deleted once their answer is a decision record: a comment that
cites either goes stale silently. Why a value was chosen is in docs/decisions/, tuned values in the backends'
configs/ tables (issue 28).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lazyops

PACKAGE = Path(lazyops.__file__).resolve().parent
CHECKOUT = PACKAGE.parents[1]
#: What a src/ file may not cite: committed results and the notebooks that once held the reasons.
CITATION = re.compile(r"benchmarks/results|\bNOTES\.md|\bBENCHMARKS\.md")
SCRIPT = re.compile(r"benchmarks/([\w/]+\.py)")


def source_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*") if path.is_file() and path.suffix in (".py", ".pyi", ".json"))


def test_no_source_file_cites_a_result_file_or_a_note() -> None:
    cited = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in source_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if CITATION.search(line)
    ]
    assert not cited, "cite docs/decisions/ instead:\n" + "\n".join(cited)


def test_every_benchmark_script_the_source_names_exists() -> None:
    if not (CHECKOUT / "benchmarks").is_dir():
        pytest.skip("lazyops is not imported from a checkout")
    missing = sorted(
        f"{path.relative_to(PACKAGE)}: benchmarks/{script}"
        for path in source_files()
        for script in SCRIPT.findall(path.read_text(encoding="utf-8"))
        if not (CHECKOUT / "benchmarks" / script).is_file()
    )
    assert not missing, "\n".join(missing)
