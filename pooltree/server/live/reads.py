"""Reads that need the scheduling lock, answered without waiting for it when it is busy.

``RecentReads(lock, clock)``: ``read(key, gather)`` runs ``gather`` under the lock when the lock is free and keeps
its answer with the time; when heartbeats or a fair-share update hold the lock, the answer kept for ``key`` is
returned instead if it is at most ``period`` old (1 s: YTsaurus's ``static_orchid_cache_update_period``, the
orchid's rule here too), else the read waits for the lock as before. What ``gather`` returns is shared between
readers and must not be changed by them. The web pages read the scheduler through it.

With ``latest_only`` (the orchid), a kept answer is served only while no answer for any key was made after it:
a client that read one path after a change never reads another from before it (answers are numbered under the
scheduling lock, in the order of the states they saw).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

RECENT_READ_PERIOD = 1.0
RECENT_READ_KEYS = 512
"""Answers kept (least recently made dropped first): per page, tree and operation."""


class RecentReads:
    """Answers of lock-holding reads, kept per key so a read that finds the lock busy need not wait."""

    def __init__(
        self,
        lock: Any,
        clock: Callable[[], float],
        *,
        period: float = RECENT_READ_PERIOD,
        size: int = RECENT_READ_KEYS,
        latest_only: bool = False,
    ) -> None:
        self.lock = lock
        self.clock = clock
        self.period = period
        self.size = size
        self.latest_only = latest_only
        self._kept: OrderedDict[Hashable, tuple[float, Any, int]] = OrderedDict()
        """key → (when it was made, the answer, its number)."""
        self._kept_lock = threading.Lock()
        self._made = 0
        """Answers made so far; the next one's number (taken under the scheduling lock)."""
        self._newest = 0
        """The number of the newest answer kept, of any key."""
        self.served = 0
        """Reads answered from a kept answer because the lock was busy."""

    def read(self, key: Hashable, gather: Callable[[], T]) -> T:
        if not self.lock.acquire(blocking=False):
            with self._kept_lock:
                kept = self._kept.get(key)
                newest = self._newest
            if (
                kept is not None
                and self.clock() - kept[0] <= self.period
                and (not self.latest_only or kept[2] == newest)
            ):
                self.served += 1
                return kept[1]
            self.lock.acquire()
        try:
            value = gather()
            self._made += 1
            number = self._made
        finally:
            self.lock.release()
        with self._kept_lock:
            kept = self._kept.get(key)
            if kept is None or kept[2] < number:  # a later answer for the key, kept first, stays
                self._kept[key] = (self.clock(), value, number)
                self._kept.move_to_end(key)
            self._newest = max(self._newest, number)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return value
