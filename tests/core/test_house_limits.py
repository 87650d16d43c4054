"""The limits issue 28 set for the house, held: no import cycle in the package, the benchmarks a library of at most
2,700 lines, results of at most 1 MiB with no rerun files, no notebook file over 250 lines; and issue 34's: no class in
the package over 200 lines.

Each limit is a count over the checkout's files, not a timing. A change that crosses one fails here with what crossed
it; to move a limit, change it here with the reason in the commit.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import lazyops

PACKAGE = Path(lazyops.__file__).resolve().parent
CHECKOUT = PACKAGE.parents[1]
BENCHMARKS = CHECKOUT / "benchmarks"
#: What each raise of the benchmarks' line budget paid for; a new family adds its own line, saying what for.
BENCHMARK_SHARES = {
    "the harness, the twelve kernels, the layer and tune on one library (issue 28)": 2_500,
    "a Hugging Face model: stock, lazyops' patch and liger-kernel's, prefill, decode, generate_batch (issue 38)": 200,
    "attention's split sweep and prefill cells, the engine's decode against HF's static cache (issue 39)": 100,
    "sampling: bench_kernels.py --sampling, vLLM's torch sampling path and torch.multinomial as peers (issue 37)": 60,
    "fp8 GEMM: bench_gemm.py --fp8, torch._scaled_mm and the bf16 GEMM as peers (issue 35)": 70,
    "the MoE layer: bench_layer.py --moe (Mixtral-8x7B, Qwen3-30B-A3B), torch._grouped_mm as the peer (issue 36)": 90,
    "sampling's grid: --sampling at V = 128256 and 151936, logprobs and bias+mask variants (issue 37, samp2)": 45,
    "fp8 layer: bench_layer.py --fp8 block,channel (weights quantised, fp8 producers and GEMMs), --no-compile, bench_tune.py --fp8 (issue 35)": 110,
    "fp8 GEMM tiles: bench_gemm.py --fp8 --sweep triton, rows of configs/matmul_fp8.json as candidates (issue 35)": 30,
    "MoE experts: bench_kernels.py --moe (balanced routing, torch._grouped_mm, --tiles), the graph sampler (issue 36)": 95,
    "sampling's paths: --sampling times Triton's split path over all rows, in SM-count and half-L2 groups (issue 37)": 29,
    "sampling's searches: --sampling times Triton's 4-way searches and bisections beside its 16-way (issue 37)": 20,
}
BENCHMARK_LINES = sum(BENCHMARK_SHARES.values())
RESULT_BYTES = 1 << 20
NOTEBOOK_LINES = 250
#: issue 34: a class that outgrows this holds more than one concern (KernelSpec was 417 lines, Namespace 372)
CLASS_LINES = 200
#: Names of a rerun kept beside the run it repeats; git history keeps earlier runs.
RERUN = re.compile(r"_(before|after|recheck|rerun|final|old|new|v\d+)(_\w+)?\.", re.IGNORECASE)

pytestmark = pytest.mark.skipif(not BENCHMARKS.is_dir(), reason="needs the checkout, not an installed wheel")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.Module, name: str, is_package: bool, typing_only: bool = False) -> set[str]:
    """Every module ``name`` imports, at import time or later inside a function (a deferred import closes a cycle
    too, only later), except under ``if TYPE_CHECKING:`` (never run) unless ``typing_only`` (a type checker reads
    them: a circle there is still two modules that cannot be read apart). ``from a import b`` names ``a`` and
    ``a.b`` (``b`` may be a module)."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child.test) and not typing_only:
                for statement in child.orelse:
                    visit(statement)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    visit(tree)
    return found


