"""Revival: operations the store holds in non-final states are re-registered after a scheduler restart.

A part of ``LiveScheduler`` (``scheduler.py``, ``scheduler.revival``) that works on the scheduler's state under its
lock; running jobs wait for their nodes' first heartbeats (``jobs.py``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pooltree.config import OperationSpec
from pooltree.errors import PooltreeError
from pooltree.node.job import yt_error
from pooltree.security.vault import vault_is_sealed
from pooltree.server.live.model import (
    ACTIVE_STATES,
    OPERATION_FAILED,
    LiveJob,
    LiveOperation,
    build_tasks,
    live_controller,
)
from pooltree.server.store import OperationFilter, OperationRecord

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a revival reads the store, on again after with one collection of
    the young and middle generations (nothing changes when it was off already).

    A revival makes a million objects or more (a pending job per job index, a record and a job per job row) and
    keeps nearly all of them: the collector's automatic collections walked them again and again (its young and
    middle collections, and the full ones as the heap grew), about half of a revival's CPU at 200 operations and
    60,000 job records (``bench/revive_cost.py``). Garbage freed by reference counting is freed as before; a
    reference cycle made meanwhile is found by the collection at the end. That collection walks what the revival
    made once, into the old generation: left to the collector, a young collection came at the next allocation
    (the young generation's count far past its threshold) and a middle one a few after, walking it twice (~0.1 s
    more at that size, in the fair-share update after the revival). In the service the start-up's full
    collection (``GC.settle``) then freezes it. Another thread that turns the collector off meanwhile finds it on
    again at the end (as with ``pooltree.forecast.run``'s pause); a revival is made once, before the service
    listens."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(1)


class LiveRevival:
    """Revival of ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler

    def revive(self, now: float) -> list[str]:
        """Re-register operations the store holds in non-final states; running jobs wait for their nodes."""
        scheduler = self.scheduler
        revived: list[str] = []
        with scheduler.lock, collector_paused():
            scheduler.connect(now)
            records: list[OperationRecord] = []
            for state in ACTIVE_STATES:
                records.extend(scheduler.store.list_operations(OperationFilter(state=state, limit=1_000_000)))
            records.sort(key=lambda r: (r.start_time, r.id))
            for record in records:
                try:
                    self._revive_one(record, now)
                    revived.append(record.id)
                except PooltreeError as error:
                    self._fail_record(record, error, now)
        return revived

    def _fail_record(self, record: OperationRecord, error: PooltreeError, now: float) -> None:
        scheduler = self.scheduler
        record.state = "failed"
        record.finish_time = now
        record.document = {
            **record.document,
            "error": yt_error(OPERATION_FAILED, f"Operation could not be revived: {error.message}"),
        }
        scheduler.store.put_operation(record)
        scheduler.counts.put(record, final=True)

    def _revive_one(self, record: OperationRecord, now: float) -> None:
        scheduler = self.scheduler
        if vault_is_sealed(record.spec):  # its jobs must not start without their secrets
            raise PooltreeError(
                "its spec.secure_vault cannot be opened with this scheduler's store key "
                "(start every scheduler of this store with the same --store-key-file)"
            )
        model = OperationSpec.parse(dict(record.spec), "spec")
        tasks = build_tasks(record.id, model)
        controller = live_controller(record.id, model, tasks)
        doc = record.document
        # register with the runtime parameters the operation had (pool, weight, limits per tree)
        spec_for_trees = model
        per_tree = (record.runtime_parameters or {}).get("scheduling_options_per_pool_tree") or {}
        if per_tree:
            merged = dict(record.spec)
            options = dict(merged.get("scheduling_options_per_pool_tree") or {})
            for tree, entry in per_tree.items():
                options[tree] = {**dict(options.get(tree) or {}), **entry}
            merged["scheduling_options_per_pool_tree"] = options
            # the trees it was in when last committed: a removed tree's entry was erased (live/orphans.py)
            given = merged.get("pool_trees")
            kept = [t for t in given if t in per_tree] if isinstance(given, list) else []
            tentative = [t for t, entry in per_tree.items() if t not in kept and entry.get("tentative")]
            merged["pool_trees"] = [*kept, *tentative] if kept else list(per_tree)
            spec_for_trees = OperationSpec.parse(merged, "spec")
        registered = scheduler.registry.register_operation(
            record.id,
            spec_for_trees,
            user=record.user,
            operation_type=record.type,
            now=record.start_time,
            revival=True,
        )
        op = LiveOperation(
            record.id,
            record.user,
            record.type,
            dict(record.spec),
            model,
            controller,
            start_time=record.start_time,
            state=record.state,
            runtime_parameters=dict(record.runtime_parameters),
            events=list(doc.get("state_events") or []),
            trees=list(registered.trees),
            pools=dict(doc.get("pools") or {}),
            aborted_jobs=int(doc.get("aborted_jobs") or 0),
            lost_jobs=int(doc.get("lost_jobs") or 0),
        )
        controller.failed_job_count = int(doc.get("failed_job_count") or 0)
        # completed jobs first: a job whose speculative competitor completed is never run again, and a loser the
        # store still has running is not re-attached in the winner's place
        job_records = sorted(scheduler.store.list_jobs(record.id), key=lambda r: r.state != "completed")
        with controller.reviving():  # one pass over the pending queues, one refresh
            for job_record in job_records:
                job = LiveJob.from_record(job_record)
                if job.state == "completed":
                    controller.mark_completed(job.task_name, job.job_index)
                elif job.state == "running":
                    if controller.reserve(job.address, job.task_name, job.job_index, job.id, job.start_time):
                        scheduler.jobs[job.id] = job
                        scheduler.reservations.add(job.address, op.id)
                        scheduler.expected_nodes.setdefault(job.address, now)
                    else:
                        scheduler.heartbeats.mark_lost(job, now)  # op is not in scheduler.operations yet
                op.add_job(job)  # in its state after the above (running_job_count)
        scheduler.commands.attach(op)
        scheduler.tentative.attach(op, [t for t in op.trees if (per_tree.get(t) or {}).get("tentative")])
        scheduler.operations[op.id] = op
        op.events.append({"state": "reviving", "time": now})
        if bool(doc.get("suspended")):
            scheduler.registry.suspend_operation(op.id)
            op.suspended = True
        op.state = ""
        scheduler.commands.sync_state(op, now)
