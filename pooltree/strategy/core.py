"""`SchedulerCore`: the one object the simulator and the live service drive for a pool tree.

It holds the pool tree runtime (``pooltree.tree.PoolTree``: pools, count limits, pending queues), the operation
controllers, the exec nodes and fair-share state, and the strategy (`TreeScheduler`). Data flows one way per update:
operations and usage → fair-share input → fair-share update → `SchedulingTree` → heartbeats → events.
The fair-share update is injected (``fair_share``), by default ``pooltree.fairshare.update_fair_share``.
"""

from __future__ import annotations

import dataclasses
import heapq
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from pooltree.config.full_host_preemption import full_host_preemption_config
from pooltree.config.ssd_preemption import ssd_preemption_config
from pooltree.errors import PooltreeError
from pooltree.fairshare.model import UpdateState
from pooltree.phases import PhaseTimes
from pooltree.resources import GPU, Vector, zeros
from pooltree.strategy.build import BuildCache, scheduling_tree_from_runtime
from pooltree.strategy.elements import StarvationState
from pooltree.strategy.fifo_limit import clear_statuses, fifo_unschedulable
from pooltree.strategy.full_host_preemption import observe_operations
from pooltree.strategy.gpu_policy_inputs import gpu_policy_config, update_plan
from pooltree.strategy.guarantee_priority import high_priority_operations
from pooltree.strategy.model import (
    AbortReason,
    Allocation,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
)
from pooltree.strategy.necessary_resources import necessary_resources_violation, tree_necessary_resources
from pooltree.strategy.operation_checks import (
    LimitingAncestorWatch,
    job_resource_bounds,
    job_resource_limits_violation,
    limiting_ancestor,
    limiting_ancestor_check_enabled,
    limiting_ancestor_error,
    specified_limits,
)
from pooltree.strategy.packing import packing_config
from pooltree.strategy.reconnection import nodes_for_tag_filters
from pooltree.strategy.scheduler import OperationController, TreeScheduler
from pooltree.strategy.segment_inputs import (
    DefaultSegmentPending,
    has_incompatible_allocations,
    has_starving_operations_for,
    registered_operation,
    segment_nodes,
    segment_operations,
    segments_config,
    several_trees_error,
)
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.ssd_preemption import refresh_ssd_operations, ssd_operations
from pooltree.strategy.starvation_tolerance import apply_absolute_starvation_tolerance
from pooltree.strategy.time_limits import (
    job_time_limit,
    job_time_limit_error,
    operation_time_limit,
    operation_time_limit_error,
)
from pooltree.strategy.watch import unwatch_pending, watch_pending
from pooltree.tree import FairShareInputCache, build_fair_share_input
from pooltree.tree.delta import PeriodDelta, period_delta

_ALLOCATION_END_EVENTS = frozenset({"allocation_finished", "allocation_aborted", "allocation_failed"})
"""Strategy events after which an operation's controller may report completion."""

_UNSET = object()

_DEADLINE_SLACK = 1e-3
"""Seconds before its ``start + time_limit`` an operation joins the checked ones (float rounding; early is harmless:
the check itself is exact)."""


class _LimitWatch:
    """The operations `SchedulerCore.enforce_time_limits` must look at; every other one has nothing that can be due.

    ``order``: operation → serial (registration order). ``deadlines``: a heap of ``(start + time_limit, serial,
    operation)``, moved to ``expired`` once reached (an operation past its limit stays there until it leaves);
    ``job_limited``: operations with a ``job_time_limit``; ``always``: operations whose spec is a plain map (it
    may change in place) or that the pool tree did not hold when attached. Entries of operations that left are
    dropped from the sets at once and from the heap when they surface (their serial no longer matches).
    """

    __slots__ = ("always", "deadlines", "expired", "job_limited", "order", "serial")

    def __init__(self) -> None:
        self.order: dict[str, int] = {}
        self.serial = 0
        self.deadlines: list[tuple[float, int, str]] = []
        self.expired: set[str] = set()
        self.job_limited: set[str] = set()
        self.always: set[str] = set()

    def forget(self, operation_id: str) -> None:
        if self.order.pop(operation_id, None) is not None:
            self.expired.discard(operation_id)
            self.job_limited.discard(operation_id)
            self.always.discard(operation_id)


