"""Memory enforcement of the executor's jobs: from one sample of every running job to the verdicts to carry out.

``memory_verdicts`` records each sample on its job (current and peak) and decides, as the node memory
arbitration's policy says (``arbitration.py``): a job over its ``memory_limit`` fails ("Memory limit
exceeded"), and on an overdrafted node the jobs the policy picks are aborted (``resource_overdraft``). The
executor kills the jobs it is given (``executor.py``); nothing here touches a process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pooltree.node.arbitration import JobMemoryUsage, OverdraftPolicy
from pooltree.node.job import RESOURCE_OVERDRAFT_REASON, JobState, abort_error, memory_limit_error
from pooltree.node.memory import MemorySample
from pooltree.node.running import RunningJob, Verdict


@dataclass(frozen=True)
class MemoryVerdict:
    """A job to kill for its memory, its verdict, and whether a killer already running for it is replaced."""

    job: RunningJob
    verdict: Verdict
    replaces_killer: bool


def _failed(job: RunningJob, usage: float, pids: tuple[int, ...]) -> MemoryVerdict:
    error = memory_limit_error(job.spec.memory_limit or 0, usage, list(pids))
    return MemoryVerdict(job, Verdict(JobState.FAILED, error), replaces_killer=True)


def memory_verdicts(
    active: list[RunningJob],
    samples: Mapping[str, MemorySample],
    policy: OverdraftPolicy,
    node_memory_limit: float,
) -> list[MemoryVerdict]:
    """Record ``samples`` on the ``active`` jobs and decide which must die for their memory (in that order)."""
    decided: list[MemoryVerdict] = []
    views: list[JobMemoryUsage] = []
    for job in active:
        sample = samples.get(job.spec.job_id)
        if sample is None:
            continue
        job.memory = sample
        job.max_memory = max(job.max_memory, sample.peak, sample.current)
        if job.verdict is not None:
            continue
        if sample.limit_hit:
            decided.append(_failed(job, sample.peak, sample.pids))
            continue
        views.append(
            JobMemoryUsage(
                job_id=job.spec.job_id,
                usage=sample.current,
                reserve=job.spec.memory_reserve,
                memory_limit=job.spec.memory_limit,
                start_time=job.start_time,
            )
        )
    by_id = {job.spec.job_id: job for job in active}
    decision = policy(node_memory_limit, views)
    for job_id in decision.memory_limit_exceeded:
        job = by_id[job_id]
        assert job.memory is not None
        decided.append(_failed(job, job.memory.current, job.memory.pids))
    node_usage = sum(view.usage for view in views)
    judged = {entry.job.spec.job_id for entry in decided}
    for job_id in decision.resource_overdraft:
        job = by_id[job_id]
        if job.verdict is not None or job_id in judged:
            continue
        usage = job.memory.current if job.memory else 0.0
        error = abort_error(
            RESOURCE_OVERDRAFT_REASON,
            {
                "usage": int(usage),
                "reserve": int(job.spec.memory_reserve),
                "node_memory_usage": int(node_usage),
                "node_memory_limit": node_memory_limit,
            },
        )
        decided.append(
            MemoryVerdict(
                job, Verdict(JobState.ABORTED, error, RESOURCE_OVERDRAFT_REASON), replaces_killer=False
            )
        )
    return decided
