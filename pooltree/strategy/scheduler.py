"""The per-tree scheduling strategy: starvation, preemptible lists and the node heartbeat stages.

`TreeScheduler` owns the mutable state of one pool tree between fair-share updates: per-element current usage,
starvation timestamps, each operation's allocation lists, and the exec nodes. A fair-share update publishes a new
`SchedulingTree` (:meth:`TreeScheduler.publish`); node heartbeats (:meth:`TreeScheduler.process_heartbeat`) then run
the stages of yt-semantics §e: graceful preemption, regular scheduling, preemptive scheduling (aggressive, then
normal) and node overcommit.

`TreeScheduler` is composed of one object per concern, each made in `__init__` and handed the one
`StrategyState` (`state.py`) they share: `BestLeaf` (`best_leaf.py`: the per-pool heaps choosing the best leaf),
`RegularStage` (`stages.py`: the regular stage and the bookkeeping of a start), `PreemptiveStages`
(`preemption.py`: the stages that stop allocations), `GangRestarts` (`gang.py`: gang incarnation switches) and
`SnapshotPublisher` (`publish.py`, with `ChangedPublisher` of `changes.py`: a fair-share update). This module
keeps the operations, the heartbeat's order of stages, allocation accounting from node reports, and the orchid
views.

Hot path: choosing the best leaf operation uses one lazy min-heap of children per pool, keyed by satisfaction
(or FIFO index); equal keys go to the child served least recently, then tree order. Starting an allocation only
re-keys the operation and its ancestors; operations deactivated on one node are popped aside and restored after
the heartbeat. Nothing recomputes the whole tree per allocation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.resources import RESOURCE_COUNT, RESOURCES, Vector
from pooltree.strategy.best_leaf import BestLeaf
from pooltree.strategy.element_fields import (
    ElementFields,
    OperationFields,
    fields_view,
    lowest_starving_ancestors,
)
from pooltree.strategy.elements import (
    EventSink,
    OperationController,
    OperationRuntime,
    StarvationState,
    _Element,
    _sub_np,
    usage_above_reserve,
)
from pooltree.strategy.full_host_preemption import FullHostPreemption
from pooltree.strategy.gang import GangRestarts
from pooltree.strategy.gpu_policy import GpuPolicy
from pooltree.strategy.gpu_policy_inputs import carry_out_plan
from pooltree.strategy.guarantee_priority import run_regular_stages
from pooltree.strategy.heartbeat_deadline import HeartbeatDeadline
from pooltree.strategy.model import (
    AbortReason,
    Allocation,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    PreemptionRecord,
    StarvationStatus,
)
from pooltree.strategy.packing import Packing, run_packing_fallback
from pooltree.strategy.preemption import PreemptiveStages, violated_limits
from pooltree.strategy.priorities import configure_lists
from pooltree.strategy.publish import SnapshotPublisher
from pooltree.strategy.segment_inputs import preempt_incompatible
from pooltree.strategy.segments import SegmentsManager
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.ssd_preemption import SsdPreemption
from pooltree.strategy.stages import RegularStage
from pooltree.strategy.state import StrategyState
from pooltree.strategy.tentative import TentativeGate
from pooltree.strategy.watch import unwatch_pending, watch_pending

__all__ = [
    "EventSink",
    "OperationController",
    "OperationRuntime",
    "StarvationState",
    "TreeScheduler",
    "usage_above_reserve",
]

_NO_STARVATION = StarvationState()
"""What ``element_fields`` reads of an element without starvation bookkeeping (read, never changed)."""


class TreeScheduler:
    """Scheduling strategy of one pool tree (pure: time is passed in; deterministic)."""

    def __init__(self, tree: SchedulingTree, *, event_sink: EventSink | None = None):
        state = StrategyState(tree, event_sink)
        self.state = state
        """What the parts below share (`state.py`)."""
        self.nodes: dict[str, ExecNode] = state.nodes
        """The state's nodes (the same dict)."""
        self.operations: dict[str, OperationRuntime] = state.operations
        """The state's operation runtimes (the same dict)."""
        self.allocations: dict[str, Allocation] = state.allocations
        """The state's running allocations (the same dict)."""
        self.starvation: dict[str, StarvationState] = state.starvation
        """The state's starvation clocks (the same dict)."""
        self.segments = SegmentsManager()
        """Scheduling segments (off unless the tree sets ``scheduling_segments``); `SchedulerCore` updates them."""
        self.gpu_policy = GpuPolicy()
        """The GPU scheduling policy (``policy_kind: gpu``; off by default): when it allocates, a heartbeat only
        carries out its plan (`carry_out_plan`); `SchedulerCore` configures it and updates the plan."""
        self.tentative = TentativeGate()
        """Operations running tentatively in this tree (`tentative.py`; the live service fills it)."""
        self.ssd = SsdPreemption()
        """The tree's ``ssd_priority_preemption`` (`ssd_preemption.py`; `SchedulerCore` configures it)."""
        self.full_host = FullHostPreemption()
        """The tree's ``default_gpu_full_host_preemption`` (`full_host_preemption.py`; `SchedulerCore` configures it)."""
        self.packing = Packing()
        """The tree's ``packing`` (`packing.py`; `SchedulerCore` configures it)."""
        self.heaps = BestLeaf(state)
        """The best-leaf heaps (`best_leaf.py`)."""
        self.regular = RegularStage(state, self.heaps, self.packing, self.segments, self.ssd, self.tentative)
        """The regular stage (`stages.py`)."""
        self.preemption = PreemptiveStages(state, self.heaps, self.regular, self.ssd, self.full_host)
        """Graceful preemption, the preemptive stages and node overcommit (`preemption.py`)."""
        self.gang = GangRestarts(state, self.heaps)
        """Gang operations' incarnation switches (`gang.py`)."""
        self.publisher = SnapshotPublisher(state, self.heaps)
        """Fair-share updates reaching the strategy (`publish.py`, `changes.py`)."""
        self.clock: Callable[[], float] | None = None
        """Wall clock for ``schedule_allocations_timeout`` (the live service sets it; None: no bound,
        `heartbeat_deadline.py`)."""
        self.allocation_on_bound_preemptible = False
        """The tree's ``consider_allocation_on_fair_share_bound_preemptible`` (`set_allocation_on_bound_preemptible`)."""
        self._limited_cache: tuple[object, dict[str, _Element], list[_Element]] | None = None
        """(skeleton, element map, the map's elements with limits): see `_limited_elements`."""
        self.publish(tree, now=None)

    # ------------------------------------------------------------------ settings and views of the state

    @property
    def tree(self) -> SchedulingTree:
        """The published tree."""
        return self.state.tree

    @property
    def config(self) -> StrategyConfig:
        """The published tree's strategy options."""
        return self.state.config

    @property
    def last_update_time(self) -> float | None:
        """When the last publish with a time took place."""
        return self.state.last_update_time

    @property
    def high_priority(self) -> frozenset[str]:
        """Operations scheduled in the ``regular_high_priority`` stage (`guarantee_priority.py`; `SchedulerCore`)."""
        return self.regular.high_priority

    @high_priority.setter
    def high_priority(self, operations: frozenset[str]) -> None:
        self.regular.high_priority = operations

    @property
    def fifo_unschedulable(self) -> frozenset[str]:
        """Operations left out by ``max_schedulable_element_count_in_fifo_pool`` (`fifo_limit.py`; `SchedulerCore`)."""
        return self.heaps.fifo_unschedulable

    @fifo_unschedulable.setter
    def fifo_unschedulable(self, operations: frozenset[str]) -> None:
        self.heaps.fifo_unschedulable = operations

    @property
    def scheduling_tags_enabled(self) -> bool:
        """The tree's ``enable_scheduling_tags`` (`SchedulerCore` sets it)."""
        return self.regular.scheduling_tags_enabled

    @scheduling_tags_enabled.setter
    def scheduling_tags_enabled(self, enabled: bool) -> None:
        self.regular.scheduling_tags_enabled = enabled

    def publish(self, tree: SchedulingTree, now: float | None, *, lists_later: bool = False) -> None:
        """Take a new snapshot: statuses, starvation, preemption priorities, preemptible lists and heaps.
        ``lists_later``: the changed operations' preemptible lists are left to `configure_lists` (the rest of the
        snapshot reads none of them), so that a caller can configure them in parts."""
        self.publisher.publish(tree, now)
        if not lists_later:
            self.publisher.changes.configure_lists()

    def configure_lists(self, limit: int | None = None) -> bool:
        """Configure the preemptible lists the last publish left (at most ``limit`` operations); whether none is
        left (`changes.ChangedPublisher.configure_lists`)."""
        return self.publisher.changes.configure_lists(limit)

    # ------------------------------------------------------------------ operations

    def register_operation(self, operation_id: str, controller: OperationController) -> None:
        """Attach a controller; the operation becomes schedulable once a published tree contains it."""
        if operation_id in self.operations:
            raise PooltreeError(f"operation {operation_id} is already registered in tree {self.tree.name}")
        runtime = OperationRuntime(operation_id, controller)
        runtime.lists.inclusive = self.allocation_on_bound_preemptible
        self.operations[operation_id] = runtime
        changes = self.state.changes
        changes.usage.add(operation_id)
        if not watch_pending(controller, changes.pending, operation_id):
            changes.polled.add(operation_id)
        element = self.state.elements.get(operation_id)
        if element is not None and element.is_op:
            element.op = runtime
            element.usage = runtime.usage
            configure_lists(self.state, element)
            self.heaps.refresh_leaf(element)

    def unregister_operation(self, operation_id: str) -> list[Allocation]:
        """Forget an operation; returns its still-running allocations so the caller can abort them on their nodes."""
        runtime = self.operations.pop(operation_id, None)
        if runtime is None:
            raise PooltreeError(f"operation {operation_id} is not registered in tree {self.tree.name}")
        changes = self.state.changes
        changes.usage.add(operation_id)
        self.packing.forget(operation_id)
        unwatch_pending(runtime.controller, changes.pending, operation_id)
        changes.drop_pending(operation_id)
        element = self.state.elements.get(operation_id)
        running = [a for a in self.allocations.values() if a.operation_id == operation_id]
        for allocation in running:
            if not allocation.preempted:
                self.state.release(allocation, runtime, element)
                node = self.nodes.get(allocation.node_address)
                if node is not None:
                    _sub_np(node.usage, allocation.resources)
            self.allocations.pop(allocation.id, None)
            node = self.nodes.get(allocation.node_address)
            if node is not None:
                node.allocations.pop(allocation.id, None)
        if element is not None:
            element.op = None
            element.usage = [0.0] * RESOURCE_COUNT
            self.heaps.refresh_leaf(element)
        return running

    def rekey_operations(self, operation_ids: Iterable[str]) -> None:
        """Re-evaluate the activity and satisfaction of these published operations at once (a rule outside the
        published specs changed for them, e.g. `fifo_limit.py`'s set) and re-key their ancestors."""
        for operation_id in sorted(operation_ids):
            element = self.state.elements.get(operation_id)
            if element is not None and element.is_op:
                self.heaps.refresh_leaf(element)

    def set_allocation_on_bound_preemptible(self, enabled: bool) -> None:
        """Switch the tree's ``consider_allocation_on_fair_share_bound_preemptible``: every operation's lists are
        rebalanced with the new rule at once (`PreemptibleLists.inclusive`)."""
        if enabled == self.allocation_on_bound_preemptible:
            return
        self.allocation_on_bound_preemptible = enabled
        for operation_id, runtime in self.operations.items():
            runtime.lists.inclusive = enabled
            runtime.lists.rebalance()
            self.state.changes.usage.add(operation_id)

    def operation_usage(self, operation_id: str) -> Vector:
        runtime = self.operations.get(operation_id)
        if runtime is None:
            return np.zeros(RESOURCE_COUNT)
        # Usage is kept by adding and subtracting allocations' amounts; once a node report has resized one, the
        # sums of byte-sized floats may leave a rounding residue of about -1e-6 when everything is released.
        return np.maximum(np.array(runtime.usage), 0.0)

    # ------------------------------------------------------------------ heartbeat

    def process_heartbeat(self, heartbeat: NodeHeartbeat, now: float) -> HeartbeatResult:
        """Run one node heartbeat through every stage and return what to start and what to preempt."""
        node = self._sync_node(heartbeat, now)
        result = HeartbeatResult(address=node.address)
        state = self.state
        state.deadline = HeartbeatDeadline(self.clock, state.config.schedule_allocations_timeout)
        self.take_queued(node, result)
        if self.gpu_policy.allocating:
            carry_out_plan(self, node, now, result)
            return result
        preemption = self.preemption
        preemption.graceful(node, now, result)
        self.packing.rejected.clear()
        run_regular_stages(self.regular, node, now, result)
        if self.packing.rejected and not result.allocations_to_start:
            run_packing_fallback(self.regular, node, now, result)
        last = node.last_preemptive_scheduling_time
        if last is None or now > last + state.config.preemptive_scheduling_backoff:
            node.last_preemptive_scheduling_time = now
            result.preemptive_scheduling_performed = True
            preempt_incompatible(self.segments, preemption, node, now, result)
            preemption.preemptive(node, now, result)
        preemption.overcommit(node, now, result)
        result.timeout_expired = state.deadline.expired
        return result

    def take_queued(self, node: ExecNode, result: HeartbeatResult) -> None:
        """Move what was decided for the node outside its heartbeats (stops, job restarts) into ``result``."""
        queued = self.state.queued_preemptions.pop(node.address, None)
        if queued is not None:
            result.allocations_to_preempt.extend(
                record for record in queued.allocations_to_preempt if record.allocation_id in node.allocations
            )
            result.allocations_to_start.extend(
                allocation
                for allocation in queued.allocations_to_start
                if node.allocations.get(allocation.id) is allocation
            )

    def sync_node(self, heartbeat: NodeHeartbeat, now: float) -> ExecNode:
        """The node as its heartbeat reports it (limits, tags, finished and running allocations), without the
        stages: the first step of `process_heartbeat` (node shards run the stages elsewhere, `pooltree.shards`)."""
        return self._sync_node(heartbeat, now)

    def _sync_node(self, heartbeat: NodeHeartbeat, now: float) -> ExecNode:
        node = self.nodes.get(heartbeat.address)
        if node is None:
            node = ExecNode(heartbeat.address, heartbeat.resource_limits, heartbeat.tags)
            self.nodes[heartbeat.address] = node
        else:
            node.resource_limits = np.asarray(heartbeat.resource_limits, dtype=float)
            node.tags = frozenset(heartbeat.tags)
        for finished in heartbeat.finished:
            self.finish_allocation(finished, now)
        if heartbeat.running is not None:
            reported = heartbeat.running
            queued = self.state.queued_preemptions.get(node.address)
            # jobs restarted outside this node's heartbeats start with this answer: the node cannot report them yet
            undelivered = {a.id for a in queued.allocations_to_start} if queued is not None else set()
            for allocation in list(node.allocations.values()):
                if allocation.id in undelivered:
                    continue
                if allocation.id not in reported:
                    self.finish_allocation(FinishedAllocation(allocation.id, "aborted"), now)
                    continue
                usage = np.asarray(reported[allocation.id], dtype=float)
                if not allocation.preempted and not np.array_equal(usage, allocation.resources):
                    self._change_usage(allocation, usage)
        return node

    def add_node(self, address: str, resource_limits: Vector, tags: Iterable[str] = ()) -> ExecNode:
        """Register a node before its first heartbeat (the simulator and tests use this)."""
        node = ExecNode(address, resource_limits, frozenset(tags))
        self.nodes[address] = node
        return node

    def adopt_allocation(
        self, operation_id: str, address: str, now: float, *, started: float | None = None
    ) -> Allocation | None:
        """Place the operation's next pending job on node ``address`` outside a heartbeat: a job that already runs
        there when a run starts (a forecast forked from a live cluster). Its usage is charged to the node, the
        operation and its pools as a start in a heartbeat charges it; ``started`` is when it really started.
        Returns None when the controller has no pending job that fits the node's free resources."""
        runtime = self.operations.get(operation_id)
        node = self.nodes.get(address)
        if runtime is None or node is None:
            return None
        allocation = runtime.controller.schedule_allocation(node, node.resource_limits - node.usage, now)
        if allocation is None:
            return None
        allocation.node_address = address
        allocation.start_time = now if started is None else started
        node.allocations[allocation.id] = allocation
        node.usage += allocation.resources
        self.allocations[allocation.id] = allocation
        element = self.state.elements.get(operation_id)
        self.state.account(runtime, element, allocation.amounts, _add_list)
        runtime.lists_settled = False
        runtime.lists.add(allocation)
        if element is not None and element.op is runtime:
            self.heaps.refresh_leaf(element)
        self.state.emit(
            {
                "event": "allocation_started",
                "time": now,
                "allocation_id": allocation.id,
                "operation_id": operation_id,
                "node": address,
                "stage": "adopted",
                "resources": {name: float(allocation.resources[i]) for i, name in enumerate(RESOURCES)},
            }
        )
        return allocation

    def finish_allocation(self, finished: FinishedAllocation, now: float) -> Allocation | None:
        """A node reported an allocation ended: release its usage (unless preempted already) and tell its controller."""
        allocation = self.allocations.pop(finished.allocation_id, None)
        if allocation is None:
            return None
        node = self.nodes.get(allocation.node_address)
        runtime = self.operations.get(allocation.operation_id)
        element = self.state.elements.get(allocation.operation_id)
        if allocation.preemption is None:  # not preempted (`Allocation.preempted`, read without the property)
            if node is not None:
                node.usage -= allocation.resources  # in place (`_sub_np`, a call less a finish)
            if runtime is not None:
                self.state.release(allocation, runtime, element)
        if node is not None:
            node.allocations.pop(allocation.id, None)
        if runtime is not None and not allocation.restarted:
            controller = runtime.controller
            controller.on_allocation_finished(allocation, finished, now)
            if controller.take_incarnation_switch():
                self.gang.switch_incarnation(runtime, allocation, now)
            speculation = controller.speculation
            if speculation is not None and speculation.losers:  # a competitor completed the job first
                for loser_id, reason, explanation in speculation.take_losers():
                    loser = self.allocations.get(loser_id)
                    if loser is not None:
                        self.stop_allocation(loser, AbortReason(reason), explanation, now)
            if element is not None and element.op is runtime:
                self.heaps.refresh_leaf(element)
        sink = self.state.event_sink  # called as `StrategyState.emit` calls it, one call less a finish
        if sink is not None:
            preemption = allocation.preemption
            sink(
                {
                    "event": "allocation_finished"
                    if finished.state == "completed"
                    else "allocation_" + finished.state,
                    "time": now,
                    "allocation_id": allocation.id,
                    "operation_id": allocation.operation_id,
                    "node": allocation.node_address,
                    "state": finished.state,
                    "reason": preemption.reason.value if preemption else None,
                    "preemptor_operation_id": preemption.preemptor_operation_id if preemption else None,
                }
            )
        return allocation

    def _change_usage(self, allocation: Allocation, usage: Vector) -> None:
        node = self.nodes[allocation.node_address]
        delta = usage - allocation.resources
        node.usage += delta
        runtime = self.operations.get(allocation.operation_id)
        if runtime is None:
            allocation.resources = usage
            return
        element = self.state.elements.get(allocation.operation_id)
        self.state.account(runtime, element, delta.tolist(), _add_list)
        runtime.lists_settled = False
        runtime.lists.update_usage(allocation, usage)
        if element is not None and element.op is runtime:
            self.heaps.refresh_leaf(element)

    def report_usage(self, allocation_id: str, reported: Vector | Sequence[float]) -> bool:
        """A node reports what an allocation uses: it counts when above the reserve (``usage_above_reserve``).

        The new usage goes into the operation's and its pools' usage (fair share, starvation), the node's usage
        (fit of new allocations, overcommit aborts at the next heartbeat) and the preemptible lists. Returns
        whether the accounted usage changed.

        Every running job's report comes here each heartbeat where its node measures memory (the node agent does):
        the common report, nothing above the reserve of an allocation never raised above it, is answered from
        Python floats (`_within_reserve`) before numpy's vectors are made; any other report, a NaN on either
        side included, takes the vectors (`tests/strategy/test_report_usage.py`).
        """
        allocation = self.allocations.get(allocation_id)
        if (
            allocation is None
            or allocation.preemption is not None
            or allocation.node_address not in self.nodes
        ):
            return False  # (``preemption``: `Allocation.preempted` read without the property, every report)
        if _within_reserve(allocation, reported):
            return False
        usage = usage_above_reserve(allocation.reserve, reported)
        if np.array_equal(usage, allocation.resources):
            return False
        self._change_usage(allocation, usage)
        return True

    # -------------------------------------------------------------- views

    def element_view(self, element_id: str) -> dict[str, Any]:
        """Strategy fields of one element for the orchid (starvation, status, preemption counts, reasons)."""
        return fields_view(self.element_fields(element_id))

    def element_fields(self, element_id: str) -> ElementFields:
        """``element_view``'s values, plain (``element_fields.py``): what the read snapshot's capture takes under the
        scheduling lock, the view made of them off it."""
        element = self.state.elements.get(element_id)
        if element is None:
            raise PooltreeError(f"no element {element_id} in tree {self.tree.name}", code=500)
        state = self.starvation.get(element_id, _NO_STARVATION)
        operation = None
        runtime = element.op
        if element.is_op and runtime is not None:
            counts = runtime.lists.counts()
            config = self.config
            operation = OperationFields(
                counts["non_preemptible"],
                counts["aggressively_preemptible"],
                counts["preemptible"],
                runtime.preempted_allocation_count,
                self.publisher.changes.deactivation_reasons(element),
                runtime.preemption_priority,
                element.spec.preemption_mode,
                config.allocation_preemption_timeout,
                config.allocation_graceful_preemption_timeout,
                self._policy_views(element_id),
            )
        lowest, lowest_aggressive = lowest_starving_ancestors(element)
        return ElementFields(
            element.status,
            state.status,
            state.below_fair_share_since,
            state.starving_since,
            lowest,
            lowest_aggressive,
            element.settings,
            tuple(element.usage),
            self.state.total,
            element.fair_share,
            element.blocked,
            operation,
        )

    def _policy_views(self, element_id: str) -> tuple[dict[str, Any], ...]:
        """An operation's fields of the segments, GPU planning and SSD policies; none while all three are off
        (each view is then empty: nothing to overlay, and no three maps made per operation a capture)."""
        segments, gpu_policy, ssd = self.segments, self.gpu_policy, self.ssd
        if not (segments.config.enabled or gpu_policy.config.planning or ssd.config.enable):
            return ()
        return (
            segments.operation_view(element_id),
            gpu_policy.operation_view(element_id),
            ssd.operation_view(element_id),
        )

    def starvation_status(self, element_id: str) -> StarvationStatus:
        return self.starvation.get(element_id, StarvationState()).status

    def element_usage(self, element_id: str) -> Vector:
        return np.array(self.state.elements[element_id].usage)

    # ------------------------------------------------- stops decided outside heartbeats

    def stop_allocation(
        self, allocation: Allocation, reason: AbortReason, explanation: str, now: float, error: Any = None
    ) -> PreemptionRecord | None:
        """Stop a running allocation outside a heartbeat (job time limit): released now, delivered to its node
        in its next heartbeat answer with no timeout."""
        return self.preemption.stop_allocation(allocation, reason, explanation, now, error)

    def nodes_with_queued_preemptions(self) -> list[str]:
        """Nodes whose next heartbeat answer carries stops (or job restarts) decided outside their heartbeats."""
        return [
            address
            for address, queued in self.state.queued_preemptions.items()
            if queued.allocations_to_preempt or queued.allocations_to_start
        ]

    def has_queued_preemptions(self, address: str) -> bool:
        """Whether stops or job restarts wait for the node's next heartbeat (time limits, gang incarnations)."""
        queued = self.state.queued_preemptions.get(address)
        return queued is not None and bool(queued.allocations_to_preempt or queued.allocations_to_start)

    def drop_queued_preemptions(self, address: str) -> None:
        """Forget what was queued for a node that left the cluster."""
        self.state.queued_preemptions.pop(address, None)

    # ------------------------------------------------- queries for callers that skip heartbeats

    def runs_graceful_allocations(self, node: ExecNode) -> bool:
        """Whether the node runs a (not yet preempted) allocation of an operation in graceful preemption mode."""
        for allocation in node.allocations.values():
            if allocation.preempted:
                continue
            element = self.state.elements.get(allocation.operation_id)
            if element is not None and element.spec.preemption_mode == "graceful":
                return True
        return False

    def is_published(self, operation_id: str) -> bool:
        """Whether the published tree has the operation's element (only such operations get allocations)."""
        return operation_id in self.state.elements

    def can_start_more(self, node: ExecNode) -> bool:
        """Whether the node's free resources reach ``min_spare_allocation_resources_on_node``."""
        return self.regular.can_start_more(node)

    def has_preemption_targets(self) -> bool:
        """Whether the published tree has operations with a preemption priority (starving ones)."""
        return any(self.state.ops_by_priority.values())

    def limits_violated(self) -> bool:
        """Whether some pool or operation uses more than its specified resource limits.

        Only the published elements with limits are checked (`_limited_elements`), not every element: a
        simulator asks this on every due noop heartbeat check and after every update."""
        return any(violated_limits(element) is not None for element in self._limited_elements())

    def _limited_elements(self) -> list[_Element]:
        """The published elements with limits (in no particular order), kept while the published structure is the same.

        An element's ``limits`` are set only when `publish` makes or renews it, which happens only for a new
        structure (a new ``skeleton``: `_new_elements`, or `_apply_operation_changes` for a tree made by
        `SchedulingTree.with_operation_changes`); a publish of the same structure keeps every element and its
        limits. So the list is valid while both the skeleton and the element map are the ones it was made
        from. For a tree derived by operation changes from the structure of the list, only the delta's removed
        and added operations are looked at (the other elements keep their objects and limits); otherwise every
        element is scanned once.
        """
        elements = self.state.elements
        skeleton = self.publisher.skeleton
        cached = self._limited_cache
        if cached is not None and cached[0] is skeleton and cached[1] is elements:
            return cached[2]
        limited: list[_Element] | None = None
        delta = self.tree.delta
        if (
            cached is not None
            and delta is not None
            and delta.base is cached[0]
            and skeleton is self.tree.skeleton
        ):
            removed = delta.removed
            limited = []
            for element in cached[2]:
                if element.id in removed:
                    continue
                if elements.get(element.id) is not element:  # not expected: rescan rather than assume
                    limited = None
                    break
                limited.append(element)
            if limited is not None:
                for element_id in delta.added:
                    element = elements.get(element_id)
                    if element is not None and element.limits is not None:
                        limited.append(element)
        if limited is None:
            limited = [element for element in elements.values() if element.limits is not None]
        self._limited_cache = (skeleton, elements, limited)
        return limited


def _within_reserve(allocation: Allocation, reported: Vector | Sequence[float]) -> bool:
    """Whether ``usage_above_reserve(allocation.reserve, reported)`` equals ``allocation.resources`` because the
    allocation's usage is its reserve (never raised: the same vector, ``Allocation.amounts`` its floats) and nothing
    reported is above it: the maximum is then the reserve itself. A NaN on either side fails ``<=`` (numpy's
    maximum would make it NaN, unequal to anything): not within; False is "not shown", never "changed".

    A report equal to the reserve's floats (a tuple: a node reporting a job's usage at its reserve, the measured
    memory below it; ``RunningJobReport.counted_usage``) is within at once: an allocation's amounts hold no NaN,
    and a NaN reported is a float unequal to them."""
    if allocation.resources is not allocation.reserve:
        return False
    if type(reported) is tuple and reported == allocation.amounts:
        return True
    values = reported.tolist() if isinstance(reported, np.ndarray) else reported
    if len(values) != len(allocation.amounts):
        return False
    for value, bound in zip(values, allocation.amounts, strict=True):  # noqa: SIM110 (no generator: every report)
        if not value <= bound:
            return False
    return True
