"""Reads that need the scheduling lock, answered without waiting for it when it is busy.

``RecentReads(lock, clock)``: ``read(key, gather)`` runs ``gather`` under the lock when the lock is free and keeps
its answer with the time; when heartbeats or a fair-share update hold the lock, the answer kept for ``key`` is
returned instead if it is at most ``period`` old (1 s: YTsaurus's ``static_orchid_cache_update_period``, the
orchid's rule here too), else the read waits for the lock as before. What ``gather`` returns is shared between
readers and must not be changed by them. The web pages read the scheduler through it.
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
    ) -> None:
        self.lock = lock
        self.clock = clock
        self.period = period
        self.size = size
        self._kept: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._kept_lock = threading.Lock()
        self.served = 0
        """Reads answered from a kept answer because the lock was busy."""

    def read(self, key: Hashable, gather: Callable[[], T]) -> T:
        if not self.lock.acquire(blocking=False):
            with self._kept_lock:
                kept = self._kept.get(key)
            if kept is not None and self.clock() - kept[0] <= self.period:
                self.served += 1
                return kept[1]
            self.lock.acquire()
        try:
            value = gather()
        finally:
            self.lock.release()
        with self._kept_lock:
            self._kept[key] = (self.clock(), value)
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return value
