"""Operation commands: start (checked, admitted, committed, attached), finish, suspend, resume, parameters.

A part of ``LiveScheduler`` (``scheduler.py``, ``scheduler.commands``) that works on the scheduler's state under its
lock. Every command but the start commits its new record to the store first (``persistence.py``) and changes the
runtime only after the commit succeeded; a failed commit raises and leaves memory as it was. A start admits the
operation in memory and queues its record for the group commit (``commit.py``), which stores it after the lock is
released: the start is acknowledged only once it is stored, and a job of it can only be queued after it, so none is
stored (or told to its node) before it; a failed write undoes the start. A start's mutation id is claimed at admission
(``start_claims.py``): a retry while the first start is being stored answers its operation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pooltree.config import OperationSpec
from pooltree.controllers.operations import TaskSpec
from pooltree.errors import ConfigError, PooltreeError
from pooltree.node.job import ABORT_BY_SCHEDULER, yt_error
from pooltree.server.live.model import (
    OPERATION_FAILED,
    LiveJob,
    LiveOperation,
    LiveVanillaController,
    _runtime_parameters,
    build_tasks,
    live_controller,
    new_guid,
)
from pooltree.server.live.persistence import planned
from pooltree.server.live.start_claims import NotMarkedRetry, StartClaims
from pooltree.server.store import Mutation
from pooltree.strategy.model import Allocation
from pooltree.strategy.single_tree import restrict_to_single_tree
from pooltree.strategy.tentative import asks_for_tentative_trees, with_tentative_trees
from pooltree.tree.lifecycle import OperationState

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler


def parse_start(operation_type: str, spec: Any) -> OperationSpec:
    """The type and spec checks of a start (before admission)."""
    if operation_type != "vanilla":
        raise PooltreeError(
            f'Operation type "{operation_type}" is not supported: pooltree is a scheduler that runs vanilla '
            "operations (yt vanilla, run_operation with a VanillaSpecBuilder); map, reduce, sort, merge and "
            "other data-processing operations and table I/O are not available",
            attributes={"operation_type": operation_type},
        )
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", f"expected a map, got {type(spec).__name__}")
    return OperationSpec.parse(dict(spec), "spec")


def enter_state(op: LiveOperation, state: str, now: float) -> None:
    """``op`` moves to ``state`` in memory (its event; its finish time when final); the caller stores it."""
    op.state = state
    op.events.append({"state": state, "time": now})
    if state in ("completed", "failed", "aborted"):
        op.finish_time = now


def refuse_finished(op: LiveOperation) -> None:
    """A command that changes an operation is refused once it has finished (naming its final state)."""
    if op.is_final:
        raise PooltreeError(
            f"Operation {op.id} has already finished ({op.state})",
            attributes={"operation_id": op.id, "state": op.state},
        )


class OperationCommands:
    """The operation commands of ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.start_claims = StartClaims()
        """Mutation ids of starts in flight and recently stored (a retry answers the first start's operation)."""

    def set_state(self, op: LiveOperation, state: str, now: float) -> None:
        if op.state == state:
            return
        enter_state(op, state, now)
        self.scheduler.persistence.save_operation(op)
        self.tell_listeners(op)

    def tell_listeners(self, op: LiveOperation) -> None:
        for listener in self.scheduler.listeners:
            listener(op.id, op.state)

    def sync_state(self, op: LiveOperation, now: float) -> None:
        scheduler = self.scheduler
        registered = scheduler.registry.operations.get(op.id)
        if registered is not None:
            op.suspended = registered.suspended
            self.set_state(op, registered.state.value, now)

    def on_activated(self, operation_ids: list[str], now: float) -> None:
        scheduler = self.scheduler
        for operation_id in operation_ids:
            op = scheduler.operations.get(operation_id)
            if op is not None:
                self.sync_state(op, now)
                scheduler.updates.stale_trees.update(op.trees)

    def check_start(
        self, operation_type: str, spec: Any, user: str, operation_id: str
    ) -> tuple[OperationSpec, LiveVanillaController, dict[str, str]]:
        """Every check of :meth:`start_operation` (type, spec, tasks, admission in every tree), nothing stored or
        changed: the parsed spec, a controller that is attached nowhere, and tree → pool (a dry run)."""
        scheduler = self.scheduler
        model = parse_start(operation_type, spec)
        tasks = build_tasks(operation_id, model)
        controller = live_controller(operation_id, model, tasks)
        with scheduler.config_lock, scheduler.lock:
            pools = scheduler.registry.check_operation(operation_id, model, user=user)
        return model, controller, pools

    def start_operation(
        self,
        operation_type: str,
        spec: Any,
        user: str,
        now: float,
        *,
        operation_id: str | None = None,
        mutation_id: str | None = None,
        retry: bool = True,
    ) -> LiveOperation:
        """Validate the spec, admit the operation in its trees and attach its controller (lock held), then wait,
        without the lock, until the group commit has stored it.

        A failed commit rolls the runtime back (nothing of the operation is left to run later) and raises.
        ``mutation_id`` is claimed at admission (``start_claims.py``) and saved with the operation in one commit:
        a retry with it answers the first start's operation, also while that one is still being stored (a second
        request with it that is not marked ``retry`` is refused: ``NotMarkedRetry``).
        """
        model = parse_start(operation_type, spec)
        operation_id = operation_id or new_guid()
        tasks = build_tasks(operation_id, model)
        if mutation_id is None:
            with self.scheduler.config_lock, self.scheduler.lock:
                op, ticket = self.queue_start(operation_type, spec, user, model, operation_id, tasks, now)
            return self.store_start(op, ticket, now)
        claims = self.start_claims
        while True:
            with self.scheduler.config_lock, self.scheduler.lock:
                earlier = claims.claim(mutation_id)
                if earlier is None:
                    try:
                        op, ticket = self.queue_start(
                            operation_type, spec, user, model, operation_id, tasks, now, mutation_id
                        )
                    except BaseException:
                        claims.settle(mutation_id, None, now)
                        raise
            if earlier is None:
                break
            if not retry:
                raise NotMarkedRetry(mutation_id)
            if isinstance(earlier, LiveOperation):
                return earlier  # a retry: the first start's operation
            earlier.settled.wait()  # the first start is being stored; its outcome answers this one
        try:
            self.store_start(op, ticket, now)
        except BaseException:
            claims.settle(mutation_id, None, now)  # nothing of it committed: a retry starts afresh
            raise
        claims.settle(mutation_id, op, now)
        return op

    def queue_start(
        self,
        operation_type: str,
        spec: Any,
        user: str,
        model: OperationSpec,
        operation_id: str,
        tasks: list[TaskSpec],
        now: float,
        mutation_id: str | None = None,
    ) -> tuple[LiveOperation, int]:
        """The start admitted and its record queued for the group commit (lock held): the operation, the ticket."""
        scheduler = self.scheduler
        op = self.admit(operation_type, spec, user, model, operation_id, tasks, now)
        # validated and admitted, in its state after admission (pending or running): its record (with the
        # mutation id, in the same transaction) is queued for the group commit and stored after the lock is
        # released, before the start is acknowledged; a job of it is queued after it, so never stored first
        registered = scheduler.registry.operations[operation_id]
        op.suspended = registered.suspended
        enter_state(op, registered.state.value, now)
        mutation = Mutation(mutation_id, {"operation_id": operation_id}, now) if mutation_id else None
        try:
            ticket = scheduler.persistence.queue_start(op, mutation)
        except BaseException:
            self.roll_back_start(op, now)
            raise
        self.tell_listeners(op)
        # No fair-share update per start (its cost grows with the operations in the tree): an operation that
        # can run now is published before the next heartbeat schedules and by the service loop at once (or,
        # when the tree's periodic update is computing outside the lock then, by that update: a heartbeat in
        # between schedules against the last published tree, as YTsaurus's node shards do). A
        # pending one changes no share (no usage, no demand): no update for it; views show it with zero
        # shares until an update includes it.
        if registered.state is OperationState.RUNNING:
            scheduler.updates.stale_trees.update(op.trees)
        for name in op.trees:
            scheduler.views.forget(name)  # placements and pool counters changed; rebuilt when read
        return op, ticket

    def store_start(self, op: LiveOperation, ticket: int, now: float) -> LiveOperation:
        """Wait, without the lock, until the start's record is stored; a refused start is rolled back."""
        scheduler = self.scheduler
        try:
            scheduler.commits.wait(ticket)
        except BaseException:
            # a refused start leaves nothing that could run later
            with scheduler.config_lock, scheduler.lock:
                if scheduler.operations.get(op.id) is op:
                    self.roll_back_start(op, now)
                scheduler.counts.forget(op.id, None)
            raise
        scheduler.counts.stored(op.id)
        return op

    def admit(
        self,
        operation_type: str,
        spec: Any,
        user: str,
        model: OperationSpec,
        operation_id: str,
        tasks: list[TaskSpec],
        now: float,
    ) -> LiveOperation:
        """A checked start's operation registered in its trees, attached to their cores and to the scheduler, not
        stored yet (lock held)."""
        scheduler = self.scheduler
        controller = live_controller(operation_id, model, tasks)
        # spec schedule_in_single_tree: one of its trees is chosen now, the others are erased
        in_trees, erased = restrict_to_single_tree(
            scheduler.registry,
            scheduler.cores,
            operation_id,
            model,
            user=user,
            operation_type=operation_type,
            new_demand=controller.needed_resources,
        )
        # spec tentative_pool_trees: more trees the operation runs in on trial (live/tentative.py)
        tentative = (
            scheduler.tentative.trees_for_start(spec, operation_type)
            if asks_for_tentative_trees(spec)
            else []
        )
        in_trees = with_tentative_trees(
            in_trees, in_trees.pool_trees_or(scheduler.registry.default_tree), tentative
        )
        registered = scheduler.registry.register_operation(
            operation_id, in_trees, user=user, operation_type=operation_type, now=now
        )
        op = LiveOperation(
            operation_id,
            user,
            operation_type,
            dict(spec),
            model,
            controller,
            start_time=now,
            events=[{"state": "starting", "time": now}],
            trees=list(registered.trees),
        )
        self.attach(op)
        scheduler.operations[operation_id] = op
        op.runtime_parameters = {
            "scheduling_options_per_pool_tree": _runtime_parameters(scheduler.registry, op.id, op.trees)
        }
        if erased:
            op.runtime_parameters["erased_trees"] = erased
        scheduler.tentative.attach(op, [t for t in tentative if t in op.trees])
        op.pools = {
            name: opts["pool"]
            for name, opts in op.runtime_parameters["scheduling_options_per_pool_tree"].items()
        }
        return op

    def roll_back_start(self, op: LiveOperation, now: float) -> None:
        """Undo a start whose commit failed: the operation leaves the cores, the trees and the scheduler. A job
        of it started meanwhile (only when a later batch was stored: a store that failed and came back) is
        aborted on its node."""
        scheduler = self.scheduler
        for allocation in self.detach(op):
            self.abort_on_node(allocation, "operation_aborted", now)
        scheduler.operations.pop(op.id, None)
        scheduler.updates.dirty.update(op.trees)
        for name in op.trees:
            scheduler.views.forget(name)
        if op.id in scheduler.registry.operations:
            activated = scheduler.registry.unregister_operation(op.id, now)
            # if the store fails again the leader steps down and revives from the store
            with contextlib.suppress(PooltreeError):
                self.on_activated(activated, now)

    def attach(self, op: LiveOperation) -> None:
        scheduler = self.scheduler
        for name in op.trees:
            scheduler.cores[name].attach_controller(op.id, op.controller)

    def detach(self, op: LiveOperation) -> list[Allocation]:
        scheduler = self.scheduler
        running: list[Allocation] = []
        scheduler.tentative.forget(op.id)
        for name in op.trees:
            core = scheduler.cores.get(name)
            if core is None or op.id not in core.controllers:
                continue
            running.extend(core.detach_controller(op.id))
        return running

    def finish_operation(
        self, operation_id: str, final: str, now: float, *, error: dict[str, Any] | None = None
    ) -> None:
        """Complete, abort or fail an operation: committed to the store first, then its running jobs are
        aborted on their nodes and it leaves the trees (a failed commit raises and changes nothing)."""
        scheduler = self.scheduler
        with scheduler.lock:
            op = scheduler.operation(operation_id)
            refuse_finished(op)
            reason = (
                "operation_" + {"completed": "completed", "aborted": "aborted", "failed": "failed"}[final]
            )
            intermediate = {"completed": "completing", "aborted": "aborting", "failed": "failing"}[final]
            events = [*op.events, {"state": intermediate, "time": now}, {"state": final, "time": now}]
            scheduler.persistence.commit_operation(
                planned(op, state=final, events=events, finish_time=now, error=error),
            )
            # committed: act
            for allocation in self.detach(op):
                self.abort_on_node(allocation, reason, now)
            for node in op.controller.reserved_nodes():
                for job_id in op.controller.release(node):
                    job = scheduler.jobs.get(job_id)
                    if job is not None:
                        self.abort_on_node_by_job(job, reason, now)
            activated = scheduler.registry.finish_operation(operation_id, OperationState(final), now)
            op.error, op.events, op.finish_time, op.state = error, events, now, final
            op.revision += 1
            for listener in scheduler.listeners:
                listener(op.id, final)
            scheduler.updates.dirty.update(op.trees)
            self.on_activated(activated, now)
            # a finished operation is served from the store from now on
            del scheduler.operations[operation_id]
            scheduler.updates.refresh_stale_trees(now)

    def abort_on_node(self, allocation: Allocation, reason: str, now: float) -> None:
        scheduler = self.scheduler
        job_id = scheduler.allocation_jobs.pop(allocation.id, None)
        job = scheduler.jobs.get(job_id) if job_id else None
        if job is not None:
            self.abort_on_node_by_job(job, reason, now)

    def abort_on_node_by_job(self, job: LiveJob, reason: str, now: float) -> None:
        scheduler = self.scheduler
        scheduler.persistence.touch(job.operation_id)
        node = scheduler.nodes.get(job.address)
        if node is not None:
            node.aborts.append({"job_id": job.id, "reason": reason})
        scheduler.generation.bump_node(job.address)
        scheduler.jobs.pop(job.id, None)
        if job.state == "running":
            op = scheduler.operations.get(job.operation_id)
            if op is not None:
                op.end_job(job, "aborted")
            else:
                job.state = "aborted"
            job.finish_time = now
            job.abort_reason = reason
            job.error = yt_error(ABORT_BY_SCHEDULER, "Job aborted by scheduler", {"abort_reason": reason})
            scheduler.persistence.put_job(job.record())

    def suspend_operation(self, operation_id: str, now: float, *, abort_running_jobs: bool = False) -> None:
        scheduler = self.scheduler
        with scheduler.lock:
            op = scheduler.operation(operation_id)
            self.commit_suspended(op, True)
            scheduler.updates.dirty.update(op.trees)
            if abort_running_jobs:
                for job in list(op.jobs.values()):
                    if job.state == "running" and job.allocation_id is not None:
                        node = scheduler.nodes.get(job.address)
                        if node is not None:
                            node.aborts.append({"job_id": job.id, "reason": "operation_suspended"})
                            scheduler.generation.bump_node(job.address)

    def resume_operation(self, operation_id: str, now: float) -> None:
        scheduler = self.scheduler
        with scheduler.lock:
            op = scheduler.operation(operation_id)
            self.commit_suspended(op, False)
            scheduler.updates.dirty.update(op.trees)

    def commit_suspended(self, op: LiveOperation, suspended: bool) -> None:
        """Commit the suspension (or resumption) to the store, then suspend or resume in the runtime; a failed
        commit raises and leaves the runtime as it was."""
        scheduler = self.scheduler
        refuse_finished(op)
        scheduler.persistence.commit_operation(planned(op, suspended=suspended))
        if suspended:
            scheduler.registry.suspend_operation(op.id)
        else:
            scheduler.registry.resume_operation(op.id)
        op.suspended = suspended
        op.revision += 1

    def update_operation_parameters(self, operation_id: str, parameters: Any, now: float) -> None:
        """Pool, weight and resource limits per tree; validated in every tree first, the last good kept."""
        scheduler = self.scheduler
        with scheduler.lock:
            op = scheduler.operation(operation_id)
            refuse_finished(op)
            if not isinstance(parameters, Mapping):
                raise ConfigError("parameters", f"expected a map, got {type(parameters).__name__}")
            # validated in every tree, committed, and only then applied (a failed commit changes nothing)
            updates = scheduler.registry.prepare_operation_parameters(operation_id, parameters)
            per_tree = _runtime_parameters(scheduler.registry, op.id, op.trees, updates)
            runtime_parameters = {
                **{k: v for k, v in op.runtime_parameters.items() if k != "scheduling_options_per_pool_tree"},
                **{k: parameters[k] for k in ("owners", "acl", "annotations") if k in parameters},
                "scheduling_options_per_pool_tree": per_tree,
            }
            pools = {name: opts["pool"] for name, opts in per_tree.items()}
            scheduler.persistence.commit_operation(
                planned(op, runtime_parameters=runtime_parameters, pools=pools)
            )
            activated = scheduler.registry.commit_operation_parameters(operation_id, updates, now)
            op.runtime_parameters, op.pools = runtime_parameters, pools
            op.revision += 1
            scheduler.updates.dirty.update(op.trees)
            # what follows from the change (this or other operations now running) is written as it happens,
            # as every activation is; a restart recomputes it from the committed parameters anyway
            self.on_activated(activated, now)
            self.sync_state(op, now)
            scheduler.updates.refresh_stale_trees(now)

    def check_completion(self, op: LiveOperation, now: float) -> None:
        if op.is_final:
            return
        limit = op.model.max_failed_job_count
        failed = op.controller.failed_job_count
        if failed > 0 and failed >= limit:
            last = next(
                (j for j in reversed(list(op.jobs.values())) if j.state == "failed" and j.error is not None),
                None,
            )
            inner = [last.error] if last is not None and last.error is not None else []
            error = yt_error(
                OPERATION_FAILED,
                "Failed jobs limit exceeded",
                {"max_failed_job_count": limit, "failed_job_count": failed, "operation_id": op.id},
                inner,
            )
            self.finish_operation(op.id, "failed", now, error=error)
        elif op.controller.is_completed and op.state == "running":
            self.finish_operation(op.id, "completed", now)
