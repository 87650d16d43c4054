"""Plans and ``lazyops tune``: fake ports registered by entry points, and a clean environment for the command line
(helpers in plan_support)."""

from __future__ import annotations

import pytest
from plan_support import PICKY, RIGHT, WRONG, write_port


@pytest.fixture
def env(fake_backends):
    """A clean environment (no LAZYOPS_* variables, no Triton interpreter) that sees lazyops' source and any fake
    backend a test makes."""
    environment = fake_backends.env()
    for variable in ("TRITON_INTERPRET", "NO_COLOR", "COLUMNS", "TQDM_DISABLE"):
        environment.pop(variable, None)
    return environment


@pytest.fixture
def ports(fake_backends):
    """Backends 'fast' (right), 'wrong' (rmsnorm without normalising) and 'picky' (declines n > 128)."""
    write_port(fake_backends, "fast", RIGHT, ["rmsnorm_tl", "softmax_tl"])
    write_port(fake_backends, "wrong", WRONG, ["rmsnorm_tl"])
    write_port(fake_backends, "picky", PICKY, ["rmsnorm_tl"])
    return fake_backends
