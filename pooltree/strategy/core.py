"""`SchedulerCore`: the one object the simulator and the live service drive for a pool tree.

It holds the pool tree runtime (``pooltree.tree.PoolTree``: pools, count limits, pending queues), the operation
controllers, the exec nodes and fair-share state, and the strategy (`TreeScheduler`). Data flows one way per update:
operations and usage → fair-share input → fair-share update → `SchedulingTree` → heartbeats → events.
The fair-share update is injected (``fair_share``), by default ``pooltree.fairshare.update_fair_share``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from pooltree.config.full_host_preemption import full_host_preemption_config
from pooltree.config.ssd_preemption import ssd_preemption_config
from pooltree.errors import PooltreeError
from pooltree.phases import PhaseTimes
from pooltree.resources import GPU, Vector, same_vector, zeros
from pooltree.strategy.best_allocation import BestAllocationShares, operation_tag_filter
from pooltree.strategy.elements import StarvationState
from pooltree.strategy.gpu_policy_inputs import gpu_policy_config, update_plan
from pooltree.strategy.heartbeat_skip import heartbeat_is_noop, skip_heartbeat
from pooltree.strategy.input_resources import InputResources
from pooltree.strategy.kept import KeptState
from pooltree.strategy.model import (
    Allocation,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
)
from pooltree.strategy.packing import packing_config
from pooltree.strategy.reconnection import total_resource_limits_stable
from pooltree.strategy.scheduler import OperationController, TreeScheduler
from pooltree.strategy.segment_inputs import (
    DefaultSegmentPending,
    registered_operation,
    segment_nodes,
    segment_operations,
    segments_config,
    several_trees_error,
)
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.time_limit_watch import TimeLimits
from pooltree.strategy.tree_checks import TreeChecks
from pooltree.strategy.update_steps import (
    FairShareFunction,
    UpdateComputed,
    UpdateRead,
    compute_update,
    finish_update,
    publish_update,
    read_update,
    update_is_current,
)
from pooltree.tree.delta import RuntimeTree

_ALLOCATION_END_EVENTS = frozenset({"allocation_finished", "allocation_aborted", "allocation_failed"})
"""Strategy events after which an operation's controller may report completion."""


