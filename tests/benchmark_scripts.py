"""The scripts of ``benchmarks/`` as modules, for the tests that call their functions.

A script runs as a file (``python benchmarks/bench_kernels.py``), where Python puts its folder first on ``sys.path``
for that process alone. A test that imported them by putting ``benchmarks/`` on its own ``sys.path`` shadowed every
distribution of the same name for the rest of the run: the old ``benchmarks/kernels.py`` hid Hugging Face's
``kernels`` from transformers. So the folder is on ``sys.path`` only while a script is imported, and every script is
named ``bench_*`` (``tests/core/test_house_limits.py`` holds both).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported (with the scripts it imports), leaving ``sys.path`` as it was."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
