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
import bisect
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from pooltree.server.heartbeat_trace import HOLD_SECONDS, TRACE
from pooltree.server.stalls import STALL_SECONDS, StallRing


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
        self._passed: threading.Event | None = None
        """Set once every loop woken at the last release with waiters has run them (`let_waiters_in`)."""
        self._since = 0.0
        """When the current holder took the lock (outermost)."""
        self._since_cpu = 0.0
        """The holder thread's CPU clock when it took the lock (outermost; only while ``heartbeat_trace.py`` is on)."""
        self.holds = [0] * (len(HOLD_BUCKETS) + 1)
        """Holds of the lock (outermost acquire to release) per `HOLD_BUCKETS` upper bound, the last past them."""
        self.hold_seconds = 0.0
        """Seconds the lock was held, summed over every hold."""
        self.hold_max = 0.0
        """The longest single hold so far, seconds."""
        self.long_holds = StallRing()
        """Holds of at least ``STALL_SECONDS``, each with the function that released the lock (``live/tail.py``)."""

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
        if self._depth == 1:
            self._since = time.perf_counter()
            if TRACE.enabled:
                self._since_cpu = time.thread_time()
        return True

    @property
    def held(self) -> bool:
        """Whether this thread holds the lock."""
        return self._owner == threading.get_ident()

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
            held = time.perf_counter() - self._since
            self.holds[bisect.bisect_left(HOLD_BUCKETS, held)] += 1
            self.hold_seconds += held
            if held > self.hold_max:
                self.hold_max = held
            if held >= HOLD_SECONDS and TRACE.enabled:
                holder = _holder()
                TRACE.holds.append((time.time() - held, held, holder, time.thread_time() - self._since_cpu))
                if held >= STALL_SECONDS:
                    self.long_holds.add(held, holder)
            elif held >= STALL_SECONDS:
                self.long_holds.add(held, _holder())
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

    def let_waiters_in(self, timeout: float) -> None:
        """Called between two holds of a long task cut into parts (a fair-share update, `updates.py`), without
        the lock: when event-loop heartbeats were waiting at the last release, wait (at most ``timeout``
        seconds) until their loops have run them, so that they get the lock before the task's next part.
        Without this the task's thread, which has the interpreter, takes the lock again before a loop wakes."""
        passed = self._passed
        if passed is not None:
            passed.wait(timeout)

    def _wake(self) -> None:
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for loop, future in waiters:
            by_loop.setdefault(loop, []).append(future)
        passed = _Passed(len(by_loop))
        self._passed = passed
        for (
            loop,
            futures,
        ) in by_loop.items():  # one wake-up per loop (each is a write to its pipe), not per waiter
            try:
                loop.call_soon_threadsafe(resolve_then_mark, loop, futures, passed)
            except RuntimeError:  # the loop is closed: nobody waits any more
                passed.mark()
                continue


def _holder() -> str:
    """The function that released the lock (the first frame outside this module): who held it."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_code.co_qualname if frame is not None else "?"


HOLD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
"""Upper bounds (seconds) of the lock hold histogram (``/metrics`` ``pooltree_scheduler_lock_hold_seconds``)."""


class _Passed(threading.Event):
    """Set when ``loops`` loops have each run the waiters a release woke (`SchedulingLock.let_waiters_in`)."""

    def __init__(self, loops: int) -> None:
        super().__init__()
        self._left = loops
        self._left_lock = threading.Lock()

    def mark(self) -> None:
        with self._left_lock:
            self._left -= 1
            if self._left > 0:
                return
        self.set()


def resolve_then_mark(
    loop: asyncio.AbstractEventLoop, futures: list[asyncio.Future[None]], passed: _Passed
) -> None:
    """On ``loop``: resolve its waiters, then mark ``passed`` once the tasks they wake have had their turn (their
    wake-ups are queued before the mark)."""
    resolve_all(futures)
    loop.call_soon(passed.mark)


def resolve_all(futures: list[asyncio.Future[Any]], result: Any = None) -> None:
    """Resolve the futures not yet done with ``result`` (the wake-up of event-loop waiters, called on their
    loop)."""
    for future in futures:
        if not future.done():
            future.set_result(result)
