"""``Once``: run a piece of user code at most once, without holding a lock while it runs.

Loading a backend runs code lazyops does not control (the package's import, its ``register_backend()``), and that
code may import other modules, start threads, or call back into lazyops. Holding a lock across it invites lock
order inversions with the import system's locks, so a ``Once`` holds its lock only to read and write its own
fields: one thread (the owner) runs the computation, the others wait on an event, then read the outcome.

- success is kept: every later call returns the same value;
- failure is not: the waiters and later callers try again (as Python's import system does after a failed import);
- re-entry from the owner thread, and a cycle of threads each waiting for a ``Once`` another of them owns, raise
  ``OnceCycleError`` instead of hanging.

Fresh locks in a forked child (``fork_safe``), so that a fork while another thread resolves a kernel cannot hang
the child. ``fork()`` copies every lock in the state it is in, but only the forking thread: a lock another thread
held stays held forever in the child. Every object of lazyops that owns a lock (each ``Once``, the namespace, the
printed lines' memory) registers here, and the child replaces them (``os.register_at_fork``). Objects are held
weakly, so registering costs nothing once they are gone. Kept with ``Once`` (its main user) rather than in a
module of its own: every module the first access imports costs about 200 µs on a slow machine.
"""

from __future__ import annotations

import _thread
import os
import weakref

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Generic, Protocol, TypeVar

    T = TypeVar("T")

    class ForkSafe(Protocol):
        def _after_fork_in_child(self) -> None: ...

    class _Generic(Generic[T]):
        pass
else:  # Once[...] appears in annotations only, which are never evaluated

    class _Generic:
        def __class_getitem__(cls, item: object) -> type:
            return cls

    T = None

_FORK_SAFE: weakref.WeakSet[ForkSafe] = weakref.WeakSet()
_AT_FORK_IN_CHILD: list[Callable[[], None]] = []


def fork_safe(obj: ForkSafe) -> None:
    """Call ``obj._after_fork_in_child()`` in every forked child (where it renews its locks)."""
    _FORK_SAFE.add(obj)


def at_fork_in_child(callback: Callable[[], None]) -> None:
    _AT_FORK_IN_CHILD.append(callback)


def _in_child() -> None:
    for callback in _AT_FORK_IN_CHILD:
        callback()
    for obj in list(_FORK_SAFE):
        obj._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_in_child)


# Which Once each thread is waiting for: read to find a cycle before waiting. Guarded by _WAITING_LOCK.
_WAITING: dict[int, Once[object]] = {}
_WAITING_LOCK = _thread.allocate_lock()


class OnceCycleError(RuntimeError):
    """The computation, directly or through other threads, waits for itself."""


class Once(_Generic[T]):
    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = _thread.allocate_lock()
        self._done = False
        self._value: T | None = None
        self._owner: int | None = None
        #: held by the owner while it computes; the others wait by acquiring it (an Event, without threading)
        self._finished: _thread.LockType | None = None
        fork_safe(self)

    @property
    def done(self) -> bool:
        return self._done

    def get(self, compute: Callable[[], T]) -> T:
        me = _thread.get_ident()
        while True:
            with self._lock:
                if self._done:
                    return self._value  # type: ignore[return-value]
                if self._owner == me:
                    raise OnceCycleError(
                        f"{self.what} was asked for again while it was being computed, by the same thread"
                    )
                if self._owner is None:
                    self._owner, finished = me, _thread.allocate_lock()
                    finished.acquire()
                    self._finished = finished
                    break
                waiting_for, owner = self._finished, self._owner
            if waiting_for is None:  # never: it is set together with _owner
                raise RuntimeError(f"lazyops internal error: {self.what} has an owner but nothing to wait on")
            self._wait(me, owner, waiting_for)
        try:
            value = compute()
        except BaseException:
            with self._lock:
                self._owner = self._finished = None
            finished.release()
            raise
        with self._lock:
            self._value, self._done = value, True
            self._owner = self._finished = None
        finished.release()
        return value

    def _wait(self, me: int, owner: int, finished: _thread.LockType) -> None:
        with _WAITING_LOCK:
            cycle = [self.what]
            thread: int | None = owner
            while thread is not None:
                if thread == me:
                    raise OnceCycleError(f"{' waits for '.join(cycle)}, which waits for the first: a cycle of threads")
                blocking = _WAITING.get(thread)
                if blocking is None:
                    break
                cycle.append(blocking.what)
                thread = blocking._owner
            _WAITING[me] = self  # type: ignore[assignment]
        try:
            with finished:  # free once the owner has finished
                pass
        finally:
            with _WAITING_LOCK:
                _WAITING.pop(me, None)

    def reset(self) -> None:
        """Forget a kept value (a rolled-back load must be done again)."""
        with self._lock:
            self._done, self._value = False, None

    def _after_fork_in_child(self) -> None:
        # Only the forking thread survives: a computation another thread was running will never finish here.
        self._lock = _thread.allocate_lock()
        if self._owner is not None and self._owner != _thread.get_ident():
            self._owner = self._finished = None


def _reset_waiting_after_fork() -> None:
    global _WAITING_LOCK
    _WAITING_LOCK = _thread.allocate_lock()
    _WAITING.clear()


at_fork_in_child(_reset_waiting_after_fork)
