"""Node memory arbitration: which jobs fail for their memory_limit and which are aborted for resource_overdraft.

The executor measures and kills; the decision is this one pure call, so the controller's policy can be plugged
in instead (``JobExecutor(overdraft_policy=...)``). The rule (seeds, job-memory-digest): a job above its
``memory_limit`` fails with "Memory limit exceeded"; a job above its reserve keeps running while the node has
free memory; when the jobs together use more than the node's memory limit, jobs above their reserve are
aborted with ``resource_overdraft``, newest first, until the rest fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class JobMemoryUsage:
    """A running job as the arbitration sees it (bytes; ``start_time`` orders victims)."""

    job_id: str
    usage: float
    reserve: float
    memory_limit: float | None
    start_time: float


@dataclass(frozen=True)
class ArbitrationDecision:
    """Jobs to fail with "Memory limit exceeded" and jobs to abort with ``resource_overdraft``."""

    memory_limit_exceeded: tuple[str, ...] = ()
    resource_overdraft: tuple[str, ...] = ()


OverdraftPolicy = Callable[[float, Sequence[JobMemoryUsage]], ArbitrationDecision]


def arbitrate_node_memory(node_memory_limit: float, jobs: Sequence[JobMemoryUsage]) -> ArbitrationDecision:
    """The default policy: memory_limit failures first, then overdraft aborts, newest job first."""
    if math.isnan(node_memory_limit) or node_memory_limit < 0:
        raise ValueError(f"node_memory_limit must be a non-negative number, got {node_memory_limit!r}")
    failed = tuple(
        job.job_id for job in jobs if job.memory_limit is not None and job.usage > job.memory_limit
    )
    survivors = [job for job in jobs if job.job_id not in failed]
    total = sum(job.usage for job in survivors)
    aborted: list[str] = []
    if total > node_memory_limit:
        candidates = sorted(
            (job for job in survivors if job.usage > job.reserve),
            key=lambda job: (-job.start_time, job.job_id),
        )
        for job in candidates:
            if total <= node_memory_limit:
                break
            aborted.append(job.job_id)
            total -= job.usage
    return ArbitrationDecision(memory_limit_exceeded=failed, resource_overdraft=tuple(aborted))
