"""The kernel list is the specs' own (``lazyops.specs._kernels``): a spec module that the list does not name, a
name with no spec module or no examples module, or a backend manifest naming a kernel nobody specifies fails here,
and the torch backend (the last resort) implements exactly the list."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lazyops
from lazyops._registry import read_manifest

PACKAGE = Path(lazyops.__file__).parent
SPECS = PACKAGE / "specs"


def registry() -> tuple[str, ...]:
    """The list as written, read as data (``ast``): no spec, no torch."""
    tree = ast.parse((SPECS / "_kernels.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KERNELS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("lazyops/specs/_kernels.py defines no KERNELS")


def spec_modules() -> set[str]:
    return {f"{path.stem}_tl" for path in SPECS.glob("*.py") if not path.stem.startswith("_")}


def examples_modules() -> set[str]:
    return {f"{path.stem}_tl" for path in (PACKAGE / "testing" / "cases").glob("*.py") if not path.stem.startswith("_")}


def manifests() -> dict[str, set[str]]:
    return {
        stub.parent.name: set(read_manifest(str(stub)))
        for stub in sorted((PACKAGE / "_backends").glob("*/__init__.pyi"))
    }


def test_every_spec_module_is_in_the_list_and_every_name_has_one() -> None:
    listed = set(registry())
    assert spec_modules() - listed == set(), "spec modules the list (lazyops/specs/_kernels.py) does not name"
    assert listed - spec_modules() == set(), "names in lazyops/specs/_kernels.py without a spec module"


def test_every_listed_kernel_has_an_examples_module_and_every_examples_module_a_kernel() -> None:
    listed = set(registry())
    assert listed - examples_modules() == set(), "listed kernels without lazyops/testing/cases/<kernel>.py"
    assert examples_modules() - listed == set(), "examples modules of no listed kernel"


def test_a_kernel_without_an_examples_module_is_refused_naming_the_module() -> None:
    from lazyops.specs import KernelSpec
    from lazyops.testing.cases import examples

    class UnlistedSpec(KernelSpec):
        name = "unlisted_tl"

    with pytest.raises(LookupError, match=r"unlisted_tl has no examples: no module lazyops\.testing\.cases\.unlisted;"):
        examples(UnlistedSpec())


def test_the_list_is_sorted_and_has_no_duplicates() -> None:
    assert list(registry()) == sorted(set(registry()))


def test_the_backends_manifests_name_only_listed_kernels_and_torch_names_them_all() -> None:
    listed = set(registry())
    found = manifests()
    assert "torch" in found
    for backend, names in found.items():
        assert names - listed == set(), f"{backend}'s manifest names kernels no spec declares"
    assert found["torch"] == listed, "the torch backend (the last resort) implements every kernel"


def test_kernel_names_is_the_list_read_without_torch() -> None:
    from lazyops.specs import kernel_names

    assert kernel_names() == registry()
