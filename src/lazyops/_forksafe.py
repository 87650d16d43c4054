"""Fresh locks in a forked child, so that a fork while another thread resolves a kernel cannot hang the child.

``fork()`` copies every lock in the state it is in, but only the forking thread: a lock another thread held stays
held forever in the child. Every object of lazyops that owns a lock registers here, and the child replaces them
(``os.register_at_fork``). Objects are held weakly, so registering costs nothing once they are gone.
"""

from __future__ import annotations

import os
import weakref

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    class ForkSafe(Protocol):
        def _after_fork_in_child(self) -> None: ...


_OBJECTS: weakref.WeakSet[ForkSafe] = weakref.WeakSet()
_CALLBACKS: list[Callable[[], None]] = []


def register(obj: ForkSafe) -> None:
    _OBJECTS.add(obj)


def at_fork_in_child(callback: Callable[[], None]) -> None:
    _CALLBACKS.append(callback)


def _in_child() -> None:
    for callback in _CALLBACKS:
        callback()
    for obj in list(_OBJECTS):
        obj._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_in_child)
