"""The simulator's job model: starting jobs from heartbeat decisions, their ends, preemption and memory peaks."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.controllers.memory import RESOURCE_OVERDRAFT
from pooltree.controllers.overdraft import JobMemory, select_overdraft_victims
from pooltree.controllers.speculative import SPECULATIVE_ABORT_REASONS
from pooltree.resources import MEMORY
from pooltree.sim.state import (
    _JOB_END,
    _JOB_PEAK,
    JOB_EVENT,
    VANILLA_MEMORY_PEAK_AFTER,
    _Job,
    _Node,
    _Op,
    _TreeState,
)
from pooltree.strategy.model import Allocation, FinishedAllocation, HeartbeatResult

if TYPE_CHECKING:
    from pooltree.sim.engine import Simulation


class SimulationJobs:
    """The job model of one `Simulation` (a part it owns): jobs started from heartbeat decisions, their ends,
    preemption, memory peaks and overdrafts."""

    def __init__(self, simulation: Simulation) -> None:
        self.sim = simulation
        """The simulation this part belongs to: its clock, event heap, records and the other part."""

    def apply(self, node: _Node, tree: _TreeState, result: HeartbeatResult) -> None:
        touched: dict[str, _Op] = {}
        for allocation in result.allocations_to_start:
            op = self.sim.op_by_id[allocation.operation_id]
            touched[op.spec.id] = op
            self.start_job(allocation, op, node)
        for record in result.allocations_to_preempt:
            job = self.sim.jobs.get(record.allocation_id)
            if job is not None:
                self.preempted(job, record)
        if result.allocations_to_preempt:
            self.sim._wake_queued(tree)
        for op in touched.values():
            assert op.controller is not None
            if op.controller.pending_allocation_count == 0:
                self.sim._drop_pending(tree, op.spec.id)
            if op.other_trees:
                self.demand_changed(op)

    def demand_changed(self, op: _Op) -> None:
        """A job of an operation in several trees started or ended: its demand (one controller) changed in each
        of its trees, so none may skip its next fair-share update."""
        for name in op.regular_trees:
            self.sim.trees[name].changed = True

    def place_running(self, op: _Op, tree: _TreeState, tentative: Collection[str] = ()) -> None:
        """Jobs already running when the run starts (``SimOperation.placed``): adopted on their nodes at once (an
        operation in several trees: by the core of the node's tree, if that tree runs it). A job on a node of one
        of its ``tentative`` trees waits for `place_tentative` (the operation joins those trees after its regular
        ones; such jobs come last in ``placed``, `pooltree.forecast.fork`)."""
        spec = op.spec
        for index, address in enumerate(spec.placed):
            node = self.sim.node_by_address.get(address)
            if node is not None and node.tree in tentative and node.tree not in op.regular_trees:
                continue
            adopting = tree
            if node is not None and op.other_trees:
                adopting = self.sim.trees[node.tree] if node.tree in op.regular_trees else None
                if adopting is not None and not self.sim.operation_model.runs_in(op, node.tree):
                    adopting = None
            self._adopt(op, index, node, adopting)

    def place_tentative(self, op: _Op, tentative: Collection[str]) -> None:
        """The placed jobs on nodes of the operation's ``tentative`` trees (those `place_running` left), once it
        joined them: adopted by the core of the node's tree if that tree runs it (a tree that refused it or
        queues it adopts none)."""
        for index, address in enumerate(op.spec.placed):
            node = self.sim.node_by_address.get(address)
            if node is None or node.tree not in tentative or node.tree in op.regular_trees:
                continue
            adopting = None
            if node.tree in op.tentative_trees and self.sim.operation_model.runs_in(op, node.tree):
                adopting = self.sim.trees[node.tree]
            self._adopt(op, index, node, adopting)

    def _adopt(self, op: _Op, index: int, node: _Node | None, adopting: _TreeState | None) -> None:
        """Placed job ``index`` of ``op`` adopted on ``node`` by ``adopting``'s core (refused: counted)."""
        spec = op.spec
        started = spec.placed_since[index] if index < len(spec.placed_since) else None
        allocation = None
        if node is not None and node.alive and adopting is not None:
            allocation = adopting.core.adopt_allocation(spec.id, node.address, self.sim.now, started=started)
        if allocation is None or adopting is None or node is None:
            self.sim.stats["placed_jobs_refused"] += 1
            return
        adopting.changed = True
        self.start_job(allocation, op, node)

    def start_job(self, allocation: Allocation, op: _Op, node: _Node) -> None:
        now = self.sim.now
        task = next(t for t in op.spec.tasks if t.name == allocation.task)
        fraction = getattr(allocation.payload, "fraction", 1.0)
        duration = None
        if task.duration is not None:
            duration = task.duration.sample(op.rng) * fraction
        self.sim.job_serial += 1
        job = _Job(allocation, op, node, self.sim.job_serial, now, duration, task)
        reserve_bytes = float(allocation.resources[MEMORY])
        job.memory_now = reserve_bytes
        job.memory_limit_total = max(reserve_bytes, 1.0)
        reserve = op.reserves.get(task.name)
        if task.memory_usage is not None and reserve is not None:
            options = reserve.options
            job.user_peak = task.memory_usage.sample(op.rng)
            job.peak_total = options.footprint_memory + options.job_proxy_memory + job.user_peak
            job.memory_limit_total = (
                options.footprint_memory + options.job_proxy_memory + options.memory_limit
            )
            job.memory_now = min(reserve_bytes, job.peak_total)
            peak_after = duration / 2.0 if duration is not None else VANILLA_MEMORY_PEAK_AFTER
            if duration is not None and op.spec.type == "vanilla":
                peak_after = min(VANILLA_MEMORY_PEAK_AFTER, duration / 2.0)
            self.sim._push(
                now + peak_after,
                JOB_EVENT,
                job.serial,
                _JOB_PEAK,
                ("job", allocation.id, job.token, _JOB_PEAK),
            )
        self.sim.jobs[allocation.id] = job
        node.jobs.add(allocation.id)
        if duration is not None:
            self.plan_end(job, now + duration, FinishedAllocation(allocation.id, "completed"))

    def plan_end(self, job: _Job, when: float, finished: FinishedAllocation) -> None:
        job.token += 1
        job.end = when
        job.end_finished = finished
        self.sim._push(when, JOB_EVENT, job.serial, _JOB_END, ("job", job.allocation.id, job.token, _JOB_END))

    def with_memory(self, job: _Job, finished: FinishedAllocation) -> FinishedAllocation:
        reserve = job.op.reserves.get(job.task.name)
        if reserve is None or job.task.memory_usage is None:
            return finished
        finished.user_job_max_memory = job.user_peak if job.memory_now >= job.peak_total else None
        finished.job_proxy_max_memory = (
            reserve.options.job_proxy_memory if finished.user_job_max_memory else None
        )
        return finished

    def preempted(self, job: _Job, record: Any) -> None:
        now = self.sim.now
        allocation_id = job.allocation.id
        if record.interruptible:
            delay = min(self.sim.scenario.scheduler.interruption_delay, record.timeout)
            done = now + delay
            if job.end is not None and job.end <= done:
                return
            processed = None
            if job.duration:
                processed = min(1.0, max(0.0, (done - job.start) / job.duration))
            self.plan_end(
                job, done, FinishedAllocation(allocation_id, "completed", processed_fraction=processed)
            )
        elif record.reason.value == "graceful_preemption":
            if job.end is not None and job.end <= now + record.timeout:
                return
            self.plan_end(job, now + record.timeout, FinishedAllocation(allocation_id, "aborted"))
        else:
            node = job.node
            report = self.sim.beat_time(node, node.k_next)
            self.plan_end(job, report, FinishedAllocation(allocation_id, "aborted"))

    # ------------------------------------------------------------------ job endings

    def drop_job(self, job: _Job, state: str) -> None:
        """Forget a job whose allocation the core no longer tracks; account its run time."""
        runtime = self.sim.now - job.start
        op = job.op
        op.jobs_total_duration += runtime
        op.job_max_duration = max(op.job_max_duration, runtime)
        preemption = job.allocation.preemption
        if preemption is not None and preemption.reason.value not in SPECULATIVE_ABORT_REASONS:
            op.preempted_job_time += runtime
            op.preempted_job_count += 1
        if state in ("aborted", "failed"):
            self.sim.wasted_job_time += runtime
            op.wasted_job_time += runtime
        self.sim.jobs.pop(job.allocation.id, None)
        job.node.jobs.discard(job.allocation.id)
        job.token += 1

    def finish_job(self, job: _Job, finished: FinishedAllocation) -> None:
        op = job.op
        tree = self.sim.trees[job.node.tree]  # its operation's tree, or one of its tentative trees
        speculation = op.controller.speculation if op.controller is not None else None
        lost = speculation.loser_reason(job.allocation.id) if speculation is not None else None
        if lost is not None and finished.state != "aborted":  # its competitor completed first: an abort
            finished = FinishedAllocation(finished.allocation_id, "aborted", abort_reason=lost)
        finished = self.with_memory(job, finished)
        tree.core.on_allocation_finished(finished, self.sim.now)
        tree.changed = True
        if op.other_trees:
            self.demand_changed(op)
        if finished.state == "aborted" or (
            op.controller is not None and op.controller.speculation is not None
        ):
            self.sim._wake_queued(
                tree
            )  # a lost gang job restarts the others; a completed job's competitor stops
        self.drop_job(job, finished.state)
        node = job.node
        if node.alive:
            self.sim._wake(node)
        clean = finished.state == "completed" and job.allocation.preemption is None
        self.after_job_change(op, demand_may_grow=not clean or job.task.memory_usage is not None)
        if op.tentative_trees:
            self.sim.tentative.on_finished(job, finished)  # a sample; a tree it bans is left

    def after_job_change(self, op: _Op, *, demand_may_grow: bool) -> None:
        controller = op.controller
        if controller is None or op.state not in ("running", "pending"):
            return
        tree = self.sim.trees[op.tree]
        max_failed = op.spec.spec.max_failed_job_count
        if controller.failed_job_count > max_failed:
            op.error = f"Failed jobs limit exceeded ({controller.failed_job_count} > {max_failed})"
            self.sim.operation_model.finish_operation(op, "failed")
            return
        if controller.is_completed:
            self.sim.operation_model.finish_operation(op, "completed")
            return
        self.sim._refresh_pending(tree, op, demand_may_grow)
        for name in op.other_trees:
            self.sim._refresh_pending(self.sim.trees[name], op, demand_may_grow)
        for name in op.tentative_trees:
            self.sim._refresh_pending(self.sim.trees[name], op, demand_may_grow)

    def memory_peak(self, job: _Job) -> None:
        job.memory_now = job.peak_total
        node = job.node
        if job.memory_now > float(job.allocation.reserve[MEMORY]):
            # The node reports memory above the reserve: the scheduler counts it (SchedulerCore.report_usage).
            tree = self.sim.trees[node.tree]
            usage = np.array(job.allocation.reserve, dtype=float)
            usage[MEMORY] = job.memory_now
            if tree.core.report_usage(job.allocation.id, usage):
                tree.changed = True
                self.sim._wake(node)
        limit = float(node.limits[MEMORY])
        jobs = [self.sim.jobs[j] for j in sorted(node.jobs, key=lambda j: self.sim.jobs[j].serial)]
        usage = sum(j.memory_now for j in jobs)
        failing = [j for j in jobs if j.memory_now > j.memory_limit_total]
        if usage <= limit and not failing:
            return
        victims = select_overdraft_victims(
            limit,
            [
                JobMemory(
                    j.allocation.id,
                    float(j.allocation.reserve[MEMORY]),
                    j.memory_now,
                    j.memory_limit_total,
                    j.start,
                )
                for j in jobs
            ],
        )
        for victim in victims.failed:
            failed = self.sim.jobs[victim.id]
            self.sim._emit(
                {
                    "event": "job_memory_limit_exceeded",
                    "time": self.sim.now,
                    "allocation_id": victim.id,
                    "operation_id": failed.op.spec.id,
                    "node": node.address,
                    "usage": victim.usage,
                }
            )
            self.finish_job(failed, self.with_memory(failed, FinishedAllocation(victim.id, "failed")))
        for victim in victims.aborted:
            aborted = self.sim.jobs.get(victim.id)
            if aborted is None:
                continue
            self.sim.stats["resource_overdraft"] += 1
            self.sim._emit(
                {
                    "event": "job_resource_overdraft",
                    "time": self.sim.now,
                    "allocation_id": victim.id,
                    "operation_id": aborted.op.spec.id,
                    "node": node.address,
                    "usage": victim.usage,
                    "reserve": victim.reserve,
                }
            )
            finished = FinishedAllocation(victim.id, "aborted", abort_reason=RESOURCE_OVERDRAFT)
            self.finish_job(aborted, self.with_memory(aborted, finished))