FairShareFunction = Callable[..., Any]
"""``(root_pool, total_resources, settings, now, state) -> FairShareResult`` (see pooltree.fairshare)."""


def _default_fair_share() -> FairShareFunction:
    try:
        module = importlib.import_module("pooltree.fairshare")
        return module.update_fair_share
    except (ImportError, AttributeError) as error:
        raise PooltreeError(
            "pooltree.fairshare.update_fair_share is not available; pass fair_share= to SchedulerCore"
        ) from error


class SchedulerCore:
    """Scheduler of one pool tree: register operations, update fair share, process node heartbeats, emit events."""

    def __init__(
        self,
        pool_tree: Any,
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
        self.fair_share_state: Any = None
        self.last_result: Any = None
        self.connection_time: float | None = None
        """When the live scheduler connected (`reconnection.py`: ``node_reconnection_timeout``); None: never."""
        self._build_cache = BuildCache()
        self._input_cache = FairShareInputCache()
        self._period_revision: int | None = None
        """The tree's revision at the previous period (what the next period's delta starts from)."""
        self._registration_order: dict[str, int] = {}
        self._registrations = 0
        self._time_limit_cache: dict[str, tuple[Any, float | None, dict[str, Any] | None]] = {}
        self._resource_cache: dict[str, tuple[Any, int, Any, Any, tuple[Vector, Vector]]] = {}
        """Operation id → (runtime, its ``usage_serial``, the controller's ``pending_revision`` or, for a
        controller without one, its needed resources as floats, the controller, the (usage, needed) handed to
        the fair-share input) of the last input build."""
        self._input_dirty: set[str] = set()
        """Operations whose (usage, needed) may have moved since the last fair-share input was built: the strategy
        adds those whose usage moves (``usage_watch``), the controllers those whose pending work moves
        (`watch_pending`), and the core those whose controller it attaches or detaches. The input re-reads only
        these (and ``_input_polled``), not every running operation."""
        self._input_polled: set[str] = set()
        """Operations whose controllers cannot notify (no ``pending_watchers``): re-read for every input."""
        self._limits = _LimitWatch()
        self._may_have_completed: set[str] = set()
        """Operations registered, or with an allocation ended, since the last update: only these can have
        become completed (a controller completes when its last allocation ends), so only these are checked."""
        self.strategy = TreeScheduler(
            SchedulingTree(zeros(), [], self.config, name=pool_tree.name), event_sink=self._emit
        )
        self.strategy.usage_watch = self._input_dirty
        self._segments_source: tuple[Any, Any] | None = None
        """(tree config, its parsed ``scheduling_segments``) last configured from: the config is read again only when
        it changes (`_configure_from_tree_config`)."""
        self._segments_initial_gpu: dict[str, float] = {}
        """Operation → GPUs per allocation when it first asked for allocations (`segment_inputs`)."""
        self._default_pending = DefaultSegmentPending()
        """What a node of the default segment can start at most, for `heartbeat_is_noop` (`segment_inputs`)."""
        self._configure_from_tree_config()
        self._failures: dict[str, dict[str, Any]] = {}
        """Operations this tree fails at the next ``enforce_time_limits`` (job resource limits restrictions)."""
        self._ancestors = LimitingAncestorWatch()
        self._job_bounds: tuple[Any, tuple[Any, Any]] | None = None
        self._limited_cache: tuple[tuple[Any, ...], dict[str, Any]] | None = None

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
        self._watch_limits(operation_id)
        self.strategy.register_operation(operation_id, controller)
        self._watch_input(operation_id, controller)
        self._init_segment(operation_id, controller)
        self._check_materialized(operation_id, controller)
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
        self._unwatch_input(operation_id, self.controllers.pop(operation_id))
        self._limits.forget(operation_id)
        self._forget_checks(operation_id)
        self._resource_cache.pop(operation_id, None)
        self._registration_order.pop(operation_id, None)
        self._may_have_completed.discard(operation_id)
        activated = self.pool_tree.unregister_operation(operation_id)
        self._emit({"event": f"operation_{state}", "time": now, "operation_id": operation_id})
        for other in activated:
            self._emit({"event": "operation_running", "time": now, "operation_id": other})
        return running

    def _watch_input(self, operation_id: str, controller: OperationController) -> None:
        """From now on the controller tells the input when its pending work moves (or is polled, if it cannot)."""
        self._input_dirty.add(operation_id)
        if not watch_pending(controller, self._input_dirty, operation_id):
            self._input_polled.add(operation_id)
        self._default_pending.watch(operation_id, controller)

    def _unwatch_input(self, operation_id: str, controller: OperationController) -> None:
        """The controller leaves: it no longer notifies, and the next input reads the operation anew."""
        unwatch_pending(controller, self._input_dirty, operation_id)
        self._input_polled.discard(operation_id)
        self._input_dirty.add(operation_id)
        self._default_pending.unwatch(operation_id, controller)

    def _resources(self, operation_id: str) -> tuple[Vector, Vector] | None:
        """(usage, needed) of one operation for the fair-share input: the same tuple object as last time while
        both are unchanged (the input then skips rewriting the operation's model element).

        Usage is unchanged while the runtime's ``usage_serial`` is (the strategy moves it with every change);
        needed resources while the controller's ``pending_revision`` is (`OperationControllerBase` moves it
        whenever its pending work is set anew). A controller without a revision may change its pending work
        without the strategy hearing of it: its needed resources are read every time and compared as floats.
        """
        cached = self._resource_cache.get(operation_id)
        if cached is not None:
            runtime, serial, revision, controller, found = cached
            if (
                (runtime is None or runtime.usage_serial == serial)
                and self.controllers.get(operation_id) is controller
                and self.strategy.operations.get(operation_id) is runtime
            ):
                if type(revision) is int:
                    if controller.pending_revision == revision:
                        return found
                else:
                    needed = controller.needed_resources
                    values = (
                        needed.tolist()
                        if type(needed) is np.ndarray
                        else np.asarray(needed, dtype=float).tolist()
                    )
                    if values == revision:
                        return found
        controller = self.controllers.get(operation_id)
        if controller is None:
            return None
        runtime = self.strategy.operations.get(operation_id)
        revision = getattr(controller, "pending_revision", None)
        needed = controller.needed_resources
        if type(revision) is not int:
            revision = (
                needed.tolist() if type(needed) is np.ndarray else np.asarray(needed, dtype=float).tolist()
            )
        serial = -1 if runtime is None else runtime.usage_serial
        found = (self.strategy.operation_usage(operation_id), np.asarray(needed, dtype=float))
        self._resource_cache[operation_id] = (runtime, serial, revision, controller, found)
        return found

    # ------------------------------------------------------------------ fair share and heartbeats

    def update_fair_share(self, now: float) -> Any:
        """Run the fair-share update on current usage and demand and publish it to the strategy.

        Operations whose controllers report completion are unregistered first (event ``operation_completed``).
        """
        times = self.phase_times
        with times.phase("update"):
            with times.phase("unregister"):
                self.unregister_completed(now)
            with times.phase("input"):
                delta = self._period_delta()
                root, settings = self._fair_share_input(delta, now)
            function = self._fair_share or _default_fair_share()
            total = self.total_resources
            with times.phase("fair_share"):
                result = self._run_fair_share(function, root, total, settings, now)
                if self.config.enable_absolute_fair_share_starvation_tolerance:
                    apply_absolute_starvation_tolerance(result, self._min_needed(), total)
                left_out = self._fifo_unschedulable(result)
                self.strategy.high_priority = (
                    high_priority_operations(result, self.controllers)
                    if self.config.enable_guarantee_priority_scheduling
                    else frozenset()
                )
            self.fair_share_state = getattr(result, "state", None)
            self.last_result = result
            with times.phase("build"):
                tree = scheduling_tree_from_runtime(
                    self.pool_tree, result, total, self.config, cache=self._build_cache, delta=delta
                )
            with times.phase("publish"):
                previous = self.strategy.fifo_unschedulable
                self.strategy.fifo_unschedulable = left_out
                self.strategy.publish(tree, now)
                if left_out != previous:
                    self.strategy.rekey_operations(left_out ^ previous)
            with times.phase("segments"):
                self.update_segments(now)
                self.update_gpu_policy(now)
                if self.strategy.ssd.enabled:  # `ssd_preemption.py`
                    refresh_ssd_operations(self.strategy.ssd, ssd_operations(self.pool_tree))
                if self.strategy.full_host.enabled:  # `full_host_preemption.py`
                    observe_operations(self.strategy.full_host, self.pool_tree, self.controllers)
        return result

    def _fifo_unschedulable(self, result: Any) -> frozenset[str]:
        """Operations of FIFO pools the tree's ``max_schedulable_element_count_in_fifo_pool`` leaves out of this
        update (their statuses cleared in ``result``); empty without the option (`fifo_limit.py`)."""
        limit = self.config.max_schedulable_element_count_in_fifo_pool
        if limit is None:
            return frozenset()
        left_out = fifo_unschedulable(self.pool_tree, result, limit)
        clear_statuses(result, left_out)
        return left_out

    def _min_needed(self) -> dict[str, Vector]:
        """Operation id → its controller's aggregated minimum needed allocation resources."""
        return {op_id: controller.min_needed_resources for op_id, controller in self.controllers.items()}

    def _run_fair_share(
        self, function: FairShareFunction, root: Any, total: Vector, settings: Any, now: float
    ) -> Any:
        """The update of this period's input, given the previous update's state and the operations the input
        wrote since (the period's delta of inputs: the update reads only their rows)."""
        state = self.fair_share_state
        written = self._input_cache.take_written()
        if isinstance(state, UpdateState) and written is not None:
            state = dataclasses.replace(state, written=written)
        try:
            return function(root, total, settings, now, state)
        except BaseException:
            self._input_cache.forget_written()  # the next update reads every row
            raise

    def _period_delta(self) -> PeriodDelta:
        """This period's changes of the tree since the previous period (`pooltree.tree.delta`), with the operations
        whose usage or pending work was reported moved: found once, read by the input and the build."""
        # the controllers and the strategy hold this very set: it is emptied, never replaced
        dirty = self._input_dirty
        changed = dirty.union(self._input_polled) if self._input_polled else set(dirty)
        dirty.clear()
        delta = period_delta(self.pool_tree, self._period_revision, changed)
        self._period_revision = delta.revision
        return delta

    def _fair_share_input(self, delta: PeriodDelta, now: float) -> tuple[Any, Any]:
        """The fair-share update's input tree and settings, read from the runtime tree with the period's delta."""
        nodes = nodes_for_tag_filters(
            self.nodes_view, self.connection_time, self.config.node_reconnection_timeout, now
        )
        try:
            return build_fair_share_input(
                self.pool_tree,
                self._resources,
                nodes=nodes,
                cache=self._input_cache,
                delta=delta,
            )
        except BaseException:
            if delta.resources is not None:
                self._input_dirty.update(delta.resources)  # not taken in: the next input reads them
            raise

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
            self._failures[operation_id] = error

    def update_segments(self, now: float) -> None:
        """Run the scheduling segments manager when it is due (every ``manage_period``; ``strategy/segments.py``).

        Nothing runs while segments are off and were off before, so trees without them are unchanged.
        """
        self._configure_from_tree_config()
        manager = self.strategy.segments
        if not manager.enabled and manager.state.previous_mode == "disabled":
            return
        if not manager.due(now):
            return
        nodes = segment_nodes(self.strategy, manager, now)
        operations = segment_operations(self.strategy, self.pool_tree, manager, self._segments_initial_gpu)
        manager.update(nodes, operations, float(self.total_resources[GPU]), now, self.controllers)

    def update_gpu_policy(self, now: float) -> None:
        """Update the GPU scheduling policy's plan when it is due (every ``plan_update_period``;
        ``strategy/gpu_policy.py``). Nothing runs unless the tree sets ``gpu_scheduling_policy`` to plan."""
        self._configure_from_tree_config()
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
            if controller is not None and getattr(controller, "is_completed", False):
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
        if heartbeat.address not in self.node_limits:
            self.add_node(heartbeat.address, heartbeat.resource_limits, heartbeat.tags)
        else:
            limits = np.asarray(heartbeat.resource_limits, dtype=float)
            if not np.array_equal(limits, self.node_limits[heartbeat.address]):
                self._total_resources = None
                self._nodes_view = None
            tags = frozenset(heartbeat.tags)
            if tags != self.node_tags[heartbeat.address]:
                self._nodes_view = None
            self.node_limits[heartbeat.address] = limits
            self.node_tags[heartbeat.address] = tags
        return self.strategy.process_heartbeat(heartbeat, now)

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
        """Whether a heartbeat of ``address`` at ``now`` that reports nothing provably starts and preempts nothing.

        Sufficient conditions, stage by stage (yt-semantics §e.1): the node fits its limits (no overcommit abort);
        it runs no allocation of a graceful-mode operation (graceful pass); it cannot start more, or no operation's
        min needed resources fit its free resources (``pending_min_needed`` returns the componentwise minimum over
        operations with pending allocations, or ``None`` when there are none; a lower bound is enough); and, if the
        preemptive stages are due, no operation is starving and no element violates its resource limits. A
        simulator may then call :meth:`skip_heartbeat` instead of :meth:`process_heartbeat`.
        """
        strategy = self.strategy
        node = strategy.nodes.get(address)
        if node is None or strategy.has_queued_preemptions(address):
            return False
        if strategy.gpu_policy.allocating:  # a heartbeat only carries out the plan
            return not strategy.gpu_policy.has_work(address)
        # Python floats of the 5-vectors: the same float operations as the numpy forms, without their overhead
        limits = node.resource_limits.tolist()
        usage = node.usage.tolist()
        for used, limit in zip(usage, limits, strict=True):
            if used > limit + 1e-9:
                return False
        if strategy.runs_graceful_allocations(node):
            return False
        candidates = (
            strategy.segments.module_aware_candidates(address, node.tags)
            if strategy.segments.enabled
            else None
        )
        if candidates is not None:  # a node of a module-aware segment runs only the operations bound there
            if strategy.can_start_more(node) and self._any_fits(candidates, limits, usage):
                return False
        elif strategy.can_start_more(node):
            needed = pending_min_needed()
            if needed is not None and strategy.segments.enabled:  # module-aware operations never run here
                needed = self._default_pending.minimum(self.controllers, strategy.segments)
            if needed is not None and all(
                n <= limit - used + 1e-9
                for n, limit, used in zip(needed.tolist(), limits, usage, strict=True)
            ):
                return False
        last = node.last_preemptive_scheduling_time
        due = last is None or now > last + self.config.preemptive_scheduling_backoff
        return not (
            due
            and (
                (
                    has_starving_operations_for(strategy, node)
                    if strategy.segments.enabled
                    else self.has_starving_operations()
                )
                or self.limits_violated()
                or has_incompatible_allocations(strategy, node)
            )
        )

    def enforce_time_limits(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """Apply ``time_limit`` and ``job_time_limit`` at ``now`` (pooltree/strategy/time_limits.py).

        Allocations running longer than their job's ``job_time_limit`` are stopped (abort reason
        ``job_time_limit_exceeded``, error 1202, delivered in their nodes' next heartbeats). Returns the
        operations running longer than their ``time_limit`` with YTsaurus's error; the caller fails them (the
        live service and the simulator both call this on every fair-share period).

        Only the operations that can have something due are looked at (`_LimitWatch`): those whose
        ``start + time_limit`` has been reached (a deadline heap), those with a ``job_time_limit`` and those
        whose spec is a plain map (it may change in place). They are visited in registration order, the order
        of a walk over every operation, with the same checks, so the stops and failures and their order are
        the same as that walk's; every other operation has no limit that can be due.
        """
        checked = self._operation_checks(now)
        watch = self._limits
        if len(watch.order) != len(self.controllers):
            self._rewatch_limits()  # controllers changed behind attach_controller / detach_controller
        deadlines = watch.deadlines
        order = watch.order
        while deadlines and deadlines[0][0] <= now + _DEADLINE_SLACK:
            _deadline, serial, operation_id = heapq.heappop(deadlines)
            if order.get(operation_id) == serial:
                watch.expired.add(operation_id)  # from now on checked every period (the check is exact)
        candidates = (watch.expired | watch.job_limited | watch.always) - {op for op, _ in checked}
        failed: list[tuple[str, dict[str, Any]]] = checked
        for operation_id in sorted(candidates, key=order.__getitem__):
            op = self.pool_tree.operations.get(operation_id)
            if op is None:
                continue
            limit, job_limits = self._time_limits_of(operation_id, op.spec)
            if limit is not None and now - op.start_time > limit:
                failed.append((operation_id, operation_time_limit_error(limit, operation_id)))
                continue
            if job_limits is None:
                continue  # no user job of the spec has a job_time_limit
            runtime = self.strategy.operations.get(operation_id)
            if runtime is None or op.spec is None:
                continue
            for allocation in list(runtime.lists):
                job_limit = job_limits.get(allocation.task, _UNSET)
                if job_limit is _UNSET:
                    job_limit = job_limits[allocation.task] = job_time_limit(op.spec, allocation.task)
                if job_limit is None or now - allocation.start_time <= job_limit or allocation.preempted:
                    continue
                self.strategy.stop_allocation(
                    allocation,
                    AbortReason.JOB_TIME_LIMIT_EXCEEDED,
                    f"Job time limit exceeded: the job ran {now - allocation.start_time:g}s, its job_time_limit "
                    f"is {job_limit:g}s",
                    now,
                    error=job_time_limit_error(job_limit),
                )
        return failed

    # ------------------------------------------------------------------ operation checks (operation_checks.py)

    def _bounds(self) -> tuple[Any, Any]:
        config = self.pool_tree.config
        if self._job_bounds is None or self._job_bounds[0] is not config:
            self._job_bounds = (
                config,
                job_resource_bounds(config, f"pool_trees.{self.pool_tree.name}.config"),
            )
        return self._job_bounds[1]

    def _check_materialized(self, operation_id: str, controller: OperationController) -> None:
        """The tree's ``min_job_resource_limits`` / ``max_job_resource_limits`` against each task's per-job needs,
        then its ``necessary_resources_for_operation`` against the operation's minimum needed resources."""
        necessary = tree_necessary_resources(
            self.pool_tree.config, f"pool_trees.{self.pool_tree.name}.config"
        )
        if necessary:
            error = necessary_resources_violation(
                self.pool_tree.name, operation_id, necessary, controller.min_needed_resources
            )
            if error is not None:
                self._failures[operation_id] = error
                return
        bounds = self._bounds()
        tasks = getattr(controller, "pending_task_resources", None)
        if (bounds[0] is None and bounds[1] is None) or tasks is None:
            return
        error = job_resource_limits_violation(self.pool_tree.name, operation_id, tasks(), bounds)
        if error is not None:
            self._failures[operation_id] = error

    def _limited_pools(self) -> dict[str, Any]:
        """Pools with specified ``resource_limits``, read again only when the pools themselves change (the
        tree's ``structure_revision``: created, removed, a config swap), not every period."""
        key = (self.pool_tree, getattr(self.pool_tree, "structure_revision", None), self.pool_tree.config)
        if self._limited_cache is None or self._limited_cache[0] != key or key[1] is None:
            pools = self.pool_tree.pools.items()
            found = {name: limits for name, pool in pools if (limits := specified_limits(pool)) is not None}
            self._limited_cache = (key, found)
        return self._limited_cache[1]

    def _forget_checks(self, operation_id: str) -> None:
        self._failures.pop(operation_id, None)
        self._ancestors.forget(operation_id)

    def _operation_checks(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """Operations failed by the tree's checks at ``now``: job resource limits restrictions found at
        registration, then operations with a limiting ancestor past the safe timeout (registration order)."""
        failed = [(op, error) for op, error in self._failures.items() if op in self.controllers]
        self._failures.clear()
        limited = self._limited_pools()
        if not limited:
            self._ancestors.activated.clear()
            self._ancestors.first_found.clear()
            return failed
        done = {op for op, _ in failed}
        config = self.pool_tree.config
        order = self._registration_order
        for operation_id in sorted(self.controllers, key=lambda op: (order.get(op, 0), op)):
            op = self.pool_tree.operations.get(operation_id)
            if operation_id in done or op is None or not op.running:
                continue
            if not limiting_ancestor_check_enabled(config, op.spec):
                self._ancestors.forget(operation_id)
                continue
            controller = self.controllers[operation_id]
            needed = controller.min_needed_resources if controller.pending_allocation_count > 0 else None
            chain = []
            pool = op.pool
            while pool is not None:
                if pool.name in limited:
                    chain.append((pool.name, limited[pool.name]))
                pool = pool.parent
            found = limiting_ancestor(chain, needed) if needed is not None and chain else None
            if self._ancestors.observe(operation_id, found is not None, now) and found is not None:
                name, violated = found
                failed.append((operation_id, limiting_ancestor_error(name, violated, limited[name], needed)))
        return failed

    def _watch_limits(self, operation_id: str) -> None:
        """Sort a newly registered (or attached) operation into `_LimitWatch` by the limits its spec has."""
        watch = self._limits
        watch.forget(operation_id)
        watch.serial += 1
        watch.order[operation_id] = watch.serial
        op = self.pool_tree.operations.get(operation_id)
        if op is None or isinstance(op.spec, Mapping):
            watch.always.add(operation_id)  # read anew every period, as the walk did
            return
        limit, job_limits = self._time_limits_of(operation_id, op.spec)
        if limit is not None:
            heapq.heappush(watch.deadlines, (op.start_time + limit, watch.serial, operation_id))
        if job_limits is not None:
            watch.job_limited.add(operation_id)

    def _rewatch_limits(self) -> None:
        self._limits = _LimitWatch()
        for operation_id in self.controllers:
            self._watch_limits(operation_id)

    def attach_controller(self, operation_id: str, controller: OperationController) -> None:
        """Attach the controller of an operation the pool tree already holds (the live service registers
        operations in its pool trees itself); :meth:`detach_controller` undoes it."""
        previous = self.controllers.get(operation_id)
        self.controllers[operation_id] = controller
        self._watch_limits(operation_id)
        try:
            self.strategy.register_operation(operation_id, controller)
        finally:  # the input follows the controller the core holds
            if previous is not None:
                self._unwatch_input(operation_id, previous)
            self._watch_input(operation_id, controller)
        self._init_segment(operation_id, controller)
        self._check_materialized(operation_id, controller)

    def detach_controller(self, operation_id: str) -> list[Allocation]:
        """Detach an operation's controller; returns its allocations still on nodes (to abort there)."""
        running = self.strategy.unregister_operation(operation_id)
        self.strategy.full_host.forget(operation_id)
        self._unwatch_input(operation_id, self.controllers.pop(operation_id))
        self._limits.forget(operation_id)
        self._forget_checks(operation_id)
        self._resource_cache.pop(operation_id, None)  # it holds the controller and the runtime
        return running

    def _time_limits_of(self, operation_id: str, spec: Any) -> tuple[float | None, dict[str, Any] | None]:
        """The spec's ``time_limit`` and a memo of its per-task ``job_time_limit`` (``None``: no user job has one).

        Kept per operation while its spec is the same frozen object (every period asks again); a spec given as
        a plain map may change in place and is read anew each time.
        """
        cached = self._time_limit_cache.get(operation_id)
        if cached is not None and cached[0] is spec:
            return cached[1], cached[2]
        limit = operation_time_limit(spec)
        if spec is None:
            names: list[str] = []
        elif isinstance(spec, Mapping):
            names = [
                *(spec.get("tasks") or {}),
                *(n for n in ("mapper", "reducer") if spec.get(n) is not None),
            ]
        else:
            user_jobs = getattr(spec, "user_jobs", None)
            names = list(user_jobs()) if user_jobs is not None else []
        has_job_limits = any(job_time_limit(spec, name) is not None for name in names)
        job_limits: dict[str, Any] | None = {} if has_job_limits else None
        if spec is not None and not isinstance(spec, Mapping):
            if len(self._time_limit_cache) > 2 * len(self.controllers) + 64:
                self._time_limit_cache = {
                    key: value for key, value in self._time_limit_cache.items() if key in self.controllers
                }
            self._time_limit_cache[operation_id] = (spec, limit, job_limits)
        return limit, job_limits

    def report_usage(self, allocation_id: str, reported: Vector) -> bool:
        """A node-reported usage of one allocation; it counts where it exceeds the reserve (see
        ``TreeScheduler.report_usage``). Returns whether the accounted usage changed."""
        return self.strategy.report_usage(allocation_id, reported)

    def nodes_with_queued_preemptions(self) -> list[str]:
        """Nodes whose next heartbeat answer carries stops decided outside their heartbeats (gangs, time limits)."""
        return self.strategy.nodes_with_queued_preemptions()

    def _any_fits(self, operation_ids: list[str], limits: list[float], usage: list[float]) -> bool:
        """Whether one of the operations has a pending allocation whose min needed resources fit the free ones."""
        for operation_id in operation_ids:
            controller = self.controllers.get(operation_id)
            if controller is None or controller.pending_allocation_count <= 0:
                continue
            needed = controller.min_needed_resources.tolist()
            if all(n <= limit - used + 1e-9 for n, limit, used in zip(needed, limits, usage, strict=True)):
                return True
        return False

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
        with self.phase_times.phase("republish"):
            self.strategy.publish(self.strategy.tree, now)
            self.update_segments(now)
            self.update_gpu_policy(now)

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
        """Account a heartbeat that :meth:`heartbeat_is_noop` proved empty: only the preemptive backoff moves."""
        node = self.strategy.nodes[address]
        last = node.last_preemptive_scheduling_time
        if last is None or now > last + self.config.preemptive_scheduling_backoff:
            node.last_preemptive_scheduling_time = now

    def operation_view(self, operation_id: str) -> dict[str, Any]:
        """Strategy orchid fields of one operation plus its controller's progress."""
        view = self.strategy.element_view(operation_id)
        controller = self.controllers.get(operation_id)
        if controller is not None and hasattr(controller, "progress"):
            view["progress"] = controller.progress()
        return view