def import_graph(typing_only: bool = False) -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = imports(ast.parse(path.read_text()), name, path.name == "__init__.py", typing_only)
        # a package is initialised before its modules run, so a module naming its own package is no cycle
        ancestors = {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)}
        graph[name] = {other for other in imported if other in modules and other != name and other not in ancestors}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_cycle_finder_counts_deferred_imports_and_ignores_typing_only_ones() -> None:
    code = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\nimport pkg.b\ndef f():\n    import pkg.d\n"
    assert imports(ast.parse(code), "pkg.a", is_package=False) == {"typing", "typing.TYPE_CHECKING", "pkg.b", "pkg.d"}
    relative = ast.parse("from . import b\nfrom ._c import d\n")
    assert imports(relative, "pkg.a", is_package=False) == {"pkg", "pkg.b", "pkg._c", "pkg._c.d"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph()
    assert len(graph) > 50, "the package's modules were not found"
    assert cycles(graph) == [], "modules that import each other (pass what one needs from the other as an argument)"


def test_no_import_cycle_counting_typing_only_imports() -> None:
    assert cycles(import_graph(typing_only=True)) == [], "modules that name each other's types: move the shared type"


def tracked_lines(folder: Path, suffixes: tuple[str, ...]) -> dict[str, int]:
    files = [path for path in folder.rglob("*") if path.is_file() and path.suffix in suffixes]
    return {str(path.relative_to(CHECKOUT)): len(path.read_text().splitlines()) for path in files}


def test_the_benchmarks_stay_within_their_line_budget() -> None:
    lines = {
        path: count
        for path, count in tracked_lines(BENCHMARKS, (".py", ".sh", ".md")).items()
        if not path.startswith("benchmarks/results/") and "__pycache__" not in path
    }
    assert lines, "no benchmark file found"
    assert sum(lines.values()) <= BENCHMARK_LINES, sorted(lines.items(), key=lambda item: -item[1])


def test_results_are_the_latest_runs_in_at_most_1_mib() -> None:
    results = [path for path in (BENCHMARKS / "results").rglob("*") if path.is_file()]
    total = sum(path.stat().st_size for path in results)
    assert total <= RESULT_BYTES, f"benchmarks/results holds {total:,} bytes; keep the latest run of each file"
    reruns = [str(path.relative_to(CHECKOUT)) for path in results if RERUN.search(path.name)]
    assert not reruns, f"rerun files beside their run (git keeps earlier runs): {reruns}"


def test_no_notebook_file_is_over_250_lines() -> None:
    prose = [CHECKOUT / "docs", BENCHMARKS]
    lines = {
        path: count
        for folder in prose
        for path, count in tracked_lines(folder, (".md",)).items()
        if not path.startswith("benchmarks/results/")
    }
    assert lines, "no docs found"
    long = {path: count for path, count in lines.items() if count > NOTEBOOK_LINES}
    assert not long, f"split these, or move their history to docs/decisions/: {long}"


def test_no_class_in_the_package_is_over_200_lines() -> None:
    sizes = {
        f"{path.relative_to(PACKAGE.parent)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }
    assert len(sizes) > 50, "too few classes found: is the package where this test looks?"
    assert "KernelSpec" in "".join(sizes), "the spec's base class is not where this test looks"
    long = {name: lines for name, lines in sizes.items() if lines > CLASS_LINES}
    assert not long, f"split these by concern (a class over {CLASS_LINES} lines holds more than one): {long}"


def test_no_script_or_test_helper_shadows_an_installed_module() -> None:
    """A folder of scripts on ``sys.path`` hides every installed module of a script's name: ``benchmarks/kernels.py``
    once hid Hugging Face's ``kernels`` from transformers for the rest of a test run. The benchmark scripts are
    named ``bench_*``, and no script or test helper (pytest puts each test folder on ``sys.path``) takes the name of
    a standard-library module or of a top-level module of any installed distribution."""
    import sys
    from importlib.metadata import packages_distributions

    taken = set(sys.stdlib_module_names) | set(packages_distributions())
    folders = [BENCHMARKS, CHECKOUT / "examples", *(path for path in (CHECKOUT / "tests").rglob("*") if path.is_dir())]
    ours = {
        path.stem: str(path.relative_to(CHECKOUT))
        for folder in folders
        if "__pycache__" not in folder.parts and not folder.name.startswith(".")
        for path in folder.glob("*.py")
        if path.stem != "conftest"
    }
    shadowing = {name: path for name, path in ours.items() if name in taken}
    assert not shadowing, f"rename these, they hide installed modules of the same name: {shadowing}"
    scripts = [path.name for path in BENCHMARKS.glob("*.py")]
    assert scripts and all(name.startswith("bench_") for name in scripts), scripts
