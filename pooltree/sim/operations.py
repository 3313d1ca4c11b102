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
from pooltree.strategy.single_tree import choose_tree

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

    def arrive(self, op: _Op) -> None:
        self.sim.arrivals_left -= 1
        spec = op.spec
        op.controller = self.controller(op)
        trees = spec.spec.pool_trees_or(self.sim.scenario.snapshot.default_pool_tree)
        if len(trees) > 1:  # schedule_in_single_tree (the scenario allows several trees only with it)
            try:
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
            except PooltreeError as error:
                self.fail_on_arrival(op, error)
                return
        try:
            tentative = self.sim.tentative.trees_for(op)  # spec tentative_pool_trees (`tentative.py`)
        except PooltreeError as error:
            self.fail_on_arrival(op, error)
            return
        tree = self.sim.trees[op.tree]
        op.pool = spec.spec.pool_for_tree(op.tree, spec.user)
        self.sim._emit(
            {
                "event": "operation_submitted",
                "time": self.sim.now,
                "operation_id": spec.id,
                "pool": op.pool,
                "tree": op.tree,
            }
        )
        try:
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
        op.state = state
        if spec.below_fair_share_since is not None:
            tree.core.set_below_fair_share_since(spec.id, spec.below_fair_share_since)
        if state == "running":
            op.start_time = self.sim.now
            self.sim.job_model.place_running(op, tree)
            self.sim._add_pending(tree, op)
            self.check_fit(op)
        if tentative:
            self.sim.tentative.attach(op, tentative)
        if spec.lifetime is not None:
            self.sim._push(self.sim.now + spec.lifetime, OPERATION_EVENT, op.index, 1, ("lifetime", op))

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
        """Why no online node of the operation's tree can ever fit one job of a pending task (the live service's
        rule, ``pooltree.alerts.unschedulable_task``), or None when some node can."""
        controller = op.controller
        if controller is None or op.state != "running" or controller.pending_allocation_count == 0:
            return None
        online = self.sim._online_counts.get(op.tree)
        if online is None:
            online = sum(1 for node in self.sim.nodes if node.alive and node.tree == op.tree)
            self.sim._online_counts[op.tree] = online
        if online < self.sim.safe_online_node_count:
            return None
        filter_text = str(getattr(op.spec.spec, "scheduling_tag_filter", None) or "")
        limits = self.online_limits(op.tree, filter_text)
        tasks = controller.pending_task_resources()
        found = unschedulable_task(tasks, limits) if limits else next(iter(tasks.items()), None)
        if found is None:
            return None
        name, needed = found
        where = f'tree "{op.tree}"' + (f" matching {filter_text!r}" if filter_text else "")
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
                    "tree": op.tree,
                }
            )
            job = self.sim.jobs.get(allocation.id)
            if job is not None:
                self.sim.job_model.drop_job(job, "aborted" if state != "completed" else "completed")
                if job.node.alive:
                    self.sim._wake(job.node)
        if op.error is not None:
            self.sim._emit(
                {
                    "event": "operation_error",
                    "time": self.sim.now,
                    "operation_id": op.spec.id,
                    "error": op.error,
                }
            )


def _resources_text(vector: Vector) -> str:
    """``cpu=32, memory=64.0 GiB`` (non-zero resources)."""
    parts = []
    for i, name in enumerate(RESOURCES):
        value = float(vector[i])
        if value:
            parts.append(f"{name}={format_size(value)}" if i == MEMORY else f"{name}={value:g}")
    return ", ".join(parts) or "nothing"
