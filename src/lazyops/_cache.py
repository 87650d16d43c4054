"""Records kept on disk between processes, so that a first access need not redo work whose inputs are unchanged.

Two things are cached: the ``lazyops.backends`` entry points of the installed distributions (``_registry``) and
each backend's kernel list read from its stub (``_manifest``). Both cost milliseconds to compute and change only
when something is installed, like the bytecode Python caches in ``__pycache__``.

A record is ``(FORMAT, key, value)``; the caller's key is made of what the value was computed from (paths and
their ``os.stat`` facts), and a record is used only when its key equals the key computed now, so a stale record
is never used: it is recomputed and overwritten.

Two rules keep that sound:

- **The racy rule** (git's): a record is written only when every timestamp in its key is at least
  ``RACY_NS`` old. A file rewritten within one tick of the filesystem's clock, at the same size, keeps its
  timestamp; a record of its first version would then pass for the second. Two seconds covers every clock
  granularity in use (FAT's is two seconds).
- **Never fatal.** A cache directory that cannot be made or written, a file that is unreadable, truncated, corrupt
  or from another version of lazyops: the record is ignored and, where possible, rebuilt. Nothing here raises.

Where: ``LAZYOPS_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/lazyops``, else ``~/.cache/lazyops``.
"""

from __future__ import annotations

import marshal
import os
import time

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from typing import Any

#: bumped whenever the meaning of a record changes, so that an older lazyops' records are ignored
FORMAT = "lazyops-cache-3"
RACY_NS = 2_000_000_000


def directory() -> str | None:
    """The cache directory (it may not exist yet); ``None`` where no home can be found."""
    explicit = os.environ.get("LAZYOPS_CACHE_DIR", "").strip()
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not base:
        home = os.path.expanduser("~")
        if home == "~":
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "lazyops")


def file_name(kind: str, identity: str) -> str:
    """A record's file name: the kind and the identity (a path) made safe, without hashing (no module to import).

    Two identities with the same name only overwrite each other's record; the key inside tells them apart.
    """
    safe = identity.replace("\\", "%").replace("/", "%").replace(":", "%")
    return f"{kind}-{safe[-150:]}.marshal"


def load(name: str, key: Any) -> Any:
    """The value recorded under ``name`` for exactly ``key``, else ``None``."""
    where = directory()
    if where is None:
        return None
    try:
        with open(os.path.join(where, name), "rb") as file:
            record = marshal.loads(file.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None  # missing, unreadable or corrupt: computed afresh (and rewritten by the caller)
    if type(record) is not tuple or len(record) != 3 or record[0] != FORMAT or record[1] != key:
        return None
    return record[2]


def store(name: str, key: Any, value: Any, newest_ns: int) -> bool:
    """Record ``value`` for ``key``; ``newest_ns`` is the newest timestamp in the key. Returns whether it was written.

    Written to a temporary file and renamed into place, so that a reader in another process sees the old record or
    the new one, never half of one.
    """
    if time.time_ns() - newest_ns < RACY_NS:
        return False  # an input may still change within the same timestamp: see the racy rule above
    where = directory()
    if where is None:
        return False
    path = os.path.join(where, name)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(where, exist_ok=True)
        with open(temporary, "wb") as file:
            file.write(marshal.dumps((FORMAT, key, value)))
        os.replace(temporary, path)
    except (OSError, ValueError):  # read-only, full, a file in the way, a value marshal cannot write
        try:  # noqa: SIM105 (contextlib.suppress would cost importing contextlib on the first access)
            os.unlink(temporary)
        except OSError:
            pass
        return False
    return True
