"""The per-tree scheduling strategy: starvation, preemptible lists and the node heartbeat stages.

`TreeScheduler` owns the mutable state of one pool tree between fair-share updates: per-element current usage,
starvation timestamps, each operation's allocation lists, and the exec nodes. A fair-share update publishes a new
`SchedulingTree` (:meth:`TreeScheduler.publish`); node heartbeats (:meth:`TreeScheduler.process_heartbeat`) then run
the stages of yt-semantics §e: graceful preemption, regular scheduling, preemptive scheduling (aggressive, then
normal) and node overcommit.

Hot path: choosing the best leaf operation uses one lazy min-heap of children per pool, keyed by satisfaction
(or FIFO index); equal keys go to the child served least recently, then tree order. Starting an allocation only re-keys the operation and its ancestors; operations deactivated on
one node are popped aside and restored after the heartbeat. Nothing recomputes the whole tree per allocation.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.fairshare.status import is_below_fair_share
from pooltree.resources import RESOURCE_COUNT, RESOURCES, Vector
from pooltree.strategy.model import (
    PREEMPTION_STATUS_RANK,
    AbortReason,
    Allocation,
    DeactivationReason,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    PreemptionLevel,
    PreemptionPriority,
    PreemptionRecord,
    PreemptionStatus,
    SchedulingStage,
    SchedulingStatus,
    StarvationStatus,
)
from pooltree.strategy.preemptible import PreemptibleLists
from pooltree.strategy.shares import (
    EPSILON,
    INFINITE_SATISFACTION_RATIO,
    blocked_mask,
    fits_floats,
    local_satisfaction_ratio,
)
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.shares import sub_floats as _sub_list
from pooltree.strategy.snapshot import ROOT_ID, EffectiveSettings, ElementSpec, SchedulingTree

_INF = math.inf


def _lists_state(lists: PreemptibleLists) -> tuple[Any, ...]:
    """Class sizes and usage sums of preemptible lists. The three lists are consecutive segments of one
    start-ordered sequence, so equal sizes mean the same split (and statuses); with equal sums, the same state."""
    counts = lists.counts()
    return (
        counts["non_preemptible"],
        counts["aggressively_preemptible"],
        counts["preemptible"],
        lists.usage(0),
        lists.usage(1),
        lists.usage(2),
    )


def _floats(values: Any) -> list[float]:
    """Python floats of a vector (numpy array or sequence): ``tolist`` where possible, same values as float(x)."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        return values.tolist()  # already Python floats
    tolist = getattr(values, "tolist", None)
    return [float(x) for x in (tolist() if tolist is not None else values)]


_FIT_EPSILON = 1e-9
_GRACEFUL = (AbortReason.GRACEFUL_PREEMPTION, SchedulingStage.GRACEFUL_PREEMPTION)
_GRACEFUL_TEXT = "Preempted due to graceful preemption: operation usage exceeds its fair share"
_OVERCOMMIT = (AbortReason.RESOURCE_OVERCOMMIT, SchedulingStage.OVERCOMMIT)
_OVERCOMMIT_TEXT = "Preempted due to node resource ovecommit"  # sic: the YTsaurus text


class OperationController(Protocol):
    """What the strategy asks of an operation controller (see :mod:`pooltree.controllers.operations`)."""

    @property
    def pending_allocation_count(self) -> int: ...

    @property
    def needed_resources(self) -> Vector: ...

    @property
    def min_needed_resources(self) -> Vector: ...

    def schedule_allocation(
        self, node: ExecNode, available_resources: Vector, now: float
    ) -> Allocation | None: ...

    def on_allocation_finished(
        self, allocation: Allocation, finished: FinishedAllocation, now: float
    ) -> None:
        """The allocation ended (``allocation.preemption`` tells whether the scheduler asked it to stop)."""


@dataclass
class StarvationState:
    """Per-element starvation bookkeeping that survives fair-share updates."""

    status: StarvationStatus = StarvationStatus.NON_STARVING
    below_fair_share_since: float | None = None
    starving_since: float | None = None


@dataclass
class OperationRuntime:
    """Strategy-side state of one registered operation."""

    id: str
    controller: OperationController
    lists: PreemptibleLists = field(default_factory=PreemptibleLists)
    usage: list[float] = field(default_factory=lambda: [0.0] * RESOURCE_COUNT)
    deactivation_reasons: Counter[str] = field(default_factory=Counter)
    preemption_priority: PreemptionPriority = PreemptionPriority.NONE
    preempted_allocation_count: int = 0
    lists_key: tuple[Any, ...] | None = None
    """The arguments of the last ``lists.configure``: an equal publish need not configure again."""
    lists_settled: bool = False
    """The last publish's rebalance moved nothing and no allocation was added, removed or resized since: with
    equal ``lists_key`` the next rebalance would see the very same state and move nothing either."""


class _Element:
    """One pool or operation in the published tree, with its dynamic scheduling attributes."""

    __slots__ = (
        "active",
        "blocked",
        "blocked_for",
        "children",
        "demand_share",
        "depth",
        "excluded",
        "fair_share",
        "fifo_key",
        "heap",
        "id",
        "inactive_reason",
        "index",
        "is_op",
        "keyed_start",
        "last_start",
        "limited",
        "limits",
        "op",
        "parent",
        "sat",
        "settings",
        "spec",
        "starvation",
        "status",
        "tag_cache",
        "threshold_key",
        "usage",
        "use_fifo",
        "version",
    )

    def __init__(self, spec: ElementSpec, index: int, settings: EffectiveSettings):
        self.id = spec.id
        self.spec = spec
        self.index = index
        self.settings = settings
        self.is_op = spec.is_operation
        self.parent: _Element | None = None
        self.children: list[_Element] = []
        self.depth = 0
        self.usage = [0.0] * RESOURCE_COUNT
        self.fair_share: tuple[float, ...] = tuple(_floats(spec.fair_share))
        self.demand_share: tuple[float, ...] = (0.0,) * RESOURCE_COUNT
        self.blocked: tuple[bool, ...] = (True,) * RESOURCE_COUNT
        self.blocked_for: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        """The (fair share, demand share) ``blocked`` was computed from."""
        threshold = settings.non_preemptible_threshold
        self.threshold_key: tuple[float, ...] | None = (
            None if threshold is None else tuple(_floats(threshold))
        )
        limits = None if spec.specified_resource_limits is None else _floats(spec.specified_resource_limits)
        self.limits: tuple[float, ...] | None = (
            None if limits is None or not any(map(math.isfinite, limits)) else tuple(limits)
        )
        self.limited: tuple[_Element, ...] = ()
        self.sat = INFINITE_SATISFACTION_RATIO
        self.fifo_key = float(spec.fifo_index)
        self.use_fifo = False
        self.version = 0
        self.last_start = 0
        """Serial of the latest allocation started in this subtree: equal satisfactions go to the one served least
        recently, so operations whose allocations finish together take turns instead of one always losing."""
        self.keyed_start = 0
        """``last_start`` as it is in this element's current entry of its parent's heap."""
        self.active = False
        self.excluded = -1
        self.heap: list[tuple[float, int, int, int, _Element]] = []
        self.status = SchedulingStatus.NORMAL
        self.starvation = StarvationStatus.NON_STARVING
        self.op: OperationRuntime | None = None
        self.inactive_reason: DeactivationReason | None = None
        self.tag_cache: dict[frozenset[str], bool] = {}


