"""Heartbeat throttling, as YTsaurus's node shards do it, and what makes overload visible.

YTsaurus's scheduler config has ``soft_concurrent_heartbeat_limit`` (50), ``hard_concurrent_heartbeat_limit``
(100) and ``heartbeat_process_backoff`` (5 s). A heartbeat that arrives while as many heartbeats as the hard
limit are being processed, or as many as the soft limit and its node was heard from within the backoff, is
*throttled*: its reports are taken (finished jobs stored and acknowledged, running jobs confirmed) but nothing
is scheduled on it, and the answer says ``scheduling_skipped``. The node then waits before its next heartbeat
(YTsaurus's node backs its heartbeat executor off on a skipped scheduling; here the answer's
``heartbeat_period`` is the backoff, at most a quarter of the node heartbeat timeout so a throttled node is not
taken for dead, and the node sends no out-of-turn heartbeat until one is fully processed).

The service processes heartbeats on its event loop, one after the other, so an overloaded scheduler queues them
before they are in flight (in the loop, not in threads) and the concurrent limits would not see it. A heartbeat
that waited longer than ``queued_limit`` (0.25 s, ``HEARTBEAT_QUEUED_LIMIT``) from its headers' arrival to its
handler is throttled the same way (limit ``queued``; a node not heard from within the backoff is never throttled by it).

``HeartbeatThrottle`` counts the heartbeats in flight (from the request's arrival, so the wait for a worker
thread and for the scheduling lock is counted), sums how long heartbeats waited for their handler (the loop's
backlog, ``pooltree_scheduler_heartbeat_queue_wait_seconds``: visible before it reaches the ``queued`` limit) and
keeps the figures ``/metrics`` shows and the ``heartbeats_throttled`` scheduler alert reads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pooltree.server.knobs import seconds_override

SOFT_CONCURRENT_HEARTBEAT_LIMIT = 50
HARD_CONCURRENT_HEARTBEAT_LIMIT = 100
HEARTBEAT_PROCESS_BACKOFF = 5.0
HEARTBEAT_QUEUED_LIMIT = 0.25
"""Seconds a heartbeat may wait in the event loop's queue before it is throttled (limit ``queued``). API requests
wait in the same queue: when heartbeats offer more work than the process has CPU for, the backlog settles where
throttled nodes' back-off balances it, i.e. at this limit, and every read served on the loop waits that long
(with 1 s, ``get_operation`` p99 was ~1.2 s while 1,000 nodes heartbeated). ``POOLTREE_HEARTBEAT_QUEUED_LIMIT``
(seconds) overrides it for comparisons."""


def heartbeat_queued_limit() -> float:
    """``POOLTREE_HEARTBEAT_QUEUED_LIMIT`` when it is seconds in (0, 60], else ``HEARTBEAT_QUEUED_LIMIT``."""
    return seconds_override(
        "POOLTREE_HEARTBEAT_QUEUED_LIMIT", HEARTBEAT_QUEUED_LIMIT, lambda v: 0 < v <= 60, "(0, 60]"
    )


THROTTLED_ALERT_SECONDS = 60.0
"""The ``heartbeats_throttled`` alert holds this long after the last throttled heartbeat."""


@dataclass(frozen=True)
class ThrottleSettings:
    """YTsaurus's ``soft_concurrent_heartbeat_limit``, ``hard_concurrent_heartbeat_limit`` and
    ``heartbeat_process_backoff`` (seconds)."""

    soft_limit: int = SOFT_CONCURRENT_HEARTBEAT_LIMIT
    hard_limit: int = HARD_CONCURRENT_HEARTBEAT_LIMIT
    process_backoff: float = HEARTBEAT_PROCESS_BACKOFF
    queued_limit: float = field(default_factory=heartbeat_queued_limit)

    def __post_init__(self) -> None:
        if self.soft_limit < 1 or self.hard_limit < 1:
            raise ValueError("concurrent heartbeat limits must be at least 1")
        if self.soft_limit > self.hard_limit:
            raise ValueError("the soft limit on concurrent heartbeats must not exceed the hard one")
        if not self.process_backoff >= 0:
            raise ValueError("heartbeat_process_backoff must be non-negative seconds")
        if not self.queued_limit > 0:
            raise ValueError("the queued heartbeat limit must be positive seconds")


class HeartbeatThrottle:
    """Heartbeats in flight and the throttling decision; thread-safe, its own small lock."""

    def __init__(self, settings: ThrottleSettings | None = None) -> None:
        self.settings = settings or ThrottleSettings()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.throttled: dict[str, int] = {"soft": 0, "hard": 0, "queued": 0}
        """Throttled heartbeats so far, by the limit that throttled them."""
        self.last_throttled: float | None = None
        self.last_in_flight_at_throttle = 0
        self.queue_waits = 0
        """Heartbeats whose wait for their handler (the event loop's backlog) was measured."""
        self.queue_wait_seconds = 0.0
        """Their waits summed (with ``queue_waits``: the mean backlog a heartbeat met)."""
        self.queue_wait_max = 0.0
        """The longest wait so far."""

    def enter(self, last_seen: float | None, now: float, queued: float = 0.0) -> str | None:
        """A heartbeat arrives (its node last heard from at ``last_seen``, None if new; it waited ``queued``
        seconds before its handler ran): counts it in flight and returns the limit that throttles it ("hard" /
        "soft" / "queued") or None. Pair with ``leave()``."""
        with self._lock:
            self.queue_waits += 1
            self.queue_wait_seconds += queued
            if queued > self.queue_wait_max:
                self.queue_wait_max = queued
            concurrent = self.in_flight
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            limit: str | None = None
            if concurrent >= self.settings.hard_limit:
                limit = "hard"
            elif last_seen is not None and last_seen + self.settings.process_backoff > now:
                if concurrent >= self.settings.soft_limit:
                    limit = "soft"
                elif queued > self.settings.queued_limit:
                    limit = "queued"
            if limit is not None:
                self.throttled[limit] += 1
                self.last_throttled = now
                self.last_in_flight_at_throttle = concurrent
            return limit

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def recently_throttled(self, now: float) -> bool:
        last = self.last_throttled
        return last is not None and now - last <= THROTTLED_ALERT_SECONDS

    def backoff_period(self, heartbeat_period: float, node_heartbeat_timeout: float) -> float:
        """The period a throttled node is told to wait: the process backoff, never below the normal period and
        never above a quarter of the node heartbeat timeout."""
        return max(heartbeat_period, min(self.settings.process_backoff, node_heartbeat_timeout / 4))
