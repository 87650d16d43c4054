"""The contract never imports its examples: no module under ``lazyops/specs/`` imports hypothesis or
``lazyops.testing`` (at import time, inside a function, or for types only); ``lazyops.testing.cases`` reads the
specs, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import lazyops
from lazyops.specs import kernel_names

SPECS = Path(lazyops.__file__).parent / "specs"
#: Specs allowed to reach up for a while: none since issue 34 moved the last examples (the sampling, fp8 and MoE
#: families') to ``lazyops.testing.cases``. A spec listed here leaves the list in the change that moves it.
NOT_YET_MOVED: set[str] = set()
FORBIDDEN = ("hypothesis", "lazyops.testing")


def imported(source: str) -> set[str]:
    """Every module ``source`` names in an import statement, wherever the statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def reaches_up(path: Path) -> set[str]:
    return {
        name
        for name in imported(path.read_text())
        if name.split(".")[0] == "hypothesis" or name.startswith(FORBIDDEN[1])
    }


def test_no_spec_imports_hypothesis_or_the_testing_package() -> None:
    offenders = {
        path.stem: sorted(reaches_up(path)) for path in sorted(SPECS.glob("*.py")) if path.stem not in NOT_YET_MOVED
    }
    assert {stem: names for stem, names in offenders.items() if names} == {}
    assert {name.removesuffix("_tl") for name in kernel_names()} <= offenders.keys()  # every kernel's spec is held


def test_the_allow_list_holds_only_specs_that_still_reach_up() -> None:
    """A spec whose examples moved leaves the list in the same change, so that it stays held."""
    assert {stem for stem in NOT_YET_MOVED if not reaches_up(SPECS / f"{stem}.py")} == set()


def test_the_finder_sees_deferred_and_typing_only_imports() -> None:
    code = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import hypothesis\ndef f():\n    from lazyops.testing import x\n"
    assert {"hypothesis", "lazyops.testing"} <= imported(code)