@dataclass
class _Analysis:
    """Result of §e.3 for one node and one preemptive stage."""

    target: PreemptionPriority
    unconditional: list[Allocation] = field(default_factory=list)
    conditional: dict[str, list[Allocation]] = field(default_factory=dict)
    discount: list[float] = field(default_factory=lambda: [0.0] * RESOURCE_COUNT)
    ancestor_discount: dict[str, list[float]] = field(default_factory=dict)
    conditional_discount: dict[str, list[float]] = field(default_factory=dict)


class _Pass:
    """Heartbeat-local bookkeeping: entries popped aside for deactivated operations, restored afterwards."""

    __slots__ = ("popped", "serial", "touched")

    def __init__(self, serial: int):
        self.serial = serial
        self.popped: list[tuple[list, tuple]] = []
        self.touched: set[_Element] = set()


EventSink = Callable[[dict[str, Any]], None]


class TreeScheduler:
    """Scheduling strategy of one pool tree (pure: time is passed in; deterministic)."""

    def __init__(self, tree: SchedulingTree, *, event_sink: EventSink | None = None):
        self.tree = tree
        self.config = tree.config
        self.nodes: dict[str, ExecNode] = {}
        self.operations: dict[str, OperationRuntime] = {}
        self.allocations: dict[str, Allocation] = {}
        self.starvation: dict[str, StarvationState] = {}
        self._elements: dict[str, _Element] = {}
        self._ops_by_priority: dict[PreemptionPriority, list[_Element]] = {}
        self._serial = 0
        self._start_serial = 0
        self._event_sink = event_sink
        self.last_update_time: float | None = None
        self._queued_preemptions: dict[str, HeartbeatResult] = {}
        """Preemptions decided for a node outside its heartbeat (a gang restarting as a whole), delivered in the
        node's next heartbeat answer."""
        self.publish(tree, now=None)

    # ------------------------------------------------------------------ operations

    def register_operation(self, operation_id: str, controller: OperationController) -> None:
        """Attach a controller; the operation becomes schedulable once a published tree contains it."""
        if operation_id in self.operations:
            raise PooltreeError(f"operation {operation_id} is already registered in tree {self.tree.name}")
        runtime = OperationRuntime(operation_id, controller)
        self.operations[operation_id] = runtime
        element = self._elements.get(operation_id)
        if element is not None and element.is_op:
            element.op = runtime
            element.usage = runtime.usage
            self._configure_lists(element)
            self._refresh_leaf(element)

    def unregister_operation(self, operation_id: str) -> list[Allocation]:
        """Forget an operation; returns its still-running allocations so the caller can abort them on their nodes."""
        runtime = self.operations.pop(operation_id, None)
        if runtime is None:
            raise PooltreeError(f"operation {operation_id} is not registered in tree {self.tree.name}")
        element = self._elements.get(operation_id)
        running = [a for a in self.allocations.values() if a.operation_id == operation_id]
        for allocation in running:
            if not allocation.preempted:
                self._release(allocation, runtime, element)
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
            self._refresh_leaf(element)
        return running

    def operation_usage(self, operation_id: str) -> Vector:
        runtime = self.operations.get(operation_id)
        if runtime is None:
            return np.zeros(RESOURCE_COUNT)
        # Usage is kept by adding and subtracting allocations' amounts; once a node report has resized one, the
        # sums of byte-sized floats may leave a rounding residue of about -1e-6 when everything is released.
        return np.maximum(np.array(runtime.usage), 0.0)

    # ------------------------------------------------------------------ fair-share update

    def publish(self, tree: SchedulingTree, now: float | None) -> None:
        """Take a new snapshot: statuses, starvation, preemption priorities, preemptible lists and heaps."""
        self.tree = tree
        self.config = tree.config
        self._spare = tuple(self.config.min_spare_allocation_resources_on_node.tolist())
        total = tuple(float(x) for x in tree.total_resources)
        previous = getattr(self, "_elements", {})
        fifo_order = self.config.fifo_pool_scheduling_order == "fifo"
        if previous and tree.skeleton is getattr(self, "_skeleton", None):
            elements = self._reuse_elements(tree)
        else:
            elements = self._new_elements(tree, previous, fifo_order)
        self._skeleton = tree.skeleton
        self._elements = elements
        self._total = total
        # usage bottom-up and demand shares
        for element_id in reversed(tree.order):
            element = elements[element_id]
            if element.is_op:
                if element.spec.demand_share is not None:
                    element.demand_share = tuple(_floats(element.spec.demand_share))
                else:
                    needed = element.op.controller.needed_resources if element.op is not None else np.zeros(5)
                    element.demand_share = tuple(
                        (u + float(n)) / t if t > 0 else 0.0
                        for u, n, t in zip(element.usage, needed, total, strict=True)
                    )
            else:
                usage = [0.0] * RESOURCE_COUNT
                if element.spec.demand_share is None:
                    demand = [0.0] * RESOURCE_COUNT
                    for child in element.children:
                        _add_list(usage, child.usage)  # the same float additions, in the same order, unrolled
                        _add_list(demand, child.demand_share)
                    element.demand_share = tuple(demand)
                else:
                    for child in element.children:
                        _add_list(usage, child.usage)
                    element.demand_share = tuple(_floats(element.spec.demand_share))
                element.usage = usage
            shares = (element.fair_share, element.demand_share)
            if shares != element.blocked_for:  # a function of these two only
                element.blocked = blocked_mask(*shares)
                element.blocked_for = shares
        if now is not None:
            self._update_starvation(now)
            self.last_update_time = now
        self._update_priorities()
        for element in elements.values():
            if element.is_op and element.op is not None:
                self._configure_lists(element)
        self._rebuild_heaps()

    def _new_elements(
        self, tree: SchedulingTree, previous: dict[str, _Element], fifo_order: bool
    ) -> dict[str, _Element]:
        elements: dict[str, _Element] = {}
        for index, element_id in enumerate(tree.order):
            spec = tree.elements[element_id]
            element = _Element(spec, index, tree.effective[element_id])
            before = previous.get(element_id)
            if before is not None:
                element.last_start = before.last_start
            own = (element,) if element.limits is not None else ()
            if spec.parent is not None:
                parent = elements[spec.parent]
                element.parent = parent
                element.depth = parent.depth + 1
                parent.children.append(element)
                element.use_fifo = parent.spec.fifo and fifo_order
                # limited elements on the path to the root, nearest first (parents precede children in order)
                element.limited = own + parent.limited
            else:
                element.limited = own
            if element.is_op:
                element.op = self.operations.get(element_id)
                if element.op is not None:
                    element.usage = element.op.usage
            elements[element_id] = element
        return elements

    def _reuse_elements(self, tree: SchedulingTree) -> dict[str, _Element]:
        """The previous publish's elements, for a tree of the same structure (``tree.skeleton``).

        Everything an `_Element` derives from the structure and static settings (parent, children, depth,
        limits, limited ancestors, FIFO use, effective settings, tag matches) is kept; everything a new
        element would start with is reset to the same values, and its spec, fair share and FIFO key taken from
        the new tree, so the rest of :meth:`publish` computes exactly what it computes on new elements.
        """
        elements = self._elements
        specs = tree.elements
        operations = self.operations
        normal = SchedulingStatus.NORMAL
        non_starving = StarvationStatus.NON_STARVING
        for element_id, element in elements.items():
            spec = specs[element_id]
            element.spec = spec
            element.fair_share = tuple(_floats(spec.fair_share))
            element.fifo_key = float(spec.fifo_index)
            element.sat = INFINITE_SATISFACTION_RATIO
            element.keyed_start = 0
            element.active = False
            element.excluded = -1
            element.heap = []
            element.status = normal
            element.starvation = non_starving
            element.inactive_reason = None
            if element.is_op:
                runtime = operations.get(element_id)
                element.op = runtime
                element.usage = runtime.usage if runtime is not None else [0.0] * RESOURCE_COUNT
        return elements

    def _usage_share(self, element: _Element) -> list[float]:
        return [u / t if t > 0 else 0.0 for u, t in zip(element.usage, self._total, strict=True)]

    def _computed_statuses(self) -> dict[str, SchedulingStatus]:
        """§c statuses of the elements the snapshot gives none for, by the fair-share update's own rule, at once."""
        pending = [
            element
            for element_id in self.tree.order
            if (element := self._elements[element_id]).spec.scheduling_status is None
        ]
        if not pending:
            return {}
        below = is_below_fair_share(
            np.array([element.fair_share for element in pending]),
            np.array([self._usage_share(element) for element in pending]),
            np.array([element.demand_share for element in pending]),
            np.array([element.settings.starvation_tolerance for element in pending]),
            is_operation=np.array([element.is_op for element in pending]),
            schedulable=np.array(
                [
                    element.spec.schedulable and (not element.is_op or element.op is not None)
                    for element in pending
                ]
            ),
        )
        return {
            element.id: SchedulingStatus.BELOW_FAIR_SHARE if flag else SchedulingStatus.NORMAL
            for element, flag in zip(pending, np.atleast_1d(below).tolist(), strict=True)
        }

    def _update_starvation(self, now: float) -> None:
        config = self.config
        computed = self._computed_statuses()
        for element_id in self.tree.order:
            element = self._elements[element_id]
            spec = element.spec
            if spec.scheduling_status is not None:
                status = SchedulingStatus(spec.scheduling_status)
            else:
                status = computed[element_id]
            if element.parent is None:
                status = SchedulingStatus.NORMAL
            element.status = status
            state = self.starvation.setdefault(element_id, StarvationState())
            if (
                element.parent is None
                or (not element.is_op and not config.enable_pool_starvation)
                or status == SchedulingStatus.NORMAL
            ):
                state.status = StarvationStatus.NON_STARVING
                state.below_fair_share_since = None
                state.starving_since = None
            elif state.below_fair_share_since is None:
                state.below_fair_share_since = now
            else:
                timeout = element.settings.starvation_timeout
                aggressive_timeout = config.fair_share_aggressive_starvation_timeout
                if element.is_op and element.op is not None:
                    pending = element.op.controller.pending_allocation_count
                    factor = pending / config.allocation_count_preemption_timeout_coefficient
                    if factor < 1.0:
                        timeout *= factor
                        aggressive_timeout *= factor
                since = state.below_fair_share_since
                previous = state.status
                if element.settings.aggressive_starvation_enabled and now > since + aggressive_timeout:
                    state.status = StarvationStatus.AGGRESSIVELY_STARVING
                elif now > since + timeout:
                    state.status = StarvationStatus.STARVING
                if previous == StarvationStatus.NON_STARVING and state.status != previous:
                    state.starving_since = now
            element.starvation = state.status
        for stale in set(self.starvation) - set(self._elements):
            del self.starvation[stale]

    def _update_priorities(self) -> None:
        """Operation preemption priority from starving ancestors-or-self (§e.2, scheduling_preemption_priority_scope)."""
        by_priority: dict[PreemptionPriority, list[_Element]] = {
            PreemptionPriority.NORMAL: [],
            PreemptionPriority.AGGRESSIVE: [],
        }
        own_only = self.config.scheduling_preemption_priority_scope == "operation_only"
        aggressive = StarvationStatus.AGGRESSIVELY_STARVING
        starving = StarvationStatus.STARVING
        # per pool: the most severe starvation status among the pool and its ancestors (parents come first)
        severity: dict[str, int] = {}
        none_rank, normal_rank, aggressive_rank = 0, 1, 2
        elements = self._elements
        for element_id in self.tree.order:
            element = elements[element_id]
            if element.is_op:
                element.starvation = self.starvation.get(element_id, StarvationState()).status
                own = element.starvation
                rank = aggressive_rank if own == aggressive else normal_rank if own == starving else none_rank
                if not own_only and element.parent is not None:
                    rank = max(rank, severity[element.parent.id])
                if rank == aggressive_rank:
                    priority = PreemptionPriority.AGGRESSIVE
                elif rank == normal_rank:
                    priority = PreemptionPriority.NORMAL
                else:
                    priority = PreemptionPriority.NONE
                if element.op is not None:
                    element.op.preemption_priority = priority
                if priority != PreemptionPriority.NONE:
                    by_priority[priority].append(element)
            else:
                own = element.starvation
                rank = aggressive_rank if own == aggressive else normal_rank if own == starving else none_rank
                if element.parent is not None:
                    rank = max(rank, severity[element.parent.id])
                severity[element_id] = rank
        self._ops_by_priority = by_priority

    def _priority(self, element: _Element) -> PreemptionPriority:
        return element.op.preemption_priority if element.op is not None else PreemptionPriority.NONE

    def _configure_lists(self, element: _Element) -> None:
        config = self.config
        runtime = element.op
        assert runtime is not None
        key = (
            element.fair_share,
            element.demand_share,
            self._total,
            element.threshold_key,
            config.aggressive_preemption_satisfaction_threshold,
            config.preemption_satisfaction_threshold,
        )
        lists = runtime.lists
        if key != runtime.lists_key:
            # configure is a function of these arguments only: equal ones would leave the lists as they are
            lists.configure(*key)
            runtime.lists_key = key
            runtime.lists_settled = False
        elif runtime.lists_settled:
            return
        before = _lists_state(lists)
        lists.rebalance()
        runtime.lists_settled = _lists_state(lists) == before

    # ------------------------------------------------------------------ best leaf selection

    def _key(self, element: _Element) -> float:
        return element.fifo_key if element.use_fifo else element.sat

    def _op_activity(self, element: _Element) -> DeactivationReason | None:
        runtime = element.op
        if runtime is None or not element.spec.schedulable:
            return DeactivationReason.NOT_SCHEDULABLE
        if runtime.controller.pending_allocation_count <= 0:
            return DeactivationReason.NO_AVAILABLE_DEMAND
        if element.spec.preemption_mode == "graceful" and element.status == SchedulingStatus.NORMAL:
            return DeactivationReason.FAIR_SHARE_EXCEEDED
        return None

    def _rebuild_heaps(self) -> None:
        order = self.tree.order
        for element_id in reversed(order):
            element = self._elements[element_id]
            element.version += 1
            if element.is_op:
                element.sat = local_satisfaction_ratio(
                    self._usage_share(element), element.fair_share, element.blocked
                )
                element.inactive_reason = self._op_activity(element)
                element.active = element.inactive_reason is None
                if (
                    element.inactive_reason
                    in (
                        DeactivationReason.FAIR_SHARE_EXCEEDED,
                        DeactivationReason.NO_AVAILABLE_DEMAND,
                    )
                    and element.op is not None
                ):
                    element.op.deactivation_reasons[element.inactive_reason.value] += 1
            else:
                heap = []
                for child in element.children:
                    if child.active:
                        child.keyed_start = child.last_start
                        heap.append((self._key(child), child.last_start, child.index, child.version, child))
                heapq.heapify(heap)
                element.heap = heap
                if heap:
                    element.active = True
                    element.sat = heap[0][4].sat
                else:
                    element.active = False
                    element.sat = INFINITE_SATISFACTION_RATIO

    def _peek(self, composite: _Element, current: _Pass | None) -> _Element | None:
        heap = composite.heap
        while heap:
            entry = heap[0]
            child = entry[4]
            if entry[3] != child.version or not child.active:
                heapq.heappop(heap)
                continue
            if current is not None and child.excluded == current.serial:
                current.popped.append((heap, heapq.heappop(heap)))
                continue
            return child
        return None

    def _recompute(self, composite: _Element, current: _Pass | None) -> bool:
        best = self._peek(composite, current)
        active = best is not None
        sat = best.sat if best is not None else INFINITE_SATISFACTION_RATIO
        if (
            active == composite.active
            and sat == composite.sat
            and composite.keyed_start == composite.last_start
        ):
            return False
        composite.active = active
        composite.sat = sat
        composite.version += 1
        parent = composite.parent
        if parent is not None and active:
            self._push(parent, composite)
        return True

    def _propagate(self, element: _Element, current: _Pass | None) -> None:
        parent = element.parent
        while parent is not None:
            if current is not None:
                current.touched.add(parent)
            if not self._recompute(parent, current):
                return
            parent = parent.parent

    def _refresh_leaf(self, element: _Element, current: _Pass | None = None) -> None:
        """Re-key an operation after its usage or demand changed and propagate to the root."""
        element.sat = local_satisfaction_ratio(
            self._usage_share(element), element.fair_share, element.blocked
        )
        element.inactive_reason = self._op_activity(element)
        element.active = element.inactive_reason is None
        element.version += 1
        parent = element.parent
        if parent is not None and element.active:
            self._push(parent, element)
        self._propagate(element, current)

    def _push(self, parent: _Element, child: _Element) -> None:
        """A fresh heap entry for ``child``: (key, least recently served first, tree order, version)."""
        child.keyed_start = child.last_start
        heapq.heappush(parent.heap, (self._key(child), child.last_start, child.index, child.version, child))

    def _best_leaf(self, current: _Pass) -> _Element | None:
        element = self._elements[ROOT_ID]
        while not element.is_op:
            child = self._peek(element, current)
            if child is None:
                if element.parent is None:
                    return None
                # stale composite: recompute it and start again from the root
                current.touched.add(element)
                self._recompute(element, current)
                self._propagate(element, current)
                element = self._elements[ROOT_ID]
                continue
            element = child
        return element

    def _exclude(self, element: _Element, current: _Pass) -> None:
        element.excluded = current.serial
        self._propagate(element, current)

    def _finish_pass(self, current: _Pass) -> None:
        for heap, entry in current.popped:
            heapq.heappush(heap, entry)
        self._serial += 1
        for composite in sorted(current.touched, key=lambda e: -e.depth):
            if self._recompute(composite, None):
                self._propagate(composite, None)

    def _new_pass(self) -> _Pass:
        self._serial += 1
        return _Pass(self._serial)

    # ------------------------------------------------------------------ heartbeat

    def process_heartbeat(self, heartbeat: NodeHeartbeat, now: float) -> HeartbeatResult:
        """Run one node heartbeat through every stage and return what to start and what to preempt."""
        node = self._sync_node(heartbeat, now)
        result = HeartbeatResult(address=node.address)
        queued = self._queued_preemptions.pop(node.address, None)
        if queued is not None:
            result.allocations_to_preempt.extend(
                record for record in queued.allocations_to_preempt if record.allocation_id in node.allocations
            )
        self._graceful_preemption(node, now, result)
        self._regular_scheduling(node, now, result)
        last = node.last_preemptive_scheduling_time
        if last is None or now > last + self.config.preemptive_scheduling_backoff:
            node.last_preemptive_scheduling_time = now
            result.preemptive_scheduling_performed = True
            self._preemptive_scheduling(node, now, result)
        self._abort_for_overcommit(node, now, result)
        return result

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
            for allocation in list(node.allocations.values()):
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

    def finish_allocation(self, finished: FinishedAllocation, now: float) -> Allocation | None:
        """A node reported an allocation ended: release its usage (unless preempted already) and tell its controller."""
        allocation = self.allocations.pop(finished.allocation_id, None)
        if allocation is None:
            return None
        node = self.nodes.get(allocation.node_address)
        runtime = self.operations.get(allocation.operation_id)
        element = self._elements.get(allocation.operation_id)
        lost_gang_member = False
        if not allocation.preempted:
            if node is not None:
                _sub_np(node.usage, allocation.resources)
            if runtime is not None:
                self._release(allocation, runtime, element)
            lost_gang_member = finished.state == "aborted" and element is not None and element.spec.is_gang
        if node is not None:
            node.allocations.pop(allocation.id, None)
        if lost_gang_member:
            self._restart_gang(allocation, "was aborted", now)
        if runtime is not None:
            runtime.controller.on_allocation_finished(allocation, finished, now)
            if element is not None and element.op is runtime:
                self._refresh_leaf(element)
        self._emit(
            {
                "event": "allocation_finished"
                if finished.state == "completed"
                else "allocation_" + finished.state,
                "time": now,
                "allocation_id": allocation.id,
                "operation_id": allocation.operation_id,
                "node": allocation.node_address,
                "state": finished.state,
                "reason": allocation.preemption.reason.value if allocation.preemption else None,
                "preemptor_operation_id": allocation.preemption.preemptor_operation_id
                if allocation.preemption
                else None,
            }
        )
        return allocation

    def _account(
        self,
        runtime: OperationRuntime,
        element: _Element | None,
        amounts: Sequence[float],
        apply: Callable[[list[float], Sequence[float]], None],
    ) -> None:
        """Apply a usage change (``add_floats`` or ``sub_floats``) to the operation and, if published, its pools."""
        apply(runtime.usage, amounts)
        if element is not None and element.op is runtime:
            cursor = element.parent
            while cursor is not None:
                apply(cursor.usage, amounts)
                cursor = cursor.parent
            element.usage = runtime.usage

    def _release(self, allocation: Allocation, runtime: OperationRuntime, element: _Element | None) -> None:
        runtime.lists_settled = False
        runtime.lists.remove(allocation)
        self._account(runtime, element, allocation.amounts, _sub_list)

    def _charge(self, allocation: Allocation, runtime: OperationRuntime, element: _Element) -> None:
        self._account(runtime, element, allocation.amounts, _add_list)
        runtime.lists_settled = False
        runtime.lists.add(allocation)

    def _change_usage(self, allocation: Allocation, usage: Vector) -> None:
        node = self.nodes[allocation.node_address]
        delta = usage - allocation.resources
        node.usage += delta
        runtime = self.operations.get(allocation.operation_id)
        if runtime is None:
            allocation.resources = usage
            return
        element = self._elements.get(allocation.operation_id)
        self._account(runtime, element, delta.tolist(), _add_list)
        runtime.lists_settled = False
        runtime.lists.update_usage(allocation, usage)
        if element is not None and element.op is runtime:
            self._refresh_leaf(element)

    # -------------------------------------------------------------- stage 1: graceful preemption

    def _graceful_preemption(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        for allocation in list(node.allocations.values()):
            if allocation.preempted:
                continue
            element = self._elements.get(allocation.operation_id)
            if element is None or element.spec.preemption_mode != "graceful":
                continue
            if allocation.preemption_status != PreemptionStatus.PREEMPTIBLE:
                continue
            timeout = self.config.allocation_graceful_preemption_timeout
            self._preempt(allocation, node, now, result, _GRACEFUL, _GRACEFUL_TEXT, timeout=timeout)

    # -------------------------------------------------------------- stage 2: regular scheduling

    def _can_start_more(self, node: ExecNode, discount: list[float] | None = None) -> bool:
        return self._has_spare(node.resource_limits.tolist(), node.usage.tolist(), discount)

    def _has_spare(self, limits: list[float], usage: list[float], discount: list[float] | None) -> bool:
        """min_spare_allocation_resources_on_node: free (+ discount) covers the spare in every resource the node has."""
        spare = self._spare
        for r in range(RESOURCE_COUNT):
            if limits[r] <= 0:
                continue
            free = limits[r] - usage[r] + (discount[r] if discount is not None else 0.0)
            if free + _FIT_EPSILON < spare[r]:
                return False
        return True

    def _regular_scheduling(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        current = self._new_pass()
        attempts = 0
        limit = self.config.max_schedule_attempts_per_heartbeat
        # the node's vectors as floats for the whole pass; ``usage`` follows ``node.usage`` step by step
        limits = node.resource_limits.tolist()
        usage = node.usage.tolist()
        try:
            while attempts < limit and self._has_spare(limits, usage, None):
                leaf = self._best_leaf(current)
                if leaf is None:
                    break
                attempts += 1
                allocation, reason = self._try_schedule(leaf, node, now, None, None, (limits, usage))
                if allocation is None:
                    assert leaf.op is not None and reason is not None
                    leaf.op.deactivation_reasons[reason.value] += 1
                    self._exclude(leaf, current)
                    continue
                self._started(
                    allocation, leaf, node, now, result, SchedulingStage.REGULAR_MEDIUM_PRIORITY, current
                )
                _add_list(usage, allocation.amounts)
        finally:
            self._finish_pass(current)
        result.schedule_attempts += attempts

    def _tag_matches(self, element: _Element, node: ExecNode) -> bool:
        tag_filter = element.spec.scheduling_tag_filter
        if tag_filter is None:
            return True
        cached = element.tag_cache.get(node.tags)
        if cached is None:
            if hasattr(tag_filter, "matches"):
                cached = bool(tag_filter.matches(node.tags))
            elif callable(tag_filter):
                cached = bool(tag_filter(node.tags))
            else:
                raise PooltreeError(
                    f"operation {element.id}: scheduling_tag_filter must be a filter object or a callable"
                )
            element.tag_cache[node.tags] = cached
        return cached

    def _try_schedule(
        self,
        element: _Element,
        node: ExecNode,
        now: float,
        discount: list[float] | None,
        ancestor_discount: dict[str, list[float]] | None,
        node_floats: tuple[list[float], list[float]] | None = None,
    ) -> tuple[Allocation | None, DeactivationReason | None]:
        """One attempt of §e.2: checks, then the controller call with the available resources.

        ``node_floats`` are the node's limits and usage as float lists when the caller keeps them current.
        """
        runtime = element.op
        if runtime is None:
            return None, DeactivationReason.NOT_SCHEDULABLE
        if not self._tag_matches(element, node):
            return None, DeactivationReason.SCHEDULING_TAG_FILTER_MISMATCH
        controller = runtime.controller
        if controller.pending_allocation_count <= 0:
            return None, DeactivationReason.NO_AVAILABLE_DEMAND
        if node_floats is None:
            limits, usage = node.resource_limits.tolist(), node.usage.tolist()
        else:
            limits, usage = node_floats
        if discount is None:
            available = [limit - used for limit, used in zip(limits, usage, strict=True)]
        else:
            available = [limits[r] - usage[r] + discount[r] for r in range(RESOURCE_COUNT)]
        min_needed = controller.min_needed_resources.tolist()
        for r in range(RESOURCE_COUNT):
            if min_needed[r] > available[r] + _FIT_EPSILON:
                return None, DeactivationReason.MIN_NEEDED_RESOURCES_UNSATISFIED
        for limited in element.limited:
            assert limited.limits is not None
            extra = ancestor_discount.get(limited.id) if ancestor_discount is not None else None
            for r in range(RESOURCE_COUNT):
                room = limited.limits[r] - limited.usage[r] + (extra[r] if extra is not None else 0.0)
                if min_needed[r] > room + _FIT_EPSILON:
                    return None, DeactivationReason.RESOURCE_LIMITS_EXCEEDED
                available[r] = min(available[r], room)
        available_vector = np.array(available)
        allocation = controller.schedule_allocation(node, available_vector, now)
        if allocation is None:
            return None, DeactivationReason.NO_CANDIDATE_ALLOCATIONS
        if not fits_floats(allocation.amounts, available):
            controller.on_allocation_finished(
                allocation,
                FinishedAllocation(allocation.id, "aborted", abort_reason="scheduling_resource_overcommit"),
                now,
            )
            return None, DeactivationReason.SCHEDULING_RESOURCE_OVERCOMMIT
        return allocation, None

    def _started(
        self,
        allocation: Allocation,
        element: _Element,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        stage: SchedulingStage,
        current: _Pass | None,
    ) -> None:
        runtime = element.op
        assert runtime is not None
        allocation.node_address = node.address
        allocation.start_time = now
        if allocation.interruption_signal is None:
            allocation.interruption_signal = element.spec.interruption_signal
        node.allocations[allocation.id] = allocation
        node.usage += allocation.resources
        self.allocations[allocation.id] = allocation
        self._start_serial += 1
        cursor: _Element | None = element
        while cursor is not None:
            cursor.last_start = self._start_serial
            cursor = cursor.parent
        self._charge(allocation, runtime, element)
        self._refresh_leaf(element, current)
        result.allocations_to_start.append(allocation)
        if self._event_sink is not None:
            self._emit(
                {
                    "event": "allocation_started",
                    "time": now,
                    "allocation_id": allocation.id,
                    "operation_id": allocation.operation_id,
                    "node": node.address,
                    "stage": stage.value,
                    "resources": {name: float(allocation.resources[i]) for i, name in enumerate(RESOURCES)},
                }
            )

    # -------------------------------------------------------------- stage 3: preemptive scheduling

    def _preemption_level(self, allocation: Allocation, element: _Element) -> PreemptionLevel:
        status = allocation.preemption_status
        if status == PreemptionStatus.NON_PREEMPTIBLE:
            return PreemptionLevel.NON_PREEMPTIBLE
        if status == PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE:
            if element.settings.allow_aggressive_preemption:
                return PreemptionLevel.AGGRESSIVELY_PREEMPTIBLE
            return PreemptionLevel.NON_PREEMPTIBLE
        return PreemptionLevel.PREEMPTIBLE

    def _local_satisfaction(self, element: _Element) -> float:
        return local_satisfaction_ratio(self._usage_share(element), element.fair_share, element.blocked)

    def _current_satisfaction(self, element: _Element, memo: dict[_Element, float]) -> float:
        """Local satisfaction without recomputing: an operation keeps its own up to date (``sat`` is refreshed on
        every usage change); a pool's is memoised for the duration of one analysis, while usage stands still."""
        if element.is_op:
            return element.sat
        value = memo.get(element)
        if value is None:
            value = memo[element] = self._local_satisfaction(element)
        return value

    def _blocking_ancestor(
        self, element: _Element, target: PreemptionPriority, memo: dict[_Element, float]
    ) -> _Element | None:
        """FindPreemptionBlockingAncestor (§e.3): the element that protects this operation's allocations."""
        if element.spec.preemption_mode == "graceful":
            return element
        if (
            target == PreemptionPriority.NORMAL
            and not element.settings.normal_preemption_allowed_by_ancestors
        ):
            return element
        config = self.config
        cursor: _Element | None = element
        while cursor is not None and cursor.parent is not None:
            if config.preemption_check_starvation and cursor.starvation != StarvationStatus.NON_STARVING:
                return cursor
            if config.preemption_check_satisfaction:
                if cursor.settings.allow_aggressive_preemption and target >= PreemptionPriority.AGGRESSIVE:
                    threshold = config.aggressive_preemption_satisfaction_threshold
                else:
                    threshold = config.preemption_satisfaction_threshold
                if self._current_satisfaction(cursor, memo) < threshold + EPSILON:
                    return cursor
            cursor = cursor.parent
        return None

    def _analyze(self, node: ExecNode, target: PreemptionPriority, min_level: PreemptionLevel) -> _Analysis:
        analysis = _Analysis(target)
        blockers: dict[str, _Element | None] = {}
        memo: dict[_Element, float] = {}
        enable_conditional = self.config.enable_conditional_preemption
        for allocation in node.allocations.values():
            if allocation.preempted:
                continue
            element = self._elements.get(allocation.operation_id)
            if element is None or element.op is None:
                continue
            if self._preemption_level(allocation, element) < min_level:
                continue
            if element.id in blockers:
                blocker = blockers[element.id]
            else:
                blocker = blockers[element.id] = self._blocking_ancestor(element, target, memo)
            if blocker is None:
                analysis.unconditional.append(allocation)
                _add_list(analysis.discount, allocation.amounts)
                for limited in element.limited:
                    _add_list(
                        analysis.ancestor_discount.setdefault(limited.id, [0.0] * RESOURCE_COUNT),
                        allocation.amounts,
                    )
            elif (
                blocker is not element
                and enable_conditional
                and allocation.preemption_status == PreemptionStatus.PREEMPTIBLE
            ):
                analysis.conditional.setdefault(blocker.id, []).append(allocation)
                _add_list(
                    analysis.conditional_discount.setdefault(blocker.id, [0.0] * RESOURCE_COUNT),
                    allocation.amounts,
                )
        return analysis

    def _best_among(self, candidates: list[_Element]) -> _Element | None:
        """Best leaf of the subtree spanned by the candidates, by the same comparator as regular scheduling."""
        if not candidates:
            return None
        children: dict[_Element, set[_Element]] = {}
        for element in candidates:
            cursor = element
            while cursor.parent is not None:
                children.setdefault(cursor.parent, set()).add(cursor)
                cursor = cursor.parent
        memo: dict[_Element, tuple[float, _Element]] = {}
        sats = {element: element.sat for element in candidates}  # operations keep ``sat`` current

        def best(element: _Element) -> tuple[float, _Element]:
            if element.is_op:
                return sats[element], element
            if element in memo:
                return memo[element]
            options = []
            for child in children[element]:
                sat, leaf = best(child)
                key = child.fifo_key if child.use_fifo else sat
                options.append((key, child.last_start, child.index, sat, leaf))
            _, _, _, sat, leaf = min(options, key=lambda o: (o[0], o[1], o[2]))
            memo[element] = (sat, leaf)
            return memo[element]

        return best(self._elements[ROOT_ID])[1]

    def _preemptive_scheduling(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        stages = (
            (
                SchedulingStage.PREEMPTIVE_AGGRESSIVE,
                PreemptionPriority.AGGRESSIVE,
                PreemptionLevel.AGGRESSIVELY_PREEMPTIBLE,
            ),
            (SchedulingStage.PREEMPTIVE_NORMAL, PreemptionPriority.NORMAL, PreemptionLevel.PREEMPTIBLE),
        )
        for stage, target, min_level in stages:
            targets = [
                e
                for e in self._ops_by_priority.get(target, [])
                if e.op is not None and self._op_activity(e) is None
            ]
            force = stage == SchedulingStage.PREEMPTIVE_NORMAL
            if not targets and not force:
                continue
            analysis = self._analyze(node, target, min_level)
            started = None
            if targets and (analysis.unconditional or analysis.conditional or self._can_start_more(node)):
                started = self._schedule_with_preemption(node, now, targets, analysis, stage, result)
            self._preempt_after_scheduling(node, now, analysis, started, stage, result)
            if started is not None:
                result.scheduled_with_preemption = started[0].id
                return

    def _schedule_with_preemption(
        self,
        node: ExecNode,
        now: float,
        targets: list[_Element],
        analysis: _Analysis,
        stage: SchedulingStage,
        result: HeartbeatResult,
    ) -> tuple[Allocation, _Element] | None:
        remaining = list(targets)
        attempts = 0
        while remaining and attempts < self.config.max_schedule_attempts_per_heartbeat:
            leaf = self._best_among(remaining)
            if leaf is None:
                return None
            attempts += 1
            discount = list(analysis.discount)
            cursor = leaf.parent
            while cursor is not None:
                extra = analysis.conditional_discount.get(cursor.id)
                if extra is not None:
                    _add_list(discount, extra)
                cursor = cursor.parent
            if not self._can_start_more(node, discount):
                result.schedule_attempts += attempts
                return None
            allocation, reason = self._try_schedule(leaf, node, now, discount, analysis.ancestor_discount)
            if allocation is None:
                assert leaf.op is not None and reason is not None
                leaf.op.deactivation_reasons[reason.value] += 1
                remaining.remove(leaf)
                continue
            result.schedule_attempts += attempts
            self._started(allocation, leaf, node, now, result, stage, None)
            return allocation, leaf
        result.schedule_attempts += attempts
        return None

    def _preempt_after_scheduling(
        self,
        node: ExecNode,
        now: float,
        analysis: _Analysis,
        started: tuple[Allocation, _Element] | None,
        stage: SchedulingStage,
        result: HeartbeatResult,
    ) -> None:
        """§e.4: preempt the minimal set (Preemptible first, latest first) so the node fits; then limit violators."""
        conditional: set[str] = set()
        candidates = list(analysis.unconditional)
        if started is not None:
            cursor = started[1].parent
            while cursor is not None:
                for allocation in analysis.conditional.get(cursor.id, ()):
                    candidates.append(allocation)
                    conditional.add(allocation.id)
                cursor = cursor.parent
        candidates.sort(
            key=lambda a: (PREEMPTION_STATUS_RANK[a.preemption_status], a.start_time), reverse=True
        )
        target = analysis.target
        reason = (
            AbortReason.AGGRESSIVE_PREEMPTION
            if target == PreemptionPriority.AGGRESSIVE
            else AbortReason.PREEMPTION
        )
        preemptor = started[0] if started is not None else None
        for allocation in candidates:
            if _fits(node.usage, node.resource_limits):
                break
            if allocation.preempted:
                continue
            text = "Node resource limits violated"
            if started is not None:
                element = self._elements[allocation.operation_id]
                priority = self._priority(started[1])
                text = (
                    f"Preempted to start allocation {started[0].id} of operation {started[0].operation_id}; "
                    f"this allocation had status {allocation.preemption_status.value} and level "
                    f"{self._preemption_level(allocation, element).name.lower()}, preemptor operation local priority "
                    f"was {priority.name.lower()}, and scheduling stage target priority was {target.name.lower()}"
                )
                if allocation.id in conditional:
                    text += "; this allocation was conditionally preemptible"
            self._preempt(allocation, node, now, result, (reason, stage), text, preemptor=preemptor)
        for allocation in candidates:
            if allocation.preempted or allocation.id in conditional:
                continue
            element = self._elements[allocation.operation_id]
            violated = self._violated_limits(element)
            if violated is None:
                continue
            if violated is element:
                text = f"Preempted due to violation of resource limits of operation {element.id}"
            else:
                text = f'Preempted due to violation of limits on pool "{violated.id}"'
            self._preempt(allocation, node, now, result, (AbortReason.RESOURCE_LIMITS_VIOLATED, stage), text)

    def _violated_limits(self, element: _Element) -> _Element | None:
        for limited in element.limited:
            assert limited.limits is not None
            if any(u > lim + _FIT_EPSILON for u, lim in zip(limited.usage, limited.limits, strict=True)):
                return limited
        return None

    # -------------------------------------------------------------- stage 4: node overcommit

    def _abort_for_overcommit(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        if _fits(node.usage, node.resource_limits):
            return
        running = [a for a in node.allocations.values() if not a.preempted]
        running.sort(key=lambda a: (PREEMPTION_STATUS_RANK[a.preemption_status], a.start_time))
        kept = np.zeros(RESOURCE_COUNT)
        for allocation in running:
            if allocation.preempted:  # stopped with its gang by an earlier preemption of this loop
                continue
            candidate = kept + allocation.resources
            if np.all(candidate <= node.resource_limits + _FIT_EPSILON):
                kept = candidate
                continue
            self._preempt(allocation, node, now, result, _OVERCOMMIT, _OVERCOMMIT_TEXT)

    # -------------------------------------------------------------- preemption

    def _preempt(
        self,
        allocation: Allocation,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        why: tuple[AbortReason, SchedulingStage],
        explanation: str,
        *,
        timeout: float | None = None,
        preemptor: Allocation | None = None,
    ) -> PreemptionRecord:
        """Stop accounting the allocation now and ask the node to stop it within ``timeout``.

        ``why`` is the abort reason and the stage deciding it; ``timeout`` defaults to allocation_preemption_timeout
        (interruptible allocations get that long to finish), graceful preemption passes its own.
        """
        reason, stage = why
        if timeout is None:
            timeout = self.config.allocation_preemption_timeout
        record = PreemptionRecord(
            allocation_id=allocation.id,
            operation_id=allocation.operation_id,
            node_address=node.address,
            reason=reason,
            timeout=timeout,
            explanation=explanation,
            stage=stage,
            time=now,
            preemptor_allocation_id=preemptor.id if preemptor is not None else None,
            preemptor_operation_id=preemptor.operation_id if preemptor is not None else None,
            interruption_signal=allocation.interruption_signal,
            interruptible=allocation.interruptible,
            allocation_status=allocation.preemption_status,
        )
        runtime = self.operations.get(allocation.operation_id)
        element = self._elements.get(allocation.operation_id)
        _sub_np(node.usage, allocation.resources)
        if runtime is not None:
            self._release(allocation, runtime, element)
            runtime.preempted_allocation_count += 1
        allocation.preemption = record
        if element is not None and element.op is runtime and runtime is not None:
            self._refresh_leaf(element)
        result.allocations_to_preempt.append(record)
        event = {"event": "allocation_preempted", **record.to_dict()}
        self._emit(event)
        if (
            element is not None
            and element.spec.is_gang
            and reason is not AbortReason.OPERATION_INCARNATION_CHANGED
        ):
            self._restart_gang(allocation, f"was preempted ({reason.value})", now, stage, result)
        return record

    def _restart_gang(
        self,
        trigger: Allocation,
        what: str,
        now: float,
        stage: SchedulingStage = SchedulingStage.PREEMPTIVE_NORMAL,
        result: HeartbeatResult | None = None,
    ) -> None:
        """All-or-nothing: one allocation of a gang operation was preempted or aborted, so all the others stop.

        Allocations on the heartbeat's own node go into ``result``; the others are released now and delivered
        in their nodes' next heartbeat answers (abort reason ``operation_incarnation_changed``, no timeout).
        """
        runtime = self.operations.get(trigger.operation_id)
        if runtime is None:
            return
        explanation = (
            f"gang operation {trigger.operation_id}: its allocation {trigger.id} {what}, so every allocation of "
            "the gang is stopped (a gang runs all its allocations or none)"
        )
        for other in list(runtime.lists):
            node = self.nodes.get(other.node_address)
            if node is None or other.preempted:
                continue
            if result is not None and node.address == result.address:
                target = result
            else:
                target = self._queued_preemptions.setdefault(
                    node.address, HeartbeatResult(address=node.address)
                )
            record = self._preempt(
                other,
                node,
                now,
                target,
                (AbortReason.OPERATION_INCARNATION_CHANGED, stage),
                explanation,
                timeout=0.0,
            )
            record.interruptible = False  # aborted at once, never interrupted to finish its work

    def report_usage(self, allocation_id: str, reported: Vector) -> bool:
        """A node reports what an allocation uses: it counts when above the reserve (``usage_above_reserve``).

        The new usage goes into the operation's and its pools' usage (fair share, starvation), the node's usage
        (fit of new allocations, overcommit aborts at the next heartbeat) and the preemptible lists. Returns
        whether the accounted usage changed.
        """
        allocation = self.allocations.get(allocation_id)
        if allocation is None or allocation.preempted or allocation.node_address not in self.nodes:
            return False
        usage = usage_above_reserve(allocation.reserve, reported)
        if np.array_equal(usage, allocation.resources):
            return False
        self._change_usage(allocation, usage)
        return True

    def stop_allocation(
        self, allocation: Allocation, reason: AbortReason, explanation: str, now: float, error: Any = None
    ) -> PreemptionRecord | None:
        """Stop a running allocation outside a heartbeat (job time limit): released now, delivered to its node
        in its next heartbeat answer with no timeout. A gang operation's other allocations stop with it."""
        node = self.nodes.get(allocation.node_address)
        if node is None or allocation.preempted:
            return None
        target = self._queued_preemptions.setdefault(node.address, HeartbeatResult(address=node.address))
        record = self._preempt(
            allocation,
            node,
            now,
            target,
            (reason, SchedulingStage.PREEMPTIVE_NORMAL),
            explanation,
            timeout=0.0,
        )
        record.error = error
        record.interruptible = False  # aborted at once, never interrupted to finish its work
        return record

    def nodes_with_queued_preemptions(self) -> list[str]:
        """Nodes whose next heartbeat answer carries preemptions decided outside their heartbeats."""
        return [
            address for address, queued in self._queued_preemptions.items() if queued.allocations_to_preempt
        ]

    def has_queued_preemptions(self, address: str) -> bool:
        """Whether preemptions wait for the node's next heartbeat (a gang restarting as a whole)."""
        queued = self._queued_preemptions.get(address)
        return queued is not None and bool(queued.allocations_to_preempt)

    def drop_queued_preemptions(self, address: str) -> None:
        """Forget what was queued for a node that left the cluster."""
        self._queued_preemptions.pop(address, None)

    def _emit(self, event: dict[str, Any]) -> None:
        if self._event_sink is not None:
            self._event_sink(event)

    # -------------------------------------------------------------- views

    def element_view(self, element_id: str) -> dict[str, Any]:
        """Strategy fields of one element for the orchid (starvation, status, preemption counts, reasons)."""
        element = self._elements.get(element_id)
        if element is None:
            raise PooltreeError(f"no element {element_id} in tree {self.tree.name}", code=500)
        state = self.starvation.get(element_id, StarvationState())
        lowest = _lowest(element, lambda e: e.starvation != StarvationStatus.NON_STARVING)
        lowest_aggressive = _lowest(element, lambda e: e.starvation == StarvationStatus.AGGRESSIVELY_STARVING)
        view: dict[str, Any] = {
            "scheduling_status": element.status.value,
            "starvation_status": state.status.value,
            "below_fair_share_since": state.below_fair_share_since,
            "starving_since": state.starving_since,
            "lowest_starving_ancestor": lowest,
            "lowest_aggressively_starving_ancestor": lowest_aggressive,
            "local_satisfaction_ratio": self._local_satisfaction(element),
            "effective_fair_share_starvation_tolerance": element.settings.starvation_tolerance,
            "effective_fair_share_starvation_timeout": element.settings.starvation_timeout,
            "effective_aggressive_starvation_enabled": element.settings.aggressive_starvation_enabled,
            "effective_aggressive_preemption_allowed": element.settings.allow_aggressive_preemption,
            "resource_usage": {name: element.usage[i] for i, name in enumerate(RESOURCES)},
        }
        runtime = element.op
        if element.is_op and runtime is not None:
            counts = runtime.lists.counts()
            view.update(
                {
                    "preemptible_allocation_count": counts["preemptible"],
                    "aggressively_preemptible_allocation_count": counts["aggressively_preemptible"],
                    "non_preemptible_allocation_count": counts["non_preemptible"],
                    "running_allocation_count": len(runtime.lists),
                    "preempted_allocation_count": runtime.preempted_allocation_count,
                    "deactivation_reasons": dict(runtime.deactivation_reasons),
                    "preemption_priority": runtime.preemption_priority.name.lower(),
                    "preemption_mode": element.spec.preemption_mode,
                    "allocation_preemption_timeout": self.config.allocation_preemption_timeout,
                    "allocation_graceful_preemption_timeout": self.config.allocation_graceful_preemption_timeout,
                }
            )
        return view

    def starvation_status(self, element_id: str) -> StarvationStatus:
        return self.starvation.get(element_id, StarvationState()).status

    def element_usage(self, element_id: str) -> Vector:
        return np.array(self._elements[element_id].usage)

    # ------------------------------------------------- queries for callers that skip heartbeats

    def runs_graceful_allocations(self, node: ExecNode) -> bool:
        """Whether the node runs a (not yet preempted) allocation of an operation in graceful preemption mode."""
        for allocation in node.allocations.values():
            if allocation.preempted:
                continue
            element = self._elements.get(allocation.operation_id)
            if element is not None and element.spec.preemption_mode == "graceful":
                return True
        return False

    def can_start_more(self, node: ExecNode) -> bool:
        """Whether the node's free resources reach ``min_spare_allocation_resources_on_node``."""
        return self._can_start_more(node)

    def has_preemption_targets(self) -> bool:
        """Whether the published tree has operations with a preemption priority (starving ones)."""
        return any(self._ops_by_priority.values())

    def limits_violated(self) -> bool:
        """Whether some pool or operation uses more than its specified resource limits."""
        return any(
            self._violated_limits(element) is not None
            for element in self._elements.values()
            if element.limits is not None
        )


def usage_above_reserve(reserve: Vector, reported: Vector) -> Vector:
    """An allocation's usage from a node report: the reported amount where it exceeds the reserve, else the reserve.

    The seeds: the memory reserve is a lower bound of what a job uses; nodes measure the rest. YTsaurus's node
    raises an allocation's resource usage to the job's measured memory above the reserve.
    """
    return np.maximum(np.asarray(reserve, dtype=float), np.asarray(reported, dtype=float))


def _lowest(element: _Element, predicate: Callable[[_Element], bool]) -> str | None:
    cursor: _Element | None = element
    while cursor is not None:
        if predicate(cursor):
            return cursor.id
        cursor = cursor.parent
    return None


def _fits(usage: Vector, limits: Vector) -> bool:
    return bool(np.all(usage <= limits + _FIT_EPSILON))


def _sub_np(target: Vector, values: Vector) -> None:
    target -= values
