"""The tree's ``schedule_allocations_timeout`` (alias ``schedule_jobs_timeout``, default 40 s): a wall-time bound on
the scheduling of one node heartbeat.

YTsaurus (``TScheduleAllocationsContext``: ``SchedulingDeadline = now + ScheduleAllocationsTimeout``,
``CheckScheduleAllocationTimeoutExpired`` in ``ShouldContinueScheduling``): once the heartbeat's scheduling has run
past the deadline, no further allocation is tried in any stage (regular or preemptive) and the heartbeat is marked
``HeartbeatTimeoutExpired``; what was started stays started. The bound is wall time, so only the live service,
which sets a clock (`TreeScheduler.clock`), applies it; the simulator's heartbeats take no simulated time and have
no clock, so its results do not depend on the host's speed.
"""

from __future__ import annotations

from collections.abc import Callable


class HeartbeatDeadline:
    """The deadline of one heartbeat's scheduling (none without a clock)."""

    __slots__ = ("_clock", "_deadline", "expired")

    def __init__(self, clock: Callable[[], float] | None, timeout: float) -> None:
        self._clock = clock
        self._deadline = None if clock is None else clock() + timeout
        self.expired = False
        """Whether scheduling stopped at the deadline (YTsaurus's ``HeartbeatTimeoutExpired``)."""

    def passed(self) -> bool:
        """Whether the deadline has passed (remembered once it has)."""
        if self._deadline is None:
            return False
        if not self.expired and self._clock() >= self._deadline:  # type: ignore[misc]
            self.expired = True
        return self.expired
