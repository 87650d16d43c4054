"""Loading a script of ``benchmarks/`` as a module, to test its pieces without running it.

A module of its own, as ``fresh_interpreter.py`` is: the scripts are not a package, and each test file of
``tests/bench`` would otherwise repeat these lines.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name`` (registered in ``sys.modules``, so that its
    dataclasses and pickled jobs can find it)."""
    location = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert location is not None and location.loader is not None
    module = importlib.util.module_from_spec(location)
    sys.modules[name] = module
    location.loader.exec_module(module)
    return module
