"""Whether a backend can serve kernels here, in one word and why: what ``list``, ``which`` and ``doctor`` report.

Asking loads the backend's package and calls its ``unavailable_reason()`` hook (no kernel module is imported):
the question resolution itself does not ask until a kernel is built, so that a listing can answer it for every
backend without the cost of their kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNS, CANNOT_RUN, NOT_INSTALLED, BROKEN = "ok", "cannot run", "not installed", "broken"


@dataclass(frozen=True)
class BackendStatus:
    name: str
    #: RUNS, CANNOT_RUN (its hook says why), NOT_INSTALLED (its package, or one it needs), BROKEN (anything else)
    status: str
    #: why not, with the way out; None when it runs
    reason: str | None = None

    @property
    def runs(self) -> bool:
        return self.status == RUNS

    @property
    def verdict(self) -> str:
        """``cannot run here``, ``is not installed``, ``is broken``: the status as the predicate of a sentence."""
        return {RUNS: "runs here", CANNOT_RUN: "cannot run here"}.get(self.status, f"is {self.status}")

    def sentence(self) -> str:
        """``backend 'triton' cannot run here: no GPU driver found; ...``."""
        return f"backend {self.name!r} {self.verdict}" + (f": {self.reason}" if self.reason else "")


def backend_status(name: str) -> BackendStatus:
    """Backend ``name``'s status: its package loaded and its kernel list read, its hook asked."""
    from lazyops import _api
    from lazyops._errors import BackendError

    try:
        backend = _api.backend(name)
        backend.exports()
        reason = backend.unavailable_reason()
    except BackendError as error:
        return BackendStatus(name, NOT_INSTALLED if error.missing else BROKEN, one_line(error))
    if reason:
        return BackendStatus(name, CANNOT_RUN, one_line(reason))
    return BackendStatus(name, RUNS)


def one_line(value: object) -> str:
    return " ".join(str(value).split())
