"""The mutation ids of starts, claimed at admission: a retry of a start still being stored answers its operation.

A start with a mutation id claims it under the scheduling lock, before it admits anything; the claim is settled
once the start's outcome is known (its record stored, or the start refused and rolled back). A retry with the same
id that comes meanwhile (the official ``yt`` client retries a start whose request timed out, with the same
mutation id and ``retry=%true``) finds the claim, waits without the lock for it to settle and then answers the
first start's operation, as YTsaurus's response keeper answers a pending mutation's retry with the first
request's response; if the first start failed, nothing of it was committed and the retry starts afresh.

A settled start's answer is kept here for ``KEPT_SECONDS`` (the time a mutation id is remembered in the store):
the command pipeline reads the store's saved answers before it calls the scheduler, and a retry that read the
store just before the first start's commit must still find that start here once it holds the lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pooltree.errors import YtError
from pooltree.server.live.model import LiveOperation

KEPT_SECONDS = 120.0
"""How long a settled start's answer is kept in memory (the app's ``MUTATION_TTL``)."""


class NotMarkedRetry(YtError):
    """A second request with a mutation id whose start is in flight or stored, not marked ``retry`` (as the
    pipeline answers one whose answer is stored, ``app.py``; YTsaurus's response keeper does the same)."""

    def __init__(self, mutation_id: str) -> None:
        super().__init__(
            f'Duplicate request is not marked as "retry" (mutation_id {mutation_id})',
            attributes={"mutation_id": mutation_id},
        )


class InFlight:
    """A claimed start not settled yet: ``settled`` is set once it is."""

    __slots__ = ("settled",)

    def __init__(self) -> None:
        self.settled = threading.Event()


class StartClaims:
    """Mutation id (``mutation_key``) → the start in flight with it, and the answers of recently settled ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[str, InFlight] = {}
        self._answered: OrderedDict[str, tuple[float, LiveOperation]] = OrderedDict()
        """Settled starts' operations by mutation id, in the order settled (with the time)."""

    def claim(self, mutation_id: str) -> LiveOperation | InFlight | None:
        """None when the caller now holds ``mutation_id`` (it must ``settle`` it), else the operation a settled
        start with it answered, or the start in flight with it (wait for ``settled``, then claim again)."""
        with self._lock:
            answered = self._answered.get(mutation_id)
            if answered is not None:
                return answered[1]
            pending = self._in_flight.get(mutation_id)
            if pending is not None:
                return pending
            self._in_flight[mutation_id] = InFlight()
            return None

    def answered(self, mutation_id: str) -> LiveOperation | None:
        """The operation a settled start with ``mutation_id`` answered (None: none settled, or it failed)."""
        with self._lock:
            answered = self._answered.get(mutation_id)
        return None if answered is None else answered[1]

    def settle(self, mutation_id: str, op: LiveOperation | None, now: float) -> None:
        """The claimed start's outcome: ``op`` once it is stored, None when it failed (nothing of it committed)."""
        with self._lock:
            pending = self._in_flight.pop(mutation_id, None)
            if op is not None:
                self._answered[mutation_id] = (now, op)
            while self._answered:
                oldest = next(iter(self._answered.values()))[0]
                if oldest >= now - KEPT_SECONDS:
                    break
                self._answered.popitem(last=False)
        if pending is not None:
            pending.settled.set()
