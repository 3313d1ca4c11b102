"""Best-leaf selection and the regular scheduling stage (yt-semantics §e.2).

`SchedulingStages` is the base of `TreeScheduler` (scheduler.py): it declares the scheduler's state, keeps the
allocation accounting helpers shared by every stage, the per-pool lazy heaps that choose the best leaf operation,
and the regular stage with its checks (`_try_schedule`) and bookkeeping of a started allocation (`_started`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.resources import RESOURCE_COUNT, RESOURCES
from pooltree.strategy.elements import (
    _FIT_EPSILON,
    EventSink,
    OperationRuntime,
    StarvationState,
    _Element,
    _Pass,
)
from pooltree.strategy.full_host_preemption import FullHostPreemption
from pooltree.strategy.heartbeat_deadline import HeartbeatDeadline
from pooltree.strategy.model import (
    Allocation,
    DeactivationReason,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    PreemptionPriority,
    SchedulingStage,
    SchedulingStatus,
)
from pooltree.strategy.packing import HeartbeatSnapshot, Packing
from pooltree.strategy.pool_satisfaction import pool_key
from pooltree.strategy.segments import SegmentsManager
from pooltree.strategy.shares import (
    INFINITE_SATISFACTION_RATIO,
    fits_floats,
    local_satisfaction_ratio,
)
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.shares import sub_floats as _sub_list
from pooltree.strategy.snapshot import ROOT_ID, SchedulingTree, StrategyConfig
from pooltree.strategy.ssd_preemption import SsdPreemption
from pooltree.strategy.tentative import TentativeGate


def remake_pool_heap(pool: _Element, bump_versions: bool, total: Sequence[float] | None = None) -> None:
    """``pool``'s heap made anew from its active children's current keys (FIFO key or satisfaction, last
    start, tree index, version), its activity and satisfaction from the best child; ``keyed_start`` is a child's
    ``last_start`` on the heap and 0 off it (and 0 for the root). ``bump_versions`` moves each active child's
    version first, so entries of it pushed elsewhere before go stale. ``total`` (the tree's resources) is given
    while some pool uses its own satisfaction (`pool_satisfaction.pool_key`)."""
    heap = []
    for child in pool.children:
        if child.active:
            start = child.last_start
            child.keyed_start = start
            if bump_versions:
                child.version += 1
            heap.append(
                (child.fifo_key if child.use_fifo else child.sat, start, child.index, child.version, child)
            )
        else:
            child.keyed_start = 0
    heapq.heapify(heap)
    pool.heap = heap
    pool.inactive_reason = None
    if heap:
        pool.active = True
        pool.sat = heap[0][4].sat if total is None else pool_key(pool, heap[0][4].sat, total)
    else:
        pool.active = False
        pool.sat = INFINITE_SATISFACTION_RATIO
    if pool.parent is None:
        pool.keyed_start = 0


class SchedulingStages:
    """Best leaf and regular scheduling; the state below is initialised by `TreeScheduler.__init__`."""

    tree: SchedulingTree
    config: StrategyConfig
    nodes: dict[str, ExecNode]
    operations: dict[str, OperationRuntime]
    allocations: dict[str, Allocation]
    starvation: dict[str, StarvationState]
    last_update_time: float | None
    _elements: dict[str, _Element]
    _ops_by_priority: dict[PreemptionPriority, list[_Element]]
    _serial: int
    _start_serial: int
    _event_sink: EventSink | None
    _queued_preemptions: dict[str, HeartbeatResult]
    _spare: tuple[float, ...]
    _total: tuple[float, ...]
    _touched: set[str]
    """Operations whose usage, preemptible lists, satisfaction or activity changed since the last publish
    (`changes.py` re-keys only these and the pools above them)."""
    segments: SegmentsManager
    scheduling_tags_enabled: bool
    fifo_unschedulable: frozenset[str]
    clock: Callable[[], float] | None
    """Wall clock for ``schedule_allocations_timeout`` (the live service's; None: no bound, `heartbeat_deadline.py`)."""
    _deadline: HeartbeatDeadline
    """The current heartbeat's scheduling deadline."""
    high_priority: frozenset[str]
    packing: Packing
    """The tree's ``packing`` (`packing.py`): checked in regular stages while enabled."""
    tentative: TentativeGate
    """Operations running tentatively in this tree (`tentative.py`)."""
    full_host: FullHostPreemption
    """The tree's ``default_gpu_full_host_preemption`` (`full_host_preemption.py`)."""
    ssd: SsdPreemption
    """The tree's ``ssd_priority_preemption`` (`ssd_preemption.py`)."""
    """Operations below their promised guarantee fair share (`guarantee_priority.py`): scheduled in a stage first."""
    """Operations of FIFO pools left out by ``max_schedulable_element_count_in_fifo_pool`` (`fifo_limit.py`)."""
    """The tree's ``enable_scheduling_tags`` (YTsaurus: true; false ignores scheduling tag filters)."""
    """The tree's scheduling segments (``segments.py``): which operations may run on which nodes."""
    usage_watch: set[str] | None
    """Where `_account` also reports each operation whose usage moves (``SchedulerCore``'s change notification
    for the fair-share input; ``None``: nobody listens)."""

    # ------------------------------------------------------------------ accounting shared by every stage

    def _usage_share(self, element: _Element) -> list[float]:
        return [u / t if t > 0 else 0.0 for u, t in zip(element.usage, self._total, strict=True)]

    def _account(
        self,
        runtime: OperationRuntime,
        element: _Element | None,
        amounts: Sequence[float],
        apply: Callable[[list[float], Sequence[float]], None],
    ) -> None:
        """Apply a usage change (``add_floats`` or ``sub_floats``) to the operation and, if published, its pools."""
        apply(runtime.usage, amounts)
        runtime.usage_serial += 1
        self._touched.add(runtime.id)
        if self.usage_watch is not None:  # SchedulerCore's notification for the fair-share input
            self.usage_watch.add(runtime.id)
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

    def _emit(self, event: dict[str, Any]) -> None:
        if self._event_sink is not None:
            self._event_sink(event)

    # ------------------------------------------------------------------ best leaf selection

    def _key(self, element: _Element) -> float:
        return element.fifo_key if element.use_fifo else element.sat

    def _op_activity(self, element: _Element) -> DeactivationReason | None:
        runtime = element.op
        if runtime is None or not element.spec.schedulable:
            return DeactivationReason.NOT_SCHEDULABLE
        if self.fifo_unschedulable and element.id in self.fifo_unschedulable:
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
            else:  # every keyed_start and inactive_reason was reset by the element renewal before this pass
                remake_pool_heap(element, False, self._pool_total())

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

    def _pool_total(self) -> tuple[float, ...] | None:
        """The tree's resources while some pool uses its own satisfaction (`pool_satisfaction.py`), else None."""
        return self._total if self.tree.pool_satisfaction_used else None

    def _recompute(self, composite: _Element, current: _Pass | None) -> bool:
        best = self._peek(composite, current)
        active = best is not None
        sat = best.sat if best is not None else INFINITE_SATISFACTION_RATIO
        if best is not None and self.tree.pool_satisfaction_used:
            sat = pool_key(composite, sat, self._total)
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
            if not self._recompute(parent, current) and not self.tree.pool_satisfaction_used:
                return  # (a pool's own satisfaction moves with usage below it: then every ancestor is re-keyed)
            parent = parent.parent

    def _refresh_leaf(self, element: _Element, current: _Pass | None = None) -> None:
        """Re-key an operation after its usage or demand changed and propagate to the root."""
        self._touched.add(element.id)
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

    def _regular_scheduling(
        self,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        stage: SchedulingStage = SchedulingStage.REGULAR_MEDIUM_PRIORITY,
        excluded: Sequence[_Element] = (),
        one_only: bool = False,
    ) -> None:
        """One regular stage on ``node``; ``excluded`` operations are not considered in it
        (`guarantee_priority.run_regular_stages`); ``one_only``: at most one allocation (`packing.py`'s fallback)."""
        current = self._new_pass()
        packing = self.packing
        packing.in_regular_stage = packing.config.enable and stage != SchedulingStage.REGULAR_PACKING_FALLBACK
        bad_packing: list[_Element] = []
        for element in excluded:
            self._exclude(element, current)
        attempts = 0
        limit = self.config.max_schedule_attempts_per_heartbeat
        # the node's vectors as floats for the whole pass; ``usage`` follows ``node.usage`` step by step
        limits = node.resource_limits.tolist()
        usage = node.usage.tolist()
        try:
            while attempts < limit and self._has_spare(limits, usage, None) and not self._deadline.passed():
                leaf = self._best_leaf(current)
                if leaf is None:
                    break
                attempts += 1
                allocation, reason = self._try_schedule(leaf, node, now, None, None, (limits, usage))
                if allocation is None:
                    assert leaf.op is not None and reason is not None
                    leaf.op.deactivation_reasons[reason.value] += 1
                    self._exclude(leaf, current)
                    if reason is DeactivationReason.BAD_PACKING:
                        bad_packing.append(leaf)
                    continue
                self._started(allocation, leaf, node, now, result, stage, current)
                _add_list(usage, allocation.amounts)
                if one_only:
                    break
                for element in bad_packing:  # the node changed: operations it packed badly try again
                    element.excluded = -1
                    self._refresh_leaf(element, current)
                bad_packing.clear()
        finally:
            packing.in_regular_stage = False
            self._finish_pass(current)
        result.schedule_attempts += attempts

    def _tag_matches(self, element: _Element, node: ExecNode) -> bool:
        tag_filter = element.spec.scheduling_tag_filter
        if tag_filter is None or not self.scheduling_tags_enabled:
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
        segments = self.segments
        if segments.enabled and not segments.compatible(element.id, node.address, node.tags):
            return None, DeactivationReason.INCOMPATIBLE_SCHEDULING_SEGMENT
        if self.ssd.forbidden and self.ssd.forbids(element.id, node):  # `ssd_preemption.py`
            return None, DeactivationReason.REGULAR_ALLOCATION_ON_SSD_NODE_FORBIDDEN
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
            tolerance = limited.limits_tolerance if ancestor_discount is not None else None  # preemptive only
            for r in range(RESOURCE_COUNT):
                room = limited.limits[r] - limited.usage[r] + (extra[r] if extra is not None else 0.0)
                if tolerance is not None:
                    room += tolerance[r]
                if min_needed[r] > room + _FIT_EPSILON:
                    return None, DeactivationReason.RESOURCE_LIMITS_EXCEEDED
                available[r] = min(available[r], room)
        snapshot = None
        if self.packing.in_regular_stage:  # the tree's packing (`packing.py`)
            snapshot = HeartbeatSnapshot(now, tuple(usage), tuple(limits))
            if not self.packing.check(element.id, snapshot, min_needed, self._total):
                self.packing.rejected.add(element.id)
                return None, DeactivationReason.BAD_PACKING
        tentative = self.tentative.deactivation(element.id, now) if self.tentative.operations else None
        if tentative is not None:  # a tentative tree that declines or is saturated (`tentative.py`)
            if tentative == "declined":
                return None, DeactivationReason.NO_CANDIDATE_ALLOCATIONS
            return None, DeactivationReason.SATURATED_IN_TENTATIVE_TREE
        available_vector = np.array(available)
        allocation = controller.schedule_allocation(node, available_vector, now)
        if allocation is None:
            return None, DeactivationReason.NO_CANDIDATE_ALLOCATIONS
        if self.tentative.operations:
            self.tentative.on_allocated(element.id, allocation.task or "main", now)
        if snapshot is not None:
            self.packing.accepted(element.id, snapshot)
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
        if not allocation.revived:  # a re-attached job keeps the start time its controller gave it
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
