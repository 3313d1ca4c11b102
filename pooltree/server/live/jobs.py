"""Node heartbeats and jobs: finished reports, re-attachment, scheduling answers, lost jobs, the node sweep.

A part of ``LiveScheduler`` (``scheduler.py``, ``scheduler.heartbeats``); it reads and writes the scheduler's state
under the scheduler's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pooltree.config import nodes_of_trees
from pooltree.config.node_waiting import waiting_for_resources_timeout
from pooltree.config.operation import DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT
from pooltree.controllers.operations import Job
from pooltree.controllers.speculative import SPECULATIVE_ABORT_REASONS
from pooltree.node import wire
from pooltree.node.job import ABORT_BY_SCHEDULER, yt_error
from pooltree.node.wire import FinishedJobReport, HeartbeatRequest, RunningJobReport
from pooltree.resources import resources_to_dict, same_vector
from pooltree.security.vault import secure_vault_environment
from pooltree.server.live.job_specs import JobSpecs
from pooltree.server.live.model import (
    LOST_AFTER_MISSED_HEARTBEATS,
    LiveJob,
    LiveOperation,
    NodeState,
    new_guid,
)
from pooltree.strategy.model import Allocation, FinishedAllocation, NodeHeartbeat, PreemptionRecord

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler

log = logging.getLogger(__name__)

PREEMPTION_ERROR_ATTRIBUTES = ("preemption_reason", "preempted_for")

Then = Callable[[dict[str, Any]], None]
"""Called with a heartbeat's response under the scheduling lock, at the end of the hold that made it
(``LiveJobs.process_heartbeat_unwaited``)."""


def preemption_error(
    error: dict[str, Any] | None, interruption_info: dict[str, Any] | None, state: str
) -> dict[str, Any] | None:
    """The error of a job the scheduler preempted, with why and for whom in its attributes, where YTsaurus puts
    them (``error.attributes.preemption_reason``, ``preempted_for``; the node reports only ``abort_reason``).
    Other jobs' errors are returned as they are."""
    if interruption_info is None or state != "aborted" or error is None:
        return error
    attributes = dict(error.get("attributes") or {})
    for key in PREEMPTION_ERROR_ATTRIBUTES:
        if key in interruption_info and key not in attributes:
            attributes[key] = interruption_info[key]
    return {**error, "attributes": attributes}


class DeferredHeartbeat:
    """A heartbeat stopped after its reports because they left a stale tree to publish (an operation completed,
    another activated in its slot): ``finish`` (on a thread, without the scheduling lock) publishes the tree
    computed apart and schedules in a second hold (``LiveJobs.finish_deferred``); (the response, the group commit
    ticket covering both holds' records)."""

    def __init__(
        self,
        jobs: LiveJobs,
        heartbeat: HeartbeatRequest,
        node: NodeState,
        acknowledge: list[str],
        now: float,
        throttled: bool,
    ) -> None:
        self.jobs = jobs
        self.heartbeat = heartbeat
        self.node = node
        self.acknowledge = acknowledge
        self.now = now
        self.throttled = throttled
        self.ticket = 0
        """The group commit ticket of the first hold's records (the finished jobs it acknowledges)."""
        self.then: Then | None = None
        """Called with the response at the end of the second hold (``process_heartbeat_unwaited``'s)."""

    def finish(self) -> tuple[dict[str, Any], int]:
        return self.jobs.finish_deferred(self)


