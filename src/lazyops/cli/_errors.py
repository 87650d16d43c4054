"""The command line's errors and exit statuses: one line on stderr and a documented status, never a traceback
unless ``--debug`` asks for it.

Exit statuses of every subcommand (the README's table):

- 0: done, and nothing found wrong;
- 1: done, and something found wrong (the answer is "no"): ``doctor`` found a selected backend or a kernel that
  cannot work, a kernel that fails its check, or a ``LAZYOPS_*`` variable lazyops does not read; ``bench`` or
  ``warmup`` could not build or run an implementation it was asked for; ``trace --check`` found a kernel the
  backend lacks; ``which`` names an unavailable kernel or a name that is not a kernel; ``stubs --check`` found the
  stub stale;
- 2: could not do what was asked: bad arguments, a configuration error in the environment, a backend that cannot
  be loaded, an unreadable or malformed input file, an output file that cannot be written, the ``cli`` extra not
  installed;
- 3: an unexpected error (a bug in lazyops or in a backend): ``--debug`` shows its traceback;
- 130: interrupted (Ctrl-C);
- 141: the reader closed the output early (``lazyops list | head``): the status of a tool ended by SIGPIPE, and
  nothing on stderr.
"""

from __future__ import annotations

from collections.abc import Iterable

OK = 0
FOUND_PROBLEMS = 1
USAGE = 2
INTERNAL = 3
INTERRUPTED = 130
CLOSED_PIPE = 141


class CommandError(Exception):
    """A subcommand cannot do what it was asked (or, with ``FOUND_PROBLEMS``, the answer is "no"); the message
    says why and what to do instead."""

    exit_status = USAGE

    def __init__(self, message: str, *, exit_status: int | None = None) -> None:
        super().__init__(message)
        if exit_status is not None:
            self.exit_status = exit_status


class MissingExtraError(CommandError):
    """A library of the ``cli`` extra (rich, matplotlib) is not installed."""

    def __init__(self, package: str) -> None:
        super().__init__(
            f"this command needs {package}, which is not installed; install it with: pip install 'lazyops[cli]'"
        )


def nearest(name: str, choices: Iterable[str]) -> list[str]:
    """The one or two of ``choices`` nearest to a mistyped ``name`` (none when nothing is near)."""
    import difflib

    return difflib.get_close_matches(name, sorted(choices), n=2, cutoff=0.6)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'torch'?`` for a mistyped ``name``, or ``""`` when no choice is near."""
    close = nearest(name, choices)
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


def unknown_names(option: str, what: str, names: Iterable[str], known: Iterable[str]) -> CommandError:
    """``--backend: no backend named 'torh' (did you mean 'torch'?); known: torch, triton``."""
    known = tuple(known)
    described = []
    for name in sorted(set(names) - set(known)):
        close = nearest(name, known)
        described.append(repr(name) + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
    return CommandError(f"{option}: no {what} named {', '.join(described)}; known: {', '.join(known)}")
