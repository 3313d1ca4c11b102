"""Write-through of operations and jobs to the store: the records a command commits before it acts.

A part of ``LiveScheduler`` (``scheduler.py``, ``scheduler.persistence``) that works on the scheduler's state under
its lock. Job records written inside a heartbeat are collected (``job_writes``) and go to the group commit
(``commit.py``) when the heartbeat ends; an operation's record takes the collected job rows in its own commit.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pooltree.alerts import OPERATION_STARVING
from pooltree.server.live.model import LiveOperation
from pooltree.server.store import JobRecord, Mutation, OperationRecord

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler


def planned(op: LiveOperation, **changes: Any) -> LiveOperation:
    """A shallow copy of ``op`` with ``changes``: what the store commits before the runtime changes."""
    copied = copy.copy(op)
    for name, value in changes.items():
        setattr(copied, name, value)
    return copied


class LivePersistence:
    """The store writes of ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.job_writes: dict[tuple[str, str], JobRecord] | None = None
        """Job records written during the heartbeat being processed (None outside one): stored by the heartbeat's
        group commit, or with an operation record committed meanwhile (``jobs.py`` sets and takes it)."""

    def put_job(self, record: JobRecord) -> None:
        """Write a job through to the store; inside a heartbeat the writes are collected and go to the group
        commit when it ends (stored before it answers); outside one, after what is queued, before returning."""
        scheduler = self.scheduler
        if record.address:  # a job of one node: void for that node's proofs and for the non-full nodes'
            scheduler.generation.bump_node(record.address)
        else:
            scheduler.generation.bump()
        if self.job_writes is None:
            scheduler.commits.wait(scheduler.commits.submit([record]))
        else:
            self.job_writes[(record.operation_id, record.id)] = record

    def touch(self, operation_id: str) -> None:
        """The operation's jobs changed (pending work: the node's own changes bump it by their job records)."""
        scheduler = self.scheduler
        scheduler.generation.bump_work()
        op = scheduler.operations.get(operation_id)
        if op is not None:
            op.revision += 1

    def save_operation(self, op: LiveOperation, *, mutation: Mutation | None = None) -> None:
        op.revision += 1
        self.commit_operation(op, mutation=mutation)

    def commit_operation(self, op: LiveOperation, *, mutation: Mutation | None = None) -> None:
        """Write ``op`` as it is (or a planned copy of it: ``planned``) to the store, then move the counters.

        Commands that change an operation commit its new record first and change the runtime only after the
        commit succeeded; a failed commit raises and leaves memory as it was."""
        scheduler = self.scheduler
        record = self.operation_record(op)
        # job rows collected in this heartbeat go in the same commit: a completed operation never has a job that
        # the store still calls running (a kill right after the operation's commit would leave it so forever);
        # those other heartbeats queued for the group commit are stored first, so none lands after it
        scheduler.commits.flush()
        jobs = list(self.job_writes.values()) if self.job_writes else []
        scheduler.store.put_operation(record, mutation=mutation, jobs=jobs)
        if jobs and self.job_writes is not None:
            self.job_writes.clear()
        scheduler.counts.put(record, final=op.is_final)

    def queue_start(self, op: LiveOperation, mutation: Mutation | None) -> int:
        """Queue a started operation's first record (with the start's mutation) in the group commit (lock held);
        the ticket the start waits for, without the lock, before it is acknowledged. Its job records can only
        be queued after it, so none is stored before it (``commit.py``); a failed write is undone by the start
        (``OperationCommands.roll_back_start``)."""
        scheduler = self.scheduler
        op.revision += 1
        record = self.operation_record(op)
        ticket = scheduler.commits.submit((), [(record, mutation)])
        # counted now, listed on pages once stored (``OperationCommands.store_start``), as the store would list it
        scheduler.counts.put(record, final=op.is_final, stored=False)
        return ticket

    def operation_record(self, op: LiveOperation) -> OperationRecord:
        """The store's record of ``op`` as it is now (a state change: every state view moves on)."""
        scheduler = self.scheduler
        scheduler.generation.bump()
        document = {
            "state_events": op.events,
            "error": op.error,
            "suspended": op.suspended,
            "trees": op.trees,
            "pools": op.pools,
            "progress": scheduler.progress(op),
            "aborted_jobs": op.aborted_jobs,
            "lost_jobs": op.lost_jobs,
            "failed_job_count": op.controller.failed_job_count,
            "unrecognized_spec": op.model.unrecognized_spec(),
            "alerts": self.stored_alerts(op),
        }
        pool = next(iter(op.pools.values()), None)
        return OperationRecord(
            op.id,
            op.type,
            op.state,
            op.user,
            pool,
            op.start_time,
            op.finish_time,
            spec=op.spec,
            runtime_parameters=op.runtime_parameters,
            document=document,
        )

    def stored_alerts(self, op: LiveOperation) -> dict[str, Any]:
        """The alerts saved with ``op``; a finishing one (committed before it leaves the trees) keeps only those
        of its spec: the admission alerts (pending, ...) and starvation belong to an operation in a tree."""
        scheduler = self.scheduler
        alerts = scheduler.alerts(op)
        if op.is_final:
            registered = scheduler.registry.operations.get(op.id)
            dropped = {OPERATION_STARVING, *(registered.alerts if registered is not None else ())}
            alerts = {key: value for key, value in alerts.items() if key not in dropped}
        return alerts
