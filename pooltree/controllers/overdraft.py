"""A node short of memory: which jobs it stops (node-side arbitration, YTsaurus's exec node).

Jobs above their ``memory_limit`` fail with "Memory limit exceeded"; if the node's usage still exceeds its
limit, jobs above their reserve (``memory.py``'s ``JobMemoryReserve``) are aborted with ``resource_overdraft``
until it fits. Pure: the node (``node/arbitration.py``) and the simulator (``sim/jobs.py``) both call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pooltree.controllers.memory import MEMORY_LIMIT_EXCEEDED, RESOURCE_OVERDRAFT, checked_number
from pooltree.errors import ConfigError


@dataclass(frozen=True)
class JobMemory:
    """One job on a node: its reserve, current usage and user ``memory_limit`` (bytes), start time (seconds)."""

    id: str
    reserve: float
    usage: float
    memory_limit: float
    start_time: float

    @property
    def overdraft(self) -> float:
        """Bytes above the reserve (0 when within it)."""
        return max(self.usage - self.reserve, 0.0)


@dataclass(frozen=True)
class OverdraftVictims:
    """The node's decision: jobs failed with "Memory limit exceeded", jobs aborted with ``resource_overdraft``."""

    failed: list[JobMemory]
    aborted: list[JobMemory]
    usage_after: float
    fits: bool

    @property
    def failure_error(self) -> str:
        return MEMORY_LIMIT_EXCEEDED

    @property
    def abort_reason(self) -> str:
        return RESOURCE_OVERDRAFT


def select_overdraft_victims(
    node_memory_limit: float,
    jobs: Iterable[JobMemory],
    order: Literal["largest_overdraft", "latest_started"] = "largest_overdraft",
) -> OverdraftVictims:
    """Decide which jobs a node stops when memory runs short.

    1. Every job whose usage exceeds its ``memory_limit`` fails with "Memory limit exceeded", whatever the node's
       state; its memory is freed.
    2. A job above its reserve keeps running while the node's total usage fits ``node_memory_limit``.
    3. Otherwise jobs above their reserve are aborted with ``resource_overdraft`` until usage fits. Order
       ``"largest_overdraft"`` (default): the largest usage − reserve first, so the fewest jobs die; ties go to
       the latest-started job (least work lost), then the job id. ``"latest_started"``: latest start first,
       ties by the larger overdraft, then id. Jobs within their reserve are never aborted here (``fits`` is
       false if even that does not suffice).
    """
    limit = checked_number(node_memory_limit, "node_memory_limit", low=0, high=math.inf)
    jobs = list(jobs)
    for index, job in enumerate(jobs):
        for name in ("reserve", "usage", "memory_limit", "start_time"):
            value = getattr(job, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(f"jobs[{index}].{name}", f"expected a finite number >= 0, got {value!r}")
    if order not in ("largest_overdraft", "latest_started"):
        raise ConfigError("order", f"must be largest_overdraft or latest_started, got {order!r}")

    failed = [job for job in jobs if job.usage > job.memory_limit]
    failed_ids = {id(job) for job in failed}
    survivors = [job for job in jobs if id(job) not in failed_ids]
    usage = sum(job.usage for job in survivors)
    aborted: list[JobMemory] = []
    if usage > limit:
        candidates = [job for job in survivors if job.usage > job.reserve]
        if order == "largest_overdraft":
            candidates.sort(key=lambda job: (-job.overdraft, -job.start_time, job.id))
        else:
            candidates.sort(key=lambda job: (-job.start_time, -job.overdraft, job.id))
        for job in candidates:
            if usage <= limit:
                break
            aborted.append(job)
            usage -= job.usage
    return OverdraftVictims(failed=failed, aborted=aborted, usage_after=usage, fits=usage <= limit)
