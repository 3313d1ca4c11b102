"""Revival: operations the store holds in non-final states are re-registered after a scheduler restart.

A mixin of ``LiveScheduler`` (``scheduler.py``); running jobs wait for their nodes' first heartbeats (``jobs.py``).
"""

from __future__ import annotations

from pooltree.config import OperationSpec
from pooltree.errors import PooltreeError
from pooltree.node.job import yt_error
from pooltree.security.vault import vault_is_sealed
from pooltree.server.live.model import (
    ACTIVE_STATES,
    OPERATION_FAILED,
    LiveJob,
    LiveOperation,
    LiveVanillaController,
    build_tasks,
)
from pooltree.server.store import OperationFilter, OperationRecord


class LiveRevival:
    """Revival of ``LiveScheduler``."""

    # ------------------------------------------------------------------ revival

    def revive(self, now: float) -> list[str]:
        """Re-register operations the store holds in non-final states; running jobs wait for their nodes."""
        revived: list[str] = []
        with self.lock:
            self.connect(now)
            records: list[OperationRecord] = []
            for state in ACTIVE_STATES:
                records.extend(self.store.list_operations(OperationFilter(state=state, limit=1_000_000)))
            records.sort(key=lambda r: (r.start_time, r.id))
            for record in records:
                try:
                    self._revive_one(record, now)
                    revived.append(record.id)
                except PooltreeError as error:
                    self._fail_record(record, error, now)
        return revived

    def _fail_record(self, record: OperationRecord, error: PooltreeError, now: float) -> None:
        record.state = "failed"
        record.finish_time = now
        record.document = {
            **record.document,
            "error": yt_error(OPERATION_FAILED, f"Operation could not be revived: {error.message}"),
        }
        self.store.put_operation(record)
        self.counts.put(record, final=True)

    def _revive_one(self, record: OperationRecord, now: float) -> None:
        if vault_is_sealed(record.spec):  # its jobs must not start without their secrets
            raise PooltreeError(
                "its spec.secure_vault cannot be opened with this scheduler's store key "
                "(start every scheduler of this store with the same --store-key-file)"
            )
        model = OperationSpec.parse(dict(record.spec), "spec")
        tasks = build_tasks(record.id, model)
        controller = LiveVanillaController(record.id, tasks, interruption_signal=model.interruption_signal)
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
        registered = self.registry.register_operation(
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
        for job_record in self.store.list_jobs(record.id):
            job = LiveJob.from_record(job_record)
            op.jobs[job.id] = job
            if job.state == "completed":
                controller.mark_completed(job.task_name, job.job_index)
            elif job.state == "running":
                if controller.reserve(job.address, job.task_name, job.job_index, job.id, job.start_time):
                    self.jobs[job.id] = job
                    self.reservations.add(job.address, op.id)
                    self.expected_nodes.setdefault(job.address, now)
                else:
                    self._mark_lost(job, now)
        self._attach(op)
        self.tentative.attach(op, [t for t in op.trees if (per_tree.get(t) or {}).get("tentative")])
        self.operations[op.id] = op
        op.events.append({"state": "reviving", "time": now})
        if bool(doc.get("suspended")):
            self.registry.suspend_operation(op.id)
            op.suspended = True
        op.state = ""
        self._sync_state(op, now)
