"""Bounded rings of the process's recent stalls: what held up everything else for a while, kept to be read beside
the slow heartbeats (``live/tail.py``, ``GET /internal/heartbeat_tail``).

Each part that can stall the others keeps its own ring of the stalls at least ``STALL_SECONDS`` long, appended
where it already measures them (so a stall costs a deque append, everything shorter nothing): the scheduling
lock's holds (with the function that held it), the group commit's transactions, the store's ``COMMIT`` statements
and its checkpoints (``SqliteStore.checkpoint_journal``, after a batch; SQLite's own inside the commit that crosses
its bound), garbage collections, fair-share updates.
"""

from __future__ import annotations

import time
from collections import deque

STALL_SECONDS = 0.01
"""Stalls this long or longer are kept."""
KEPT = 256
"""Stalls kept per ring (the latest)."""

Stall = tuple[float, float, str]
"""(wall-clock start, seconds, what: the holder's function, a commit's records, a collection's generation)."""


class StallRing:
    """The latest ``KEPT`` stalls of one kind, and their count and seconds so far (appended by the thread that
    stalled: a deque's append is atomic; the count and sum are read as hints)."""

    def __init__(self) -> None:
        self.stalls: deque[Stall] = deque(maxlen=KEPT)
        self.count = 0
        self.seconds = 0.0

    def add(self, seconds: float, what: str, ended: float | None = None) -> None:
        """A stall of ``seconds`` that ended at ``ended`` (wall clock; now when None)."""
        end = time.time() if ended is None else ended
        self.stalls.append((end - seconds, seconds, what))
        self.count += 1
        self.seconds += seconds

    def note(self, seconds: float, what: str) -> None:
        """``add`` when ``seconds`` is at least ``STALL_SECONDS`` (the caller's measured span, just ended)."""
        if seconds >= STALL_SECONDS:
            self.add(seconds, what)

    def since(self, wall: float) -> list[Stall]:
        """The stalls kept that ended at or after ``wall``."""
        return [stall for stall in list(self.stalls) if stall[0] + stall[1] >= wall]
