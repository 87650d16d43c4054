"""Where the command line's code lives (issue 28.5): every subcommand a module of ``lazyops.cli`` with one set of
exit statuses, and the stub generator above the signature checker, never the other way round."""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import lazyops
from lazyops.__main__ import _parser
from lazyops.cli import SUBCOMMANDS

SRC = Path(lazyops.__file__).resolve().parent


def subcommands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_subcommand_is_a_module_of_lazyops_cli():
    assert set(subcommands_of(_parser())) == set(SUBCOMMANDS) >= {"list", "which", "stubs", "doctor", "trace"}
    for command, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(f"lazyops.cli.{module_name}")
        assert module.HELP and callable(module.add_arguments) and callable(module.main), command
        assert "Exit status" in module.__doc__, f"{command}: its --help description says its exit statuses"
    defined = {node.name for node in ast.parse((SRC / "__main__.py").read_text()).body if hasattr(node, "name")}
    assert defined == {"_parser", "main"}, "__main__ builds the parser and dispatches, nothing else"


def test_one_set_of_exit_statuses():
    for path in SRC.rglob("*.py"):
        assert "EXIT_" not in path.read_text(), f"{path}: exit statuses are lazyops.cli._errors' (OK, USAGE, ...)"


def imported_lazyops_modules(module: str) -> set[str]:
    """The ``lazyops.*`` modules ``module``'s source imports, at its top or inside a function."""
    tree = ast.parse((SRC / f"{module.removeprefix('lazyops.').replace('.', '/')}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lazyops."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("lazyops.")}
    return found


def test_the_signature_checker_and_the_stub_generator_import_one_way():
    assert "lazyops._signature" in imported_lazyops_modules("lazyops._stubgen")
    reached, frontier = set(), ["lazyops._signature"]
    while frontier:
        module = frontier.pop()
        if module in reached or not (SRC / f"{module.removeprefix('lazyops.').replace('.', '/')}.py").is_file():
            continue
        reached.add(module)
        frontier += imported_lazyops_modules(module)
    assert "lazyops._stubgen" not in reached, reached
