"""Node memory arbitration: the executor's plug for the controller's pure policy.

The executor measures and kills; the decision is one pure call, ``select_overdraft_victims`` from
``pooltree.controllers.overdraft`` (jobs above ``memory_limit`` fail with "Memory limit exceeded"; a job above its
reserve keeps running while the node has free memory; when the jobs together use more than the node's memory
limit, jobs above their reserve are aborted with ``resource_overdraft`` until the rest fit). Another policy can
be passed as ``JobExecutor(overdraft_policy=...)``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pooltree.controllers.overdraft import JobMemory, select_overdraft_victims

# The controller's policy takes finite numbers only; "no limit" becomes the largest float.
_NO_LIMIT = sys.float_info.max


@dataclass(frozen=True)
class JobMemoryUsage:
    """A running job as the arbitration sees it (bytes; ``start_time`` in seconds breaks ties)."""

    job_id: str
    usage: float
    reserve: float
    memory_limit: float | None
    start_time: float


@dataclass(frozen=True)
class ArbitrationDecision:
    """Jobs to fail with "Memory limit exceeded" and jobs to abort with ``resource_overdraft``, in order."""

    memory_limit_exceeded: tuple[str, ...] = ()
    resource_overdraft: tuple[str, ...] = ()


OverdraftPolicy = Callable[[float, Sequence[JobMemoryUsage]], ArbitrationDecision]


def arbitrate_node_memory(node_memory_limit: float, jobs: Sequence[JobMemoryUsage]) -> ArbitrationDecision:
    """The default policy: the controller's ``select_overdraft_victims`` (largest overdraft first)."""
    victims = select_overdraft_victims(
        _NO_LIMIT if math.isinf(node_memory_limit) else node_memory_limit,
        [
            JobMemory(
                id=job.job_id,
                reserve=job.reserve,
                usage=job.usage,
                memory_limit=_NO_LIMIT if job.memory_limit is None else job.memory_limit,
                start_time=max(job.start_time, 0.0),
            )
            for job in jobs
        ],
    )
    return ArbitrationDecision(
        memory_limit_exceeded=tuple(job.id for job in victims.failed),
        resource_overdraft=tuple(job.id for job in victims.aborted),
    )
