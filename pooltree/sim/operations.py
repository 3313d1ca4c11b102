"""The simulator's operations: arrival and registration, controllers, lifetimes, and operations no node fits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.alerts import unschedulable_task
from pooltree.config import TagFilter
from pooltree.controllers.memory import (
    TaskMemoryOptions,
    TaskMemoryReserve,
)
from pooltree.controllers.operations import OperationControllerBase, TaskSpec, make_controller
from pooltree.controllers.speculative import speculation_from_spec
from pooltree.errors import PooltreeError
from pooltree.resources import MEMORY, RESOURCE_COUNT, RESOURCES, Vector, format_size
from pooltree.sim.state import (
    OPERATION_EVENT,
    _Op,
)
from pooltree.strategy.model import Allocation
from pooltree.strategy.single_tree import choose_tree, schedules_in_single_tree

if TYPE_CHECKING:
    from pooltree.sim.engine import Simulation


class SimulationOperations:
    """The operations of one `Simulation` (a part it owns): arrival and registration, controllers and memory
    reserves, lifetimes, operations no node can fit."""

    def __init__(self, simulation: Simulation) -> None:
        self.sim = simulation
        """The simulation this part belongs to: its clock, event heap, records and the other part."""

    # ------------------------------------------------------------------ operations

    def controller(self, op: _Op) -> OperationControllerBase:
        spec = op.spec
        raw = spec.raw_spec
        tasks = []
        for task in spec.tasks:
            reserve = None
            if task.memory_usage is not None:
                options_spec: dict[str, Any] = {"memory_limit": task.memory_limit}
                for key in (
                    "user_job_memory_digest_default_value",
                    "user_job_memory_digest_lower_bound",
                    "memory_reserve_factor",
                    "job_proxy_memory_digest",
                ):
                    if raw.get(key) is not None:
                        options_spec[key] = raw[key]
                options = TaskMemoryOptions.from_spec(
                    options_spec, self.sim.scenario.memory, path=f"operations.{spec.id}.spec"
                )
                reserve = TaskMemoryReserve(options, self.sim.scenario.memory)
                op.reserves[task.name] = reserve
            tasks.append(
                TaskSpec(
                    task.name,
                    task.job_count,
                    task.resources,
                    interruptible=task.interruptible,
                    memory_reserve=reserve,
                    gang_size=task.gang_size,
                )
            )
        controller = make_controller(
            spec.id, spec.type, tasks, interruption_signal=spec.spec.interruption_signal
        )
        controller.speculation = speculation_from_spec(spec.spec, tasks)  # job_speculation_timeout
        return controller

    def fail_on_arrival(self, op: _Op, error: PooltreeError) -> None:
        op.state = "failed"
        op.error = error.message
        op.finish_time = self.sim.now
        self.sim._emit(
            {
                "event": "operation_failed",
                "time": self.sim.now,
                "operation_id": op.spec.id,
                "error": error.message,
            }
        )

    def choose_trees(self, op: _Op) -> None:
        """The trees of ``op`` (its spec's ``pool_trees``, else the default tree): with several, it runs in each
        (``other_trees`` after ``tree``), or with ``schedule_in_single_tree`` in the one the core chooses
        (``PooltreeError`` when none fits)."""
        spec = op.spec
        trees = spec.spec.pool_trees_or(self.sim.scenario.snapshot.default_pool_tree)
        if len(trees) > 1 and not schedules_in_single_tree(spec.spec):
            op.other_trees = tuple(trees[1:])  # scheduled in every tree, as the live service does
        elif len(trees) > 1:
            assert op.controller is not None
            op.tree = choose_tree(
                {name: self.sim.trees[name].core for name in trees},
                trees,
                spec.id,
                spec.spec,
                user=spec.user,
                operation_type=spec.type,
                new_demand=op.controller.needed_resources,
                pool_of={name: spec.spec.pool_for_tree(name, spec.user) for name in trees},
            )

    def arrive(self, op: _Op) -> None:
        self.sim.arrivals_left -= 1
        spec = op.spec
        op.controller = self.controller(op)
        try:
            self.choose_trees(op)
            tentative = self.sim.tentative.trees_for(op)  # spec tentative_pool_trees (`tentative.py`)
        except PooltreeError as error:
            self.fail_on_arrival(op, error)
            return
        tree = self.sim.trees[op.tree]
        op.pool = spec.spec.pool_for_tree(op.tree, spec.user)
        submitted: dict[str, Any] = {
            "event": "operation_submitted",
            "time": self.sim.now,
            "operation_id": spec.id,
            "pool": op.pool,
            "tree": op.tree,
        }
        if op.other_trees:
            submitted["pool_trees"] = list(op.regular_trees)
        self.sim._emit(submitted)
        try:
            self.check_other_trees(op)  # every tree admits it before any registers it, as at a live start
            state = tree.core.register_operation(
                spec.id,
                op.controller,
                user=spec.user,
                operation_type=spec.type,
                pool=op.pool,
                weight=spec.spec.weight_for_tree(op.tree),
                resource_limits=spec.spec.resource_limits_for_tree(op.tree),
                spec=spec.spec,
                now=self.sim.now,
            )
        except PooltreeError as error:
            self.fail_on_arrival(op, error)
            return
        self.sim.active_ops += 1
        tree.changed = True
        registered = tree.core.pool_tree.operations.get(spec.id)
        if registered is not None:
            op.pool = registered.pool.name
        if op.other_trees:
            state = self.join_other_trees(op, state)
        op.state = state
        if spec.below_fair_share_since is not None:
            tree.core.set_below_fair_share_since(spec.id, spec.below_fair_share_since)
        placing = state == "running" or bool(op.other_trees)
        if state == "running":
            op.start_time = self.sim.now
            self.sim.job_model.place_running(op, tree, tentative)
            self.sim._add_pending(tree, op)
            for name in op.other_trees:
                self.sim._add_pending(self.sim.trees[name], op)
            self.check_fit(op)
        elif op.other_trees:  # pending in some tree: the trees that run it schedule it meanwhile
            self.sim.job_model.place_running(op, tree, tentative)
            for name in op.regular_trees:
                self.sim._refresh_pending(self.sim.trees[name], op, True)
        if tentative:
            self.sim.tentative.attach(op, tentative)
            if placing and spec.placed:  # its jobs running in a tentative tree, once it joined that tree
                self.sim.job_model.place_tentative(op, tentative)
        if spec.lifetime is not None:
            self.sim._push(self.sim.now + spec.lifetime, OPERATION_EVENT, op.index, 1, ("lifetime", op))

    # ------------------------------------------------------------------ operations in several trees

    def check_other_trees(self, op: _Op) -> None:
        """What registering ``op`` in its other trees would refuse (a pool, a count limit): raised before any
        tree registers it (``PooltreeError``), so a refused start leaves no tree changed, as the live service's
        all-or-nothing registration does (`pooltree.tree.registry`)."""
        spec = op.spec
        for name in op.other_trees:
            self.sim.trees[name].core.pool_tree.prepare_registration(
                spec.id,
                user=spec.user,
                pool=spec.spec.pool_for_tree(name, spec.user),
                is_gang=spec.spec.is_gang,
            )

    def join_other_trees(self, op: _Op, state: str) -> str:
        """Register ``op`` (registered in ``op.tree`` with ``state``) in its other trees, with its one
        controller; its state: ``pending`` while any tree holds it in a queue, ``running`` once every tree runs
        it (the live service's rule, `pooltree.tree.registry`)."""
        spec = op.spec
        for name in op.other_trees:
            tree = self.sim.trees[name]
            in_tree = tree.core.register_operation(
                spec.id,
                op.controller,
                user=spec.user,
                operation_type=spec.type,
                pool=spec.spec.pool_for_tree(name, spec.user),
                weight=spec.spec.weight_for_tree(name),
                resource_limits=spec.spec.resource_limits_for_tree(name),
                spec=spec.spec,
                now=self.sim.now,
            )
            tree.changed = True
            if in_tree != "running":
                state = in_tree
        return state

    def runs_in(self, op: _Op, name: str) -> bool:
        """Whether tree ``name`` runs ``op`` now (its core schedules it there; not queued, not finished)."""
        registered = self.sim.trees[name].core.pool_tree.operations.get(op.spec.id)
        return registered is not None and bool(registered.running)

    def activated(self, op: _Op, name: str, now: float) -> None:
        """Tree ``name`` runs ``op`` of several trees now (a queue let it go): it runs once every tree does;
        meanwhile the trees that run it schedule it."""
        assert op.controller is not None
        if op.state == "pending" and all(self.runs_in(op, other) for other in op.regular_trees):
            op.state = "running"
            op.start_time = now
            if op.controller.pending_allocation_count > 0:
                for other in op.regular_trees:
                    self.sim._add_pending(self.sim.trees[other], op)
                self.check_fit(op)
        elif op.controller.pending_allocation_count > 0:
            self.sim._add_pending(self.sim.trees[name], op)

    # ------------------------------------------------------------------ operations no node can fit

    def online_limits(self, tree: str, filter_text: str) -> list[Vector]:
        """The distinct limits of the online nodes of ``tree`` matching the operation's tag filter."""
        key = (tree, filter_text)
        cached = self.sim._node_limits_cache.get(key)
        if cached is None:
            tag_filter = self.sim._tag_filters.get(filter_text)
            if tag_filter is None:
                tag_filter = TagFilter.parse(filter_text, "spec.scheduling_tag_filter")
                self.sim._tag_filters[filter_text] = tag_filter
            distinct: dict[tuple[float, ...], Vector] = {}
            for node in self.sim.nodes:
                if node.alive and node.tree == tree and tag_filter.matches(node.tags):
                    distinct.setdefault(tuple(node.limits.tolist()), node.limits)
            cached = list(distinct.values())
            self.sim._node_limits_cache[key] = cached
        return cached

    def unfit(self, op: _Op) -> str | None:
        """Why no online node of one of the operation's trees can ever fit one job of a pending task (the live
        service's rule, ``pooltree.alerts.unschedulable_task``; the first such tree), or None when some node of
        each can."""
        controller = op.controller
        if controller is None or op.state != "running" or controller.pending_allocation_count == 0:
            return None
        for tree in op.regular_trees:
            reason = self._unfit_in(op, tree)
            if reason is not None:
                return reason
        return None

    def _unfit_in(self, op: _Op, tree: str) -> str | None:
        """`unfit` in one of the operation's trees."""
        assert op.controller is not None
        online = self.sim._online_counts.get(tree)
        if online is None:
            online = sum(1 for node in self.sim.nodes if node.alive and node.tree == tree)
            self.sim._online_counts[tree] = online
        if online < self.sim.safe_online_node_count:
            return None
        filter_text = str(getattr(op.spec.spec, "scheduling_tag_filter", None) or "")
        limits = self.online_limits(tree, filter_text)
        tasks = op.controller.pending_task_resources()
        found = unschedulable_task(tasks, limits) if limits else next(iter(tasks.items()), None)
        if found is None:
            return None
        name, needed = found
        where = f'tree "{tree}"' + (f" matching {filter_text!r}" if filter_text else "")
        if not limits:
            return f"No online node can satisfy the resource demand: no node of {where} is online"
        largest = np.max(np.vstack(limits), axis=0)
        short = [RESOURCES[i] for i in range(RESOURCE_COUNT) if needed[i] > largest[i] + 1e-9]
        return (
            f"No online node can satisfy the resource demand: a job of task {name!r} needs "
            f"{_resources_text(needed)}; the largest node of {where} has {_resources_text(largest)} "
            f"(short of {', '.join(short) if short else 'a combination of resources'})"
        )

    def check_fit(self, op: _Op) -> None:
        """If no node can fit the operation, check again after the live service's timeout and fail it then."""
        if op.unfit_check_due or self.unfit(op) is None:
            return
        op.unfit_check_due = True
        self.sim._push(
            self.sim.now + self.sim.unschedulable_timeout, OPERATION_EVENT, op.index, 2, ("unfit", op)
        )

    def unfit_timeout(self, op: _Op) -> None:
        op.unfit_check_due = False
        reason = self.unfit(op)
        if reason is None:
            return
        op.error = reason
        self.finish_operation(op, "failed")

    def lifetime_end(self, op: _Op) -> None:
        if op.state in ("running", "pending"):
            self.finish_operation(op, "completed")

    def finish_operation(self, op: _Op, state: str) -> None:
        if op.tentative_trees:
            self.sim.tentative.finish(op, state)
        tree = self.sim.trees[op.tree]
        leftover = tree.core.unregister_operation(op.spec.id, self.sim.now, state=state)
        tree.changed = True
        op.state = state
        op.finish_time = self.sim.now
        self.sim._drop_pending(tree, op.spec.id)
        self.sim.active_ops -= 1
        self.end_jobs(op, op.tree, leftover, state)
        for name in op.other_trees:  # it leaves its other trees too, with its jobs there
            other = self.sim.trees[name]
            leftover = other.core.unregister_operation(op.spec.id, self.sim.now, state=state)
            other.changed = True
            self.sim._drop_pending(other, op.spec.id)
            self.end_jobs(op, name, leftover, state)
        if op.error is not None:
            self.sim._emit(
                {
                    "event": "operation_error",
                    "time": self.sim.now,
                    "operation_id": op.spec.id,
                    "error": op.error,
                }
            )

    def end_jobs(self, op: _Op, tree: str, leftover: list[Allocation], state: str) -> None:
        """The jobs an ended operation still had in ``tree`` (its core's ``leftover``) end with it."""
        for allocation in leftover:
            self.sim._emit(
                {
                    "event": "allocation_finished" if state == "completed" else "allocation_aborted",
                    "time": self.sim.now,
                    "allocation_id": allocation.id,
                    "operation_id": op.spec.id,
                    "node": allocation.node_address,
                    "state": "completed" if state == "completed" else "aborted",
                    "reason": f"operation_{state}",
                    "preemptor_operation_id": None,
                    "tree": tree,
                }
            )
            job = self.sim.jobs.get(allocation.id)
            if job is not None:
                self.sim.job_model.drop_job(job, "aborted" if state != "completed" else "completed")
                if job.node.alive:
                    self.sim._wake(job.node)


def _resources_text(vector: Vector) -> str:
    """``cpu=32, memory=64.0 GiB`` (non-zero resources)."""
    parts = []
    for i, name in enumerate(RESOURCES):
        value = float(vector[i])
        if value:
            parts.append(f"{name}={format_size(value)}" if i == MEMORY else f"{name}={value:g}")
    return ", ".join(parts) or "nothing"