class SchedulerCore:
    """Scheduler of one pool tree: register operations, update fair share, process node heartbeats, emit events."""

    def __init__(
        self,
        pool_tree: RuntimeTree,
        *,
        fair_share: FairShareFunction | None = None,
        event_sink: Callable[[dict[str, Any]], None] | None = None,
        phase_times: PhaseTimes | None = None,
    ):
        self.pool_tree = pool_tree
        self.phase_times = phase_times if phase_times is not None else PhaseTimes()
        """Timers of the phases of the update and of heartbeats (off unless given a clock; `pooltree.phases`)."""
        self.config = StrategyConfig.from_options(pool_tree.config, f"pool_trees.{pool_tree.name}.config")
        self._fair_share = fair_share
        self._event_sink = event_sink
        self.events: list[dict[str, Any]] = []
        self.controllers: dict[str, OperationController] = {}
        self.node_tags: dict[str, frozenset[str]] = {}
        self.node_limits: dict[str, Vector] = {}
        self._total_resources: Vector | None = None
        self._nodes_view: dict[str, tuple[frozenset[str], Vector]] | None = None
        self.last_result: Any = None
        self.connection_time: float | None = None
        """When the live scheduler connected (`reconnection.py`: ``node_reconnection_timeout``); None: never."""
        self.best_allocation = BestAllocationShares()
        """Operations' memory limits from their best allocation share (`best_allocation.py`)."""
        self._best_allocation_used = 0
        """The ``best_allocation.revision`` of the limits the last update was given."""
        self.kept = KeptState.new()
        """What the last fair-share period returned for the next (`kept.py`): the projection, the previous input and
        build, the previous update's state."""
        self._registration_order: dict[str, int] = {}
        self._registrations = 0
        self._may_have_completed: set[str] = set()
        """Operations registered, or with an allocation ended, since the last update: only these can have
        become completed (a controller completes when its last allocation ends), so only these are checked."""
        self.strategy = TreeScheduler(
            SchedulingTree(zeros(), [], self.config, name=pool_tree.name), event_sink=self._emit
        )
        self.input_resources = InputResources(self.controllers, self.strategy)
        """Each operation's (usage, needed) for the fair-share input and which moved since the last input."""
        self.time_limits = TimeLimits(pool_tree, self.strategy, self.controllers)
        """The operations whose ``time_limit`` or ``job_time_limit`` can be due (`enforce_time_limits`)."""
        self.checks = TreeChecks(pool_tree, self.controllers, self._registration_order)
        """The tree's operation checks (job resource limits, necessary resources, limiting ancestors)."""
        self._segments_source: tuple[Any, Any] | None = None
        """(tree config, its parsed ``scheduling_segments``) last configured from: the config is read again only when
        it changes (`_configure_from_tree_config`)."""
        self._segments_initial_gpu: dict[str, float] = {}
        """Operation → GPUs per allocation when it first asked for allocations (`segment_inputs`)."""
        self.default_pending = DefaultSegmentPending(self.strategy.state.changes)
        """What a node of the default segment can start at most, for `heartbeat_is_noop` (`segment_inputs`)."""
        self._unfinished: float | None = None
        """The time of the last fair-share update while its end (`finish_update`) has not run."""
        self._speculating: dict[str, OperationController] = {}
        """Operations whose controllers may request speculative copies of slow jobs (`launch_speculative_jobs`)."""
        self._update_number = 0
        """Fair-share updates read so far (`read_update`): an update computed apart is published only if no other
        update read after it."""
        self._configure_from_tree_config()

    @property
    def fair_share_state(self) -> Any:
        """The last fair-share update's returned state (``kept.update``; set before the first update to start from
        given integral volumes, as a forecast's fork does)."""
        return self.kept.update

    @fair_share_state.setter
    def fair_share_state(self, state: Any) -> None:
        self.kept = dataclasses.replace(self.kept, update=state)

    # ------------------------------------------------------------------ events

    def _emit(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind in _ALLOCATION_END_EVENTS:
            operation_id = event.get("operation_id")
            if operation_id in self._registration_order:
                self._may_have_completed.add(operation_id)
        event.setdefault("tree", self.pool_tree.name)
        self.events.append(event)
        if self._event_sink is not None:
            self._event_sink(event)

    def drain_events(self) -> list[dict[str, Any]]:
        """Events since the last call (operation and allocation events, in order)."""
        events, self.events = self.events, []
        return events

    # ------------------------------------------------------------------ nodes

    def add_node(self, address: str, resource_limits: Vector, tags: Iterable[str] = ()) -> None:
        """Register an exec node (its limits count towards the tree's total resources)."""
        self.node_limits[address] = np.asarray(resource_limits, dtype=float)
        self.node_tags[address] = frozenset(tags)
        self._total_resources = None
        self._nodes_view = None
        self.strategy.add_node(address, resource_limits, tags)

    def remove_node(self, address: str, now: float) -> list[Allocation]:
        """Forget a node; its allocations are reported aborted to their controllers."""
        # The node leaves first, so that a gang incarnation switch set off by one of its jobs does not restart
        # the node's other jobs on it (they are lost too and go back to pending).
        node = self.strategy.nodes.pop(address, None)
        lost = []
        if node is not None:
            for allocation_id in list(node.allocations):
                allocation = self.strategy.finish_allocation(
                    FinishedAllocation(allocation_id, "aborted", abort_reason="node_offline"), now
                )
                if allocation is not None:
                    lost.append(allocation)
        self.strategy.drop_queued_preemptions(address)
        self.node_limits.pop(address, None)
        self.node_tags.pop(address, None)
        self._total_resources = None
        self._nodes_view = None
        return lost

    @property
    def total_resources(self) -> Vector:
        """The sum of the nodes' resource limits, kept until a node is added, removed or changes its limits."""
        if self._total_resources is None:
            total = zeros()
            for limits in self.node_limits.values():
                total = total + limits
            total.setflags(write=False)
            self._total_resources = total
        return self._total_resources

    # ------------------------------------------------------------------ operations

    def register_operation(
        self,
        operation_id: str,
        controller: OperationController,
        *,
        user: str,
        operation_type: str = "map",
        pool: str | None = None,
        weight: float | None = None,
        resource_limits: Any = None,
        spec: Any = None,
        now: float = 0.0,
    ) -> str:
        """Admit an operation into the tree (count limits apply) and attach its controller; returns its state."""
        self.phase_times.count("register_operation")
        op = self.pool_tree.register_operation(
            operation_id,
            user=user,
            operation_type=operation_type,
            pool=pool,
            weight=weight,
            resource_limits=resource_limits,
            spec=spec,
            now=now,
        )
        self.controllers[operation_id] = controller
        self._registrations += 1
        self._registration_order[operation_id] = self._registrations
        self._may_have_completed.add(operation_id)
        self.time_limits.add(operation_id)
        self.strategy.register_operation(operation_id, controller)
        self._watch_input(operation_id, controller)
        self._init_segment(operation_id, controller)
        self.checks.check_materialized(operation_id, controller)
        state = "running" if op.running else "pending"
        self._emit(
            {"event": "operation_started", "time": now, "operation_id": operation_id, "pool": op.pool.name}
        )
        self._emit(
            {"event": f"operation_{state}", "time": now, "operation_id": operation_id, "pool": op.pool.name}
        )
        return state

    def unregister_operation(
        self, operation_id: str, now: float, *, state: str = "completed"
    ) -> list[Allocation]:
        """Remove a finished operation; returns allocations still on nodes (to abort there). Activates pending ones."""
        self.phase_times.count("unregister_operation")
        if operation_id not in self.controllers:
            raise PooltreeError(f"operation {operation_id} is not registered in tree {self.pool_tree.name}")
        running = self.strategy.unregister_operation(operation_id)
        self.strategy.full_host.forget(operation_id)
        self.controllers.pop(operation_id)
        self._unwatch_input(operation_id)
        self.time_limits.forget(operation_id)
        self.checks.forget(operation_id)
        self._registration_order.pop(operation_id, None)
        self._may_have_completed.discard(operation_id)
        activated = self.pool_tree.unregister_operation(operation_id)
        self._emit({"event": f"operation_{state}", "time": now, "operation_id": operation_id})
        for other in activated:
            self._emit({"event": "operation_running", "time": now, "operation_id": other})
        return running

    def _watch_input(self, operation_id: str, controller: OperationController) -> None:
        """A controller attached: the next input and the default segment's pending view read the operation anew
        (its pending work moves reach both through the strategy's change log, which its registration watches)."""
        self.input_resources.attached(operation_id)
        self.default_pending.changed()
        if controller.speculation is not None:
            self._speculating[operation_id] = controller

    def _unwatch_input(self, operation_id: str) -> None:
        """A controller left (the strategy's unregistration wrote the operation into the change log: the next input
        reads it anew)."""
        self.default_pending.changed()
        self._speculating.pop(operation_id, None)

    # ------------------------------------------------------------------ fair share and heartbeats

    def update_fair_share(self, now: float, *, in_parts: bool = False) -> Any:
        """Run the fair-share update on current usage and demand and publish it to the strategy.

        Operations whose controllers report completion are unregistered first (event ``operation_completed``).
        ``in_parts``: the update returns once its snapshot is published, leaving its end (the changed operations'
        preemptible lists, then the segments) to `finish_update`, which the caller may run in parts: the live
        service does, in short holds of its lock, so that heartbeats are served meanwhile. Run to its end with no
        heartbeat between, it leaves the state an update run whole leaves.

        The same three steps a caller may run apart (`update_steps.py`): `read_update`, `compute_update` (which
        the live service runs without its lock) and `publish_update`.
        """
        computed = compute_update(self.read_update(now), self.phase_times)
        if not self.publish_update(computed, in_parts=in_parts):
            raise PooltreeError(
                f"the fair-share update of tree {self.pool_tree.name} was overtaken while computed"
            )
        return computed.result

    def read_update(self, now: float) -> UpdateRead:
        """The first step of an update: the period's input read (`update_steps.read_update`)."""
        return read_update(self, now)

    def update_is_current(self, update: UpdateRead) -> bool:
        """Whether the core stands where ``update``'s read left it (`update_steps.update_is_current`)."""
        return update_is_current(self, update)

    def publish_update(self, computed: UpdateComputed, *, in_parts: bool = False) -> bool:
        """The last step of an update: the snapshot published, False if stale (`update_steps.publish_update`)."""
        return publish_update(self, computed, in_parts=in_parts)

    @property
    def update_finished(self) -> bool:
        """Whether the last fair-share update ran to its end (`finish_update`)."""
        return self._unfinished is None

    def finish_update(self, limit: int | None = None) -> bool:
        """The end of the last update, at most ``limit`` operations' lists (`update_steps.finish_update`)."""
        return finish_update(self, limit)

    def refresh_best_allocation(self, now: float) -> bool:
        """Compute the best allocation shares of the operations that are new or due at ``now``; whether the limits
        they leave differ from those the last update was given (the simulator then does not skip the update)."""
        self.best_allocation.update(
            now,
            float(self.pool_tree.config.best_allocation_share_update_period),
            total_resource_limits_stable(self.connection_time, self.config.node_reconnection_timeout, now),
            self.controllers.keys(),
            self._demand,
            lambda operation_id: operation_tag_filter(self.pool_tree, operation_id),
            self.nodes_view,
        )
        return self.best_allocation.revision != self._best_allocation_used

    def _demand(self, operation_id: str) -> Vector | None:
        """An operation's demand (usage + needed resources), None when it reports none."""
        found = self.input_resources.resources(operation_id)
        return None if found is None else np.asarray(found[0], dtype=float) + found[1]

    def _configure_from_tree_config(self) -> None:
        """Configure the strategy's parts from the tree config (segments, GPU policy, packing, scheduling tags,
        allocations on the fair-share bound) when the config object changed since the last call."""
        config = self.pool_tree.config
        if self._segments_source is not None and self._segments_source[0] is config:
            return
        parsed = segments_config(config, f"pool_trees.{self.pool_tree.name}.config")
        self._segments_source = (config, parsed)
        self.strategy.segments.configure(parsed)
        self.strategy.gpu_policy.configure(
            gpu_policy_config(config, f"pool_trees.{self.pool_tree.name}.config")
        )
        self.strategy.packing.configure(packing_config(config, f"pool_trees.{self.pool_tree.name}.config"))
        self.strategy.ssd.configure(ssd_preemption_config(config, f"pool_trees.{self.pool_tree.name}.config"))
        self.strategy.full_host.configure(
            full_host_preemption_config(config, f"pool_trees.{self.pool_tree.name}.config")
        )
        extra = getattr(config, "model_extra", None) or {}
        self.strategy.scheduling_tags_enabled = extra.get("enable_scheduling_tags", True) is not False
        self.strategy.set_allocation_on_bound_preemptible(
            extra.get("consider_allocation_on_fair_share_bound_preemptible", False) is True
        )

    def _init_segment(self, operation_id: str, controller: OperationController) -> None:
        """The operation's segment from its registration on; a module-aware one running in several trees fails
        (YTsaurus's ``CheckOperationSchedulingInSeveralTreesAllowed``) unless it is a one-job vanilla operation
        and the tree sets ``allow_single_job_large_gpu_operations_in_multiple_trees``."""
        self._configure_from_tree_config()
        manager = self.strategy.segments
        if not manager.enabled:
            return
        operation = registered_operation(operation_id, controller, self.pool_tree, self._segments_initial_gpu)
        manager.init_operation(operation)
        extra = getattr(self.pool_tree.config, "model_extra", None) or {}
        allow = bool(extra.get("allow_single_job_large_gpu_operations_in_multiple_trees", False))
        segment = manager.state.operations[operation_id].segment
        error = several_trees_error(segment, operation, self.pool_tree.operations.get(operation_id), allow)
        if error is not None:
            self.checks.fail(operation_id, error)

    def update_gpu_scheduling(self, now: float) -> None:
        """After a publish: run the scheduling segments manager when it is due (every ``manage_period``;
        ``strategy/segments.py``), then update the GPU scheduling policy's plan when it is due (every
        ``plan_update_period``; ``strategy/gpu_policy.py``), both on the tree config read once.

        Segments run only while they are on or were on before; the plan only when the tree sets
        ``gpu_scheduling_policy`` to plan. Trees without either are unchanged.
        """
        self._configure_from_tree_config()
        manager = self.strategy.segments
        if (manager.enabled or manager.state.previous_mode != "disabled") and manager.due(now):
            nodes = segment_nodes(self.strategy, manager, now)
            operations = segment_operations(
                self.strategy, self.pool_tree, manager, self._segments_initial_gpu
            )
            manager.update(nodes, operations, float(self.total_resources[GPU]), now, self.controllers)
        if self.strategy.gpu_policy.due(now):
            update_plan(self.strategy, self.pool_tree, now)

    def gpu_policy_view(self) -> dict[str, Any]:
        """The orchid's ``gpu_assignment_plan`` of this tree (mode and policy kind only when it does not plan)."""
        return self.strategy.gpu_policy.view()

    def segments_view(self) -> dict[str, Any]:
        """The orchid's ``scheduling_segments`` of this tree (``{"mode": "disabled"}`` when off)."""
        return self.strategy.segments.view(self.node_tags)

    def unregister_completed(self, now: float) -> list[str]:
        """Unregister the operations whose controllers report completion (in registration order).

        Only operations registered or with an allocation ended since the last call are asked: a controller
        becomes completed when its last allocation ends, so no other operation can have changed its answer.
        """
        candidates, self._may_have_completed = self._may_have_completed, set()
        order = self._registration_order
        done = []
        for operation_id in sorted(candidates, key=order.__getitem__):
            controller = self.controllers.get(operation_id)
            if controller is not None and controller.is_completed:
                self.unregister_operation(operation_id, now)
                done.append(operation_id)
        return done

    @property
    def nodes_view(self) -> dict[str, tuple[frozenset[str], Vector]]:
        """Node address → (tags, limits), the same object until a node is added, removed or changes."""
        if self._nodes_view is None:
            self._nodes_view = {
                address: (self.node_tags[address], limits) for address, limits in self.node_limits.items()
            }
        return self._nodes_view

    def process_heartbeat(self, heartbeat: NodeHeartbeat, now: float) -> HeartbeatResult:
        """Node heartbeat: finished allocations in, allocations to start and to preempt out."""
        if self.phase_times.enabled:
            with self.phase_times.phase("heartbeat"):
                return self._process_heartbeat(heartbeat, now)
        return self._process_heartbeat(heartbeat, now)

    def _process_heartbeat(self, heartbeat: NodeHeartbeat, now: float) -> HeartbeatResult:
        self.sync_node_limits(heartbeat)
        return self.strategy.process_heartbeat(heartbeat, now)

    def sync_node_limits(self, heartbeat: NodeHeartbeat) -> None:
        """The node's limits and tags as its heartbeat reports them (the tree's total resources follow); the
        first step of `process_heartbeat`, also taken alone when a node shard runs the stages (`pooltree.shards`)."""
        if heartbeat.address not in self.node_limits:
            self.add_node(heartbeat.address, heartbeat.resource_limits, heartbeat.tags)
        else:
            limits = np.asarray(heartbeat.resource_limits, dtype=float)
            if not same_vector(limits, self.node_limits[heartbeat.address]):
                self._total_resources = None
                self._nodes_view = None
            tags = frozenset(heartbeat.tags)
            if tags != self.node_tags[heartbeat.address]:
                self._nodes_view = None
            self.node_limits[heartbeat.address] = limits
            self.node_tags[heartbeat.address] = tags

    def adopt_allocation(
        self, operation_id: str, address: str, now: float, *, started: float | None = None
    ) -> Allocation | None:
        """A job already running on ``address`` when a run starts (``TreeScheduler.adopt_allocation``)."""
        return self.strategy.adopt_allocation(operation_id, address, now, started=started)

    def set_below_fair_share_since(self, element_id: str, since: float) -> None:
        """Start an element's starvation clock at ``since`` (a run forked from a live cluster carries it over);
        the next publish that finds the element below its fair share keeps counting from there."""
        self.strategy.starvation.setdefault(element_id, StarvationState()).below_fair_share_since = since

    def on_allocation_finished(self, finished: FinishedAllocation, now: float) -> Allocation | None:
        """An allocation ended outside a heartbeat (e.g. the simulator's job-finish event)."""
        return self.strategy.finish_allocation(finished, now)

    # ------------------------------------------------------------------ simulator hooks (exact heartbeat skipping)

    def heartbeat_is_noop(
        self, address: str, now: float, pending_min_needed: Callable[[], Vector | None]
    ) -> bool:
        """Whether an empty heartbeat provably starts and preempts nothing (`heartbeat_skip.heartbeat_is_noop`)."""
        return heartbeat_is_noop(self, address, now, pending_min_needed)

    def enforce_time_limits(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """Apply ``time_limit`` and ``job_time_limit`` at ``now`` (pooltree/strategy/time_limits.py).

        Allocations running longer than their job's ``job_time_limit`` are stopped (abort reason
        ``job_time_limit_exceeded``, error 1202, delivered in their nodes' next heartbeats). Returns the
        operations running longer than their ``time_limit`` with YTsaurus's error; the caller fails them (the
        live service and the simulator both call this on every fair-share period), after the operations failed
        by the tree's checks (`TreeChecks`). Only the operations that can have something due are visited
        (`TimeLimits`), in registration order.
        """
        return self.time_limits.enforce(now, self.checks.due(now))

    def launch_speculative_jobs(self, now: float) -> list[str]:
        """Operations whose jobs ran past their ``job_speculation_timeout`` request speculative copies
        (`pooltree/controllers/speculative.py`, the per-task cap applies); returns those whose pending jobs grew.
        The live service and the simulator call this every fair-share period, after the time limits."""
        return [
            operation_id
            for operation_id, controller in self._speculating.items()
            if controller.launch_speculative_jobs(now)
        ]

    def attach_controller(self, operation_id: str, controller: OperationController) -> None:
        """Attach the controller of an operation the pool tree already holds (the live service registers
        operations in its pool trees itself); :meth:`detach_controller` undoes it."""
        if operation_id in self.controllers:  # before anything changes: the core stays as it was
            raise PooltreeError(
                f"operation {operation_id} is already registered in tree {self.pool_tree.name}"
            )
        self.controllers[operation_id] = controller
        self.time_limits.add(operation_id)
        self.strategy.register_operation(operation_id, controller)
        self._watch_input(operation_id, controller)
        self._init_segment(operation_id, controller)
        self.checks.check_materialized(operation_id, controller)

    def detach_controller(self, operation_id: str) -> list[Allocation]:
        """Detach an operation's controller; returns its allocations still on nodes (to abort there)."""
        running = self.strategy.unregister_operation(operation_id)
        self.strategy.full_host.forget(operation_id)
        self.controllers.pop(operation_id)
        self._unwatch_input(operation_id)
        self.time_limits.forget(operation_id)
        self.checks.forget(operation_id)
        return running

    def report_usage(self, allocation_id: str, reported: Vector | Sequence[float]) -> bool:
        """A node-reported usage of one allocation; it counts where it exceeds the reserve (see
        ``TreeScheduler.report_usage``). Returns whether the accounted usage changed."""
        return self.strategy.report_usage(allocation_id, reported)

    def nodes_with_queued_preemptions(self) -> list[str]:
        """Nodes whose next heartbeat answer carries stops decided outside their heartbeats (gangs, time limits)."""
        return self.strategy.nodes_with_queued_preemptions()

    def nodes_to_wake(self) -> list[str]:
        """Nodes whose heartbeat may now do what it could not before the last segments or GPU plan update: every
        node when segments moved a node or an operation's module, the nodes with work in the GPU plan. A
        simulator that lets nodes without work sleep wakes these."""
        strategy = self.strategy
        if strategy.segments.enabled and strategy.segments.placements_changed:
            strategy.segments.placements_changed = False
            return sorted(strategy.nodes)
        if strategy.gpu_policy.allocating:
            return [address for address in sorted(strategy.nodes) if strategy.gpu_policy.has_work(address)]
        return []

    def limits_violated(self) -> bool:
        """Whether some pool or operation uses more than its specified resource limits."""
        return self.strategy.limits_violated()

    def republish(self, now: float) -> None:
        """Publish the last fair-share result again at ``now`` so starvation clocks advance.

        Identical to :meth:`update_fair_share` when no allocation started or finished, no operation or node was
        added or removed since the last update and no pool has integral guarantees (the fair-share function then
        depends on ``now`` only through integral volumes); a simulator uses it to skip recomputing shares.
        """
        if self.last_result is None:
            self.update_fair_share(now)
            return
        self.finish_update()
        with self.phase_times.phase("republish"):
            self.strategy.publish(self.strategy.tree, now)
            self.update_gpu_scheduling(now)

    def can_start_more(self, address: str) -> bool:
        """Whether the node's free resources reach ``min_spare_allocation_resources_on_node``."""
        node = self.strategy.nodes.get(address)
        return node is not None and self.strategy.can_start_more(node)

    def operation_is_published(self, operation_id: str) -> bool:
        """Whether the published tree holds the operation: heartbeats start allocations only of such operations."""
        return self.strategy.is_published(operation_id)

    def has_starving_operations(self) -> bool:
        """Whether the published tree has operations with a preemption priority (targets of preemptive stages)."""
        return self.strategy.has_preemption_targets()

    def skip_heartbeat(self, address: str, now: float) -> None:
        """Account a heartbeat that `heartbeat_is_noop` proved empty (`heartbeat_skip.skip_heartbeat`)."""
        return skip_heartbeat(self, address, now)

    def operation_view(self, operation_id: str) -> dict[str, Any]:
        """Strategy orchid fields of one operation plus its controller's progress."""
        view = self.strategy.element_view(operation_id)
        controller = self.controllers.get(operation_id)
        if controller is not None and (progress := controller.progress()) is not None:
            view["progress"] = progress
        return view
