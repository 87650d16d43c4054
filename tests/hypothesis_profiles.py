"""The hypothesis settings the suite runs with, pinned so that hypothesis never decides a run at random.

``HYPOTHESIS_PROFILE`` picks one (``tests/conftest.py`` loads it; hypothesis' own ``--hypothesis-profile`` option
does the same):

- ``ci``, the default everywhere (CI, ``scripts/test.sh``, a plain ``pytest``): derandomised, so every test draws
  the same examples on every run and machine, and a failure reproduces by running the test again; no example
  database (nothing replayed from, or written to, ``.hypothesis/``); no deadline and no timing health check (a busy
  machine must not fail a test); a failure prints its ``@reproduce_failure`` blob.
- ``dev``: hypothesis' defaults, without the deadline: fresh examples on every run, a failure saved in
  ``.hypothesis/`` and replayed first next time. For looking beyond the pinned examples.
- ``exhaustive``: fresh examples, :data:`EXHAUSTIVE_SCALE` times as many. Tests that set their own example count
  scale it with :func:`examples` (the kernel tests do); the others keep theirs. The heavy sweeps, which take tens
  of minutes, run only then (:func:`exhaustive`).

A module of its own, not a conftest: ``tests/kernels/conftest.py`` reads it too, and ``from conftest import``
finds whichever conftest was imported last.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: The examples a test draws under ``ci`` and ``dev`` when it sets no count of its own (hypothesis' default).
EXAMPLES = 100
#: How many times as many examples ``exhaustive`` draws.
EXHAUSTIVE_SCALE = 20
DEFAULT = "ci"


def register() -> None:
    settings.register_profile(
        "ci",
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", deadline=None)
    settings.register_profile(
        "exhaustive",
        max_examples=EXAMPLES * EXHAUSTIVE_SCALE,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def load() -> str:
    """Register the profiles and load the one ``HYPOTHESIS_PROFILE`` names (``ci`` when unset); returns its name."""
    register()
    name = os.environ.get("HYPOTHESIS_PROFILE") or DEFAULT
    settings.load_profile(name)  # an unknown name raises InvalidArgument, listing the registered ones
    return name


def exhaustive() -> bool:
    """Whether the loaded profile is ``exhaustive`` (or draws as many): the heavy sweeps run then."""
    return settings.default.max_examples >= EXAMPLES * EXHAUSTIVE_SCALE


def examples(count: int) -> int:
    """``count`` examples in proportion to the loaded profile's (``count`` under ``ci`` and ``dev``)."""
    return max(1, count * settings.default.max_examples // EXAMPLES)