class LiveJobs:
    """Heartbeats and jobs of ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.specs = JobSpecs(scheduler, self._job_spec)
        """Started jobs' specs from per-task templates (``job_specs.py``); ``_job_spec`` is the plain builder."""

    # ------------------------------------------------------------------ heartbeats

    def _trees_of_node(self, address: str, tags: frozenset[str]) -> list[str]:
        """The trees a node with ``tags`` belongs to (kept per tag set until the pool trees change)."""
        scheduler = self.scheduler
        trees = scheduler.pool_trees.node_trees.get(tags)
        if trees is None:
            filters = {name: tree.config.tag_filter for name, tree in scheduler.registry.trees.items()}
            sets = nodes_of_trees(filters, {address: tags})
            trees = [name for name, addresses in sets.items() if address in addresses]
            scheduler.pool_trees.node_trees[tags] = trees
        return list(trees)

    def process_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False
    ) -> dict[str, Any]:
        """One node heartbeat: store finished jobs, re-attach revived ones, schedule, preempt; the response map.
        A ``throttled`` heartbeat (``throttle.py``) has its reports taken but nothing scheduled.

        Memory changes under the lock; the job records written go to the group commit (``commit.py``) and the
        answer waits, outside the lock, until they are stored: jobs it starts are stored before the node starts
        them, and finished jobs it acknowledges are durable. A stale tree (waiting before, or made stale by the
        heartbeat's own reports: an operation completed, another activated) is published computed without the lock
        (``FairShareUpdates.publish_stale_apart``) before the heartbeat schedules (``DeferredHeartbeat``), so the
        heartbeat's holds run no update."""
        response, ticket = self.process_heartbeat_unwaited(heartbeat, now, throttled=throttled)
        self.scheduler.commits.wait(ticket)
        return response

    def process_heartbeat_unwaited(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False, then: Then | None = None
    ) -> tuple[dict[str, Any], int]:
        """``process_heartbeat`` up to its wait: (the response, the group commit ticket of its job records). The
        caller must wait for the ticket (``GroupCommit.wait``) before the response leaves the scheduler (the node
        shards' leader answers each shard's heartbeats in order on one thread and waits on another). ``then``
        is called with the response in the hold that made it, after its records were queued and the state
        generation settled (the node shards' proof of the node's next heartbeat, without a second hold of the
        lock)."""
        scheduler = self.scheduler
        apart = not scheduler.lock.held  # a caller holding the lock keeps the whole heartbeat in its hold
        if apart and scheduler.updates.waiting:  # read without the lock: a hint
            scheduler.updates.publish_stale_apart(now)
        with scheduler.lock:
            attempt = self._locked_heartbeat(heartbeat, now, throttled, defer=apart)
            if isinstance(attempt, DeferredHeartbeat):
                attempt.then = then
            elif then is not None:
                then(attempt[0])
        return attempt.finish() if isinstance(attempt, DeferredHeartbeat) else attempt

    def try_process_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False
    ) -> tuple[dict[str, Any], int] | DeferredHeartbeat | None:
        """``process_heartbeat`` without waiting: None when the lock is busy or a stale tree would be published
        first (``publishing``: work too long for the event loop, where this is called); else the response and the
        group commit ticket the caller must wait for before it answers (0: nothing to store); or, when the
        heartbeat's reports made a tree stale, a ``DeferredHeartbeat`` whose ``finish`` the caller runs on a
        thread (it publishes the tree computed apart, then schedules)."""
        scheduler = self.scheduler
        if not scheduler.lock.try_enter():
            return None
        try:
            if scheduler.updates.waiting:
                return None
            return self._locked_heartbeat(heartbeat, now, throttled, defer=True)
        finally:
            scheduler.lock.release()

    @property
    def publishing(self) -> bool:
        """Whether a heartbeat would publish a stale tree first (read without the lock: a hint)."""
        return self.scheduler.updates.waiting

    def _locked_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, throttled: bool, *, defer: bool = False
    ) -> tuple[dict[str, Any], int] | DeferredHeartbeat:
        """The heartbeat under the lock: (its response, the ticket of its job records in the group commit). With
        ``defer``, a heartbeat whose reports leave a stale tree to publish (and whose trees' updates are computed
        apart: ``FairShareUpdates.in_parts``) stops after its reports: a ``DeferredHeartbeat``."""
        scheduler = self.scheduler
        scheduler.persistence.job_writes = {}
        deferred: DeferredHeartbeat | None = None
        updates = scheduler.updates
        apart = defer and updates.in_parts
        try:
            updates.deferring = apart  # a tree made stale by the reports waits for the publish apart
            try:
                node, acknowledge = self._take_reports(heartbeat, now)
            finally:
                updates.deferring = False
            if apart and updates.waiting:
                deferred = DeferredHeartbeat(self, heartbeat, node, acknowledge, now, throttled)
                response: dict[str, Any] = {}
            else:
                response = self._answer(node, heartbeat, acknowledge, now, throttled)
        finally:
            writes, scheduler.persistence.job_writes = scheduler.persistence.job_writes, None
            ticket = scheduler.commits.submit(writes.values())
            scheduler.generation.settle(scheduler.cores, scheduler.stale_for_full_nodes())
        if deferred is not None:
            deferred.ticket = ticket
            return deferred
        return response, ticket

    def finish_deferred(self, deferred: DeferredHeartbeat) -> tuple[dict[str, Any], int]:
        """The rest of a ``DeferredHeartbeat`` (the lock not held): the stale trees published computed apart,
        then, in a second hold, the stale trees left (published whole, as before) and the scheduling pass. The
        ticket covers both holds' records. A node swept between the two holds is answered without a pass.
        Its ``then`` is called at the end of the second hold."""
        scheduler = self.scheduler
        scheduler.updates.publish_stale_apart(deferred.now)
        with scheduler.lock:
            scheduler.persistence.job_writes = {}
            try:
                node = deferred.node
                if scheduler.nodes.get(node.address) is not node:  # swept meanwhile: registered again later
                    response = self._response(node, [], deferred.acknowledge, deferred.throttled)
                else:
                    response = self._answer(
                        node, deferred.heartbeat, deferred.acknowledge, deferred.now, deferred.throttled
                    )
            finally:
                writes, scheduler.persistence.job_writes = scheduler.persistence.job_writes, None
                ticket = scheduler.commits.submit(writes.values())
                scheduler.generation.settle(scheduler.cores, scheduler.stale_for_full_nodes())
            if deferred.then is not None:
                deferred.then(response)
        return response, max(ticket, deferred.ticket)

    def _take_reports(self, heartbeat: HeartbeatRequest, now: float) -> tuple[NodeState, list[str]]:
        """The first part of a heartbeat (lock held, job writes collected): the node's state, trees, finished and
        running reports, lost jobs, completed operations and tentative bans; (the node, the job ids to
        acknowledge)."""
        scheduler = self.scheduler
        node = scheduler.nodes.get(heartbeat.address)
        moved = node is None or node.tags != heartbeat.tags
        if node is None:
            node = NodeState(heartbeat.address, now, heartbeat.resource_limits)
            scheduler.nodes[heartbeat.address] = node
        elif not same_vector(node.resource_limits, heartbeat.resource_limits):
            moved = True
        node.last_seen = now
        node.resource_limits = heartbeat.resource_limits
        # What equals the node's last heartbeat's is kept, not replaced by this heartbeat's equal object: a
        # replacement lives a heartbeat period, long enough for the collector to walk it twice before freezing it.
        if node.tags != heartbeat.tags:
            node.tags = heartbeat.tags
        node.memory_meter = heartbeat.memory_meter
        if heartbeat.alerts or node.alerts:
            node.alerts = heartbeat.alerts
        scheduler.expected_nodes.pop(heartbeat.address, None)
        trees = self._trees_of_node(heartbeat.address, node.tags)
        if moved or trees != node.trees:
            scheduler.alert_center.fleet_moved()  # the nodes' kinds the alert checks group by
            node.trees = trees
        for tree, core in scheduler.cores.items():
            # a node whose tags or trees' filters changed leaves the trees it no longer matches (YTsaurus)
            if tree not in node.trees and heartbeat.address in core.node_limits:
                self._remove_node_from_tree(tree, heartbeat.address, now)
        acknowledge: list[str] = []
        touched: set[str] = set()
        for report in heartbeat.finished:
            self._on_finished_report(node, report, now, touched)
            acknowledge.append(report.job_id)
        running_ids: set[str] | None = None  # the reported ids, made only when something reads them
        if scheduler.reservations.held_for(heartbeat.address):
            # Reservations (revived jobs) this node did not confirm go back to pending.
            running_ids = {job.job_id for job in heartbeat.running}
            self._release_reservations(heartbeat.address, running_ids, now)
        confirmed = self._take_running_reports(node, heartbeat)
        if confirmed < scheduler.jobs.count_on_node(heartbeat.address):
            # known running jobs missing from the report: lost after LOST_AFTER_MISSED_HEARTBEATS in a row
            if running_ids is None:
                running_ids = {job.job_id for job in heartbeat.running}
            acknowledged = set(acknowledge)
            for job in scheduler.jobs.on_node(heartbeat.address):
                if job.state == "running" and job.id not in running_ids:
                    if job.id in acknowledged:
                        continue
                    job.missed_heartbeats += 1
                    if job.missed_heartbeats > LOST_AFTER_MISSED_HEARTBEATS:
                        self._lose_allocation(job, now)
        # Completion first: a finished operation frees its pool's running slot, and the operation activated
        # in its place is published and scheduled in this same heartbeat.
        for operation_id in touched:
            op = scheduler.operations.get(operation_id)
            if op is not None:
                scheduler.commands.check_completion(op, now)
        if scheduler.tentative.pending_bans:
            scheduler.tentative.apply_bans(now)  # tentative trees where the operation's jobs are too slow
        return node, acknowledge

    def _answer(
        self,
        node: NodeState,
        heartbeat: HeartbeatRequest,
        acknowledge: list[str],
        now: float,
        throttled: bool,
    ) -> dict[str, Any]:
        """The second part of a heartbeat (lock held, job writes collected): stale trees published, the scheduling
        pass, the response map."""
        self.scheduler.updates.refresh_stale_trees(now)
        start = [] if throttled else self._schedule(node, heartbeat, now)
        return self._response(node, start, acknowledge, throttled)

    def _response(
        self, node: NodeState, start: list[dict[str, Any]], acknowledge: list[str], throttled: bool
    ) -> dict[str, Any]:
        """The answer: jobs to start, the stops queued for the node, the acknowledged jobs, the period."""
        scheduler = self.scheduler
        extra: dict[str, Any] = {}
        period = scheduler.heartbeat_period
        if throttled:  # YTsaurus: scheduling skipped, the node backs off
            extra[wire.SCHEDULING_SKIPPED] = True
            period = scheduler.heartbeat_throttle.backoff_period(period, scheduler.node_heartbeat_timeout)
        preempts, aborts = node.preempts, node.aborts
        if preempts:
            node.preempts = []
        else:  # the node keeps its empty list; the answer's own dies with the answer
            preempts = []
        if aborts:
            node.aborts = []
        else:
            aborts = []
        return wire.response(
            start=start,
            preempt=preempts,
            abort=aborts,
            acknowledge=acknowledge,
            heartbeat_period=period,
            **extra,
        )

    def _take_running_reports(self, node: NodeState, heartbeat: HeartbeatRequest) -> int:
        """The node's running-job reports, in one pass: a job the scheduler does not know (or another node's) is
        aborted (``unknown_job``), a known one is confirmed, a new GPU placement and its statistics so far are kept
        (``get_job`` shows them), and measured memory above a job's reserve counts as its allocation's usage
        (``SchedulerCore.report_usage``). Returns how many of the node's running jobs the report confirmed
        (distinct ids), so the caller walks the node's jobs for missing ones only when some are missing.

        A job is looked up among the node's own running jobs first (``RunningJobs.node_index``: the same job when
        it runs there), and among all only when it is not one of them (unknown, or another node's)."""
        scheduler = self.scheduler
        address = heartbeat.address
        seen: set[str] = set()
        confirmed = 0
        own = scheduler.jobs.node_index(address).get  # the index is not changed while the reports are taken
        find = scheduler.jobs.finder()
        for report in heartbeat.running:
            job_id = report.job_id
            job = own(job_id)
            if (
                job is not None
                and job.state == "running"
                and job_id not in seen
                and not report.gpu_devices
                and job.address == address
            ):
                # the common case, the general steps below in short: a first report of one of the node's running
                # jobs, no GPU placement: confirmed, and its measured memory counted (a node that measures memory
                # reports it for every job every heartbeat)
                seen.add(job_id)
                job.missed_heartbeats = 0
                confirmed += 1
                if report.statistics:  # as the general steps keep them
                    job.statistics = report.statistics
                if job.allocation_id is None or report.memory_usage <= 0:  # the general steps' own test
                    continue
                self._count_measured(job.tree, job.allocation_id, report)
                continue
            if job is None:
                job = find(job_id)
            first = job_id not in seen
            if first:
                seen.add(job_id)
            if job is not None and job.address != address:
                if first:
                    _refuse_foreign_report(job, address, "running")
                    node.aborts.append({"job_id": job_id, "reason": "unknown_job"})
                continue
            if job is not None and report.gpu_devices and job.gpu_devices != report.gpu_devices:
                job.gpu_devices = report.gpu_devices  # YTsaurus's exec_attributes/gpu_devices of the job
                scheduler.persistence.put_job(job.record())
            if job is None or job.state != "running":
                if first:
                    node.aborts.append({"job_id": job_id, "reason": "unknown_job"})
                continue
            if first:
                job.missed_heartbeats = 0
                confirmed += 1
            if report.statistics:  # sent every wire.RUNNING_STATISTICS_BACKOFF; get_job shows the last
                job.statistics = report.statistics
            if job.allocation_id is None or report.memory_usage <= 0:
                continue
            self._count_measured(job.tree, job.allocation_id, report)
        return confirmed

    def _count_measured(self, tree: str, allocation_id: str, report: RunningJobReport) -> None:
        """A running job's measured memory (more than none) into its allocation's usage in ``tree``
        (``SchedulerCore.report_usage``: where it exceeds the reserve); a usage that moved moves the generation."""
        scheduler = self.scheduler
        core = scheduler.cores.get(tree)
        if core is not None and core.report_usage(allocation_id, report.counted_usage):
            scheduler.generation.bump()  # usage moved: limits and fits elsewhere may differ

    def _schedule(self, node: NodeState, heartbeat: HeartbeatRequest, now: float) -> list[dict[str, Any]]:
        """The strategy's pass over ``node`` in each of its trees: specs of the jobs to start; preemptions are
        queued on their nodes."""
        scheduler = self.scheduler
        start: list[dict[str, Any]] = []
        for tree in node.trees:
            core = scheduler.cores[tree]
            limits_before = core.node_limits.get(heartbeat.address)
            report = NodeHeartbeat(heartbeat.address, heartbeat.resource_limits, node.tags)  # equal, kept
            if scheduler.tree_pass is not None:  # node shards start allocations (`pooltree.shards.starts`)
                result = scheduler.tree_pass(tree, core, report, now)
            else:
                result = core.process_heartbeat(report, now)
            if limits_before is None or not same_vector(limits_before, core.node_limits[heartbeat.address]):
                scheduler.mark_dirty(tree)  # the tree's total resources changed
            for allocation in result.allocations_to_start:
                spec = self._on_started(tree, allocation, node, now)
                if spec is not None:
                    start.append(spec)
            for record in result.allocations_to_preempt:
                job_id = scheduler.allocation_jobs.get(record.allocation_id)
                speculative = record.reason.value in SPECULATIVE_ABORT_REASONS  # a loser, not a preemption
                if not speculative:
                    scheduler.preemptions[(tree, record.reason.value)] += 1
                if job_id is None:
                    continue
                if not speculative:
                    self._note_preemption(job_id, record)
                # job time limit: YTsaurus's error 1202
                if record.error is not None and job_id in scheduler.jobs:
                    scheduler.jobs[job_id].error = record.error
                target = scheduler.nodes.get(record.node_address, node)
                if record.interruptible and record.timeout > 0:
                    target.preempts.append([job_id, record.reason.value, float(record.timeout)])
                else:
                    target.aborts.append({"job_id": job_id, "reason": record.reason.value})
                if target is not node:  # a stop for another node's next heartbeat (a speculative loser)
                    scheduler.generation.bump_node(target.address)
            scheduler.updates.drain(core)
        return start

    def _release_reservations(self, address: str, keep: set[str] | frozenset[str], now: float) -> None:
        """Revived jobs reserved for ``address`` and not in ``keep`` go back to pending; their jobs are lost."""
        scheduler = self.scheduler
        for operation_id in scheduler.reservations.operations_on(address):
            op = scheduler.operations.get(operation_id)
            if op is None or not op.controller.has_reservations(address):
                scheduler.reservations.discard(address, operation_id)
                continue
            for job_id in op.controller.release(address, keep=keep):
                job = scheduler.jobs.get(job_id)
                if job is not None and job.state == "running":
                    self.mark_lost(job, now)
            if not op.controller.has_reservations(address):
                scheduler.reservations.discard(address, operation_id)

    def _note_preemption(self, job_id: str, record: PreemptionRecord) -> None:
        """Keep why the job was preempted and for whom (YTsaurus ``interruption_info``) on the job and its record."""
        scheduler = self.scheduler
        job = scheduler.jobs.get(job_id)
        if job is None:
            return
        info: dict[str, Any] = {
            "interruption_reason": "preemption",
            "preemption_reason": record.explanation,
            "abort_reason": record.reason.value,
            "stage": record.stage.value,
            "time": record.time,
        }
        if record.interruptible and record.timeout > 0:
            info["interruption_timeout"] = float(record.timeout)
        if record.preemptor_operation_id is not None:
            info["preempted_for"] = {
                "operation_id": record.preemptor_operation_id,
                "allocation_id": record.preemptor_allocation_id,
                "job_id": scheduler.allocation_jobs.get(record.preemptor_allocation_id or ""),
            }
        job.interruption_info = info
        scheduler.persistence.touch(job.operation_id)
        scheduler.persistence.put_job(job.record())

    def _job_spec(self, op: LiveOperation, job: LiveJob, allocation: Allocation) -> dict[str, Any]:
        scheduler = self.scheduler
        task = op.model.tasks[job.task_name]
        environment = dict(task.environment)
        environment.update(
            {
                "YT_OPERATION_ID": op.id,
                "YT_JOB_ID": job.id,
                "YT_JOB_INDEX": str(job.job_index),
                "YT_TASK_NAME": job.task_name,
            }
        )
        if op.controller.is_gang:
            # YTsaurus's gang controller: the incarnation, and the rank of a job that holds one
            payload = allocation.payload
            environment["YT_OPERATION_INCARNATION"] = str(op.controller.incarnation)
            environment["YT_GANG_SIZE"] = str(
                sum(t.gang_size or 0 for t in op.model.tasks.values() if t.gang_size is not None)
            )
            gang_size = task.gang_size
            if gang_size is not None and isinstance(payload, Job) and payload.index < gang_size:
                environment["YT_GANG_RANK"] = str(payload.index)
        environment.update(
            secure_vault_environment(op.spec)
        )  # secrets go to the job only (pooltree.security)
        signal = task.interruption_signal or op.model.interruption_signal
        spec: dict[str, Any] = {
            "job_id": job.id,
            "operation_id": op.id,
            "task_name": job.task_name,
            "job_index": job.job_index,
            "command": task.command,
            "environment": environment,
            "memory_limit": float(task.memory_limit),
            "resources": resources_to_dict(allocation.resources),
        }
        if signal is not None:
            spec["interruption_signal"] = signal
        tmpfs = task.tmpfs_mounts()
        if tmpfs:  # mounted by the node in the sandbox (pooltree/node/keeper.py, isolation.py)
            spec["tmpfs"] = [{"path": path, "size": size} for path, size in tmpfs]
        if task.custom_statistics_count_limit != DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT:
            spec["custom_statistics_count_limit"] = task.custom_statistics_count_limit
        if scheduler.isolate_job_network:  # no authentication: a job that reached the scheduler would be root
            spec["network"] = "isolated"
        tree = scheduler.registry.trees.get(job.tree) if job.tree else None
        waiting = waiting_for_resources_timeout(tree.config) if tree is not None else None
        if waiting is not None:  # the tree's waiting_for_resources_on_node_timeout (`config/node_waiting.py`)
            spec["waiting_for_resources_timeout"] = waiting
        raw_task = (op.spec.get("tasks") or {}).get(job.task_name)
        if isinstance(raw_task, dict) and raw_task.get("redirect_stdout_to_stderr") is True:
            spec["command"] = f"exec 1>&2\n{task.command}"  # YTsaurus: the job's stdout goes to its stderr
        reserve = op.controller.running_memory_reserve(job.task_name, job.job_index)
        if reserve is not None:
            spec["memory_reserve"] = min(reserve.user_job_memory_reserve, float(task.memory_limit))
            spec["job_proxy_memory_reserve"] = reserve.job_proxy_memory_reserve
            spec["job_proxy_estimated_memory"] = reserve.job_proxy_estimate
        # file_paths: contents go with the spec, the node writes the sandbox
        if scheduler.job_files is not None:
            files = scheduler.job_files(op.id, job.task_name)
            if files:
                spec["files"] = files
        return spec

    def _on_started(
        self, tree: str, allocation: Allocation, node: NodeState, now: float
    ) -> dict[str, Any] | None:
        scheduler = self.scheduler
        op = scheduler.operations.get(allocation.operation_id)
        if op is None:
            return None
        op.revision += 1
        revived = op.controller.revived_allocations.pop(allocation.id, None)
        if revived is not None and revived in scheduler.jobs:
            job = scheduler.jobs[revived]
            job.allocation_id = allocation.id
            job.tree = tree
            job.missed_heartbeats = 0
            scheduler.allocation_jobs[allocation.id] = job.id
            return None
        payload = allocation.payload
        job = LiveJob(
            id=new_guid(),
            operation_id=op.id,
            task_name=allocation.task or "main",
            job_index=payload.index if isinstance(payload, Job) else 0,
            address=node.address,
            tree=tree,
            start_time=now,
            allocation_id=allocation.id,
        )
        scheduler.jobs[job.id] = job
        op.add_job(job)
        scheduler.allocation_jobs[allocation.id] = job.id
        if getattr(payload, "speculative", False):
            self._join_competition(op, job, allocation)
        scheduler.persistence.put_job(job.record())
        return self.specs.spec(op, job, allocation)

    def _join_competition(self, op: LiveOperation, job: LiveJob, allocation: Allocation) -> None:
        """A speculative copy started: it and its original get YTsaurus's ``job_competition_id`` (the original's
        id) and ``has_competitors``."""
        scheduler = self.scheduler
        speculation = op.controller.speculation
        competition = speculation.competition_of(allocation.id) if speculation is not None else None
        original_id = scheduler.allocation_jobs.get(competition.id) if competition is not None else None
        original = scheduler.jobs.get(original_id) if original_id is not None else None
        if original is None:
            return
        job.job_competition_id = original.competition_id
        job.has_competitors = True
        if not original.has_competitors:
            original.has_competitors = True
            scheduler.persistence.put_job(original.record())

    def _on_finished_report(
        self, node: NodeState, report: FinishedJobReport, now: float, touched: set[str]
    ) -> None:
        scheduler = self.scheduler
        job = scheduler.jobs.get(report.job_id)
        if job is not None and (job.address != node.address or job.operation_id != report.operation_id):
            _refuse_foreign_report(job, node.address, report.state, report.operation_id)
            return
        op = scheduler.operations.get(report.operation_id)
        scheduler.persistence.touch(report.operation_id)
        if job is None and op is not None:
            reserved = op.controller.reserved_job_ids(node.address)
            if report.job_id in reserved:
                task, index = reserved[report.job_id]
                job = LiveJob(report.job_id, op.id, task, index, node.address, "", report.start_time)
                scheduler.jobs[job.id] = job
                op.add_job(job)
        if job is None:
            return
        if job.state != "running":
            return
        scheduler.jobs.pop(job.id, None)
        state, abort_reason, error = report.state, report.abort_reason, report.error
        lost = None if op is None or op.controller.speculation is None else self._speculative_loser(op, job)
        if lost is not None and state != "aborted":  # its competitor completed first: aborted, as on YTsaurus
            state, abort_reason = "aborted", lost
            error = yt_error(ABORT_BY_SCHEDULER, "Job aborted by scheduler", {"abort_reason": lost})
        if op is not None:
            op.end_job(job, state)
        else:
            job.state = state
        job.finish_time = report.finish_time or now
        info = job.interruption_info  # (``preemption_error`` gives back the error of a job not preempted)
        job.error = error if info is None else preemption_error(error, info, state)
        job.exit_code = report.exit_code
        job.abort_reason = abort_reason
        job.interruption_reason = report.interruption_reason
        job.statistics = report.statistics
        job.stderr = report.stderr
        job.stderr_size = report.stderr_size
        if report.gpu_devices:
            job.gpu_devices = report.gpu_devices
        scheduler.persistence.put_job(job.record())
        if op is None:
            return
        touched.add(op.id)
        if scheduler.tentative.operations:  # (none: ``on_finished`` would find the operation in none)
            scheduler.tentative.on_finished(job, report, now)
        if state == "aborted":
            op.aborted_jobs += 1
        elif (
            state == "completed"
            and job.interruption_info is None
            and op.model.tasks[job.task_name].restart_completed_jobs
        ):
            op.lost_jobs += 1  # restart_completed_jobs: started again by the controller, counted lost
        finished = FinishedAllocation(
            job.allocation_id or job.id,
            state,
            abort_reason=abort_reason,
            user_job_max_memory=report.statistics.get("user_job/max_memory"),
            job_proxy_max_memory=report.statistics.get("job_proxy/max_memory"),
        )
        if job.allocation_id is not None:
            scheduler.allocation_jobs.pop(job.allocation_id, None)
            core = scheduler.cores.get(job.tree)
            if core is not None and core.on_allocation_finished(finished, now) is not None:
                return
            # preempted or detached allocations: the strategy already forgot them
            return
        allocation = op.controller.adopt_finished(node.address, job.id, now)
        if allocation is not None:
            finished.allocation_id = allocation.id
            op.controller.on_allocation_finished(allocation, finished, now)

    @staticmethod
    def _speculative_loser(op: LiveOperation | None, job: LiveJob) -> str | None:
        """The abort reason of a job whose speculative competitor already completed, else None."""
        speculation = op.controller.speculation if op is not None else None
        if speculation is None or job.allocation_id is None:
            return None
        return speculation.loser_reason(job.allocation_id)

    def mark_lost(self, job: LiveJob, now: float) -> None:
        scheduler = self.scheduler
        scheduler.persistence.touch(job.operation_id)
        scheduler.jobs.pop(job.id, None)
        op = scheduler.operations.get(job.operation_id)
        if op is not None:
            op.end_job(job, "aborted")
        else:
            job.state = "aborted"
        job.finish_time = now
        job.abort_reason = "node_offline"
        job.error = yt_error(ABORT_BY_SCHEDULER, "Job aborted by scheduler", {"abort_reason": "node_offline"})
        scheduler.persistence.put_job(job.record())
        if op is not None:
            op.lost_jobs += 1
            op.aborted_jobs += 1

    def _lose_allocation(self, job: LiveJob, now: float) -> None:
        """A job its node stopped reporting: abort its allocation (the controller restarts the job)."""
        scheduler = self.scheduler
        self.mark_lost(job, now)
        if job.allocation_id is not None:
            scheduler.allocation_jobs.pop(job.allocation_id, None)
            core = scheduler.cores.get(job.tree)
            if core is not None:
                core.on_allocation_finished(
                    FinishedAllocation(job.allocation_id, "aborted", abort_reason="node_offline"), now
                )

    def _remove_node_from_tree(self, tree: str, address: str, now: float) -> None:
        """Take a node out of one tree's core: its allocations there end (their jobs are lost)."""
        scheduler = self.scheduler
        core = scheduler.cores[tree]
        if address in core.node_limits:
            scheduler.mark_dirty(tree)  # the tree's total resources changed
        for allocation in core.remove_node(address, now):
            job_id = scheduler.allocation_jobs.pop(allocation.id, None)
            job = scheduler.jobs.get(job_id) if job_id else None
            if job is not None and job.state == "running":
                self.mark_lost(job, now)
        scheduler.updates.drain(core)

    def sweep_nodes(self, now: float) -> list[str]:
        """Nodes silent for ``node_heartbeat_timeout``: their allocations are aborted (``node_offline``)."""
        scheduler = self.scheduler
        with scheduler.lock:
            gone = [
                a for a, n in scheduler.nodes.items() if now - n.last_seen > scheduler.node_heartbeat_timeout
            ]
            for address in gone:
                for tree in scheduler.cores:
                    self._remove_node_from_tree(tree, address, now)
                del scheduler.nodes[address]
                scheduler.alert_center.fleet_moved()
            expired = [
                a for a, t in scheduler.expected_nodes.items() if now - t > scheduler.node_heartbeat_timeout
            ]
            for address in expired:
                del scheduler.expected_nodes[address]
                self._release_reservations(address, frozenset(), now)
            if gone or expired:
                scheduler.generation.bump()  # a swept node's next heartbeat registers it again at the leader
            return gone + expired


def _refuse_foreign_report(job: LiveJob, reporter: str, state: str, operation_id: str | None = None) -> None:
    """A node speaks only for the jobs the scheduler assigned to it: a report about another node's job (or naming
    the wrong operation) is not applied, and the attempt is logged with both addresses."""
    log.warning(
        "node %s reported job %s of operation %s as %s%s, but the scheduler assigned that job to node %s; "
        "the report is refused",
        reporter,
        job.id,
        job.operation_id,
        state,
        "" if operation_id in (None, job.operation_id) else f" (naming operation {operation_id})",
        job.address,
    )
