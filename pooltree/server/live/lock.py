"""The scheduling lock: a re-entrant lock that also tells an event loop when it is released.

The service processes a node heartbeat on its event loop when the lock is free (``LiveJobs.try_process_heartbeat``:
a heartbeat's work is a fraction of a millisecond, less than a hop to a worker thread and back). When the lock is
busy (a fair-share update, a command, a heartbeat of a node shard) the heartbeat must not block the loop, and
handing it to a thread that blocks on the lock made the threads hold the lock in turn, so heartbeats kept missing
it. Instead the loop parks the heartbeat on a future (``released``) that the lock resolves when it is next
released, and tries again: heartbeats stay on the loop, one after the other, without a thread between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class SchedulingLock:
    """``threading.RLock`` (``acquire``, ``release``, ``with``) plus ``try_enter`` (taken only when no one, this
    thread included, holds it and no thread waits for it) and ``released(loop)``: a future resolved when the lock
    is next released."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0
        self._blocked = 0
        """Threads waiting in a blocking ``acquire``: ``try_enter`` leaves the lock to them (the event loop would
        otherwise take it again and again between its heartbeats while a command's thread waits for it)."""
        self._counter_lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._waiters_lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(False):
            if not blocking:
                return False
            with self._counter_lock:
                self._blocked += 1
            try:
                if not self._lock.acquire(True, timeout):
                    return False
            finally:
                with self._counter_lock:
                    self._blocked -= 1
        self._owner = threading.get_ident()
        self._depth += 1
        return True

    def try_enter(self) -> bool:
        """Take the lock if it is free. Unlike ``acquire(blocking=False)``, never re-entered by its holder's
        thread: a coroutine of the event loop must not run inside a section that loop's thread opened."""
        if self._owner == threading.get_ident() or self._blocked:
            return False
        return self.acquire(blocking=False)

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()
        if self._waiters:
            self._wake()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Its holder (this thread) lets the lock go wholly for the block and takes it again after, to the same
        depth (a node shard's pass runs in its process while other heartbeats take the lock)."""
        if self._owner != threading.get_ident():
            raise RuntimeError("only the scheduling lock's holder can suspend it")
        depth = self._depth
        for _ in range(depth):
            self.release()
        try:
            yield
        finally:
            for _ in range(depth):
                self.acquire()

    def released(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A future of ``loop`` resolved at the lock's next release. The caller tries the lock again after
        registering (a release in between has resolved the future already, so no wake-up is lost)."""
        future: asyncio.Future[None] = loop.create_future()
        with self._waiters_lock:
            self._waiters.append((loop, future))
        return future

    def _wake(self) -> None:
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for loop, future in waiters:
            by_loop.setdefault(loop, []).append(future)
        for (
            loop,
            futures,
        ) in by_loop.items():  # one wake-up per loop (each is a write to its pipe), not per waiter
            try:
                loop.call_soon_threadsafe(resolve_all, futures)
            except RuntimeError:  # the loop is closed: nobody waits any more
                continue


def resolve_all(futures: list[asyncio.Future[None]]) -> None:
    """Resolve the futures not yet done (the wake-up of event-loop waiters, called on their loop)."""
    for future in futures:
        if not future.done():
            future.set_result(None)
