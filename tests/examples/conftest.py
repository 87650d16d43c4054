"""The examples run on the kernels of every backend that runs here: Triton in its interpreter where no NVIDIA GPU is
present, which must be requested before any Triton kernel module is imported (as tests/kernels/conftest.py does)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")
