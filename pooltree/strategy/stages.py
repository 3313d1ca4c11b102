"""The regular scheduling stage (yt-semantics §e.2): checks of one attempt and the bookkeeping of a start.

`RegularStage` runs one regular pass on a node: it asks the best-leaf heaps (`best_leaf.py`) for the best
operation, checks it (`try_schedule`: tags, segments, SSD, demand, minimum needed resources, limits, packing,
tentative trees), asks its controller for an allocation and books the start (`started`). The preemptive stages
(`preemption.py`) and the GPU policy reuse `try_schedule` and `started`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.resources import RESOURCE_COUNT, RESOURCES
from pooltree.strategy.best_leaf import BestLeaf
from pooltree.strategy.elements import _FIT_EPSILON, _Element, _Pass
from pooltree.strategy.model import (
    Allocation,
    DeactivationReason,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    SchedulingStage,
)
from pooltree.strategy.packing import HeartbeatSnapshot, Packing
from pooltree.strategy.segments import SegmentsManager
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.shares import fits_floats
from pooltree.strategy.shares import minus_floats as _minus_list
from pooltree.strategy.ssd_preemption import SsdPreemption
from pooltree.strategy.state import StrategyState
from pooltree.strategy.tentative import TentativeGate

_R0, _R1, _R2, _R3, _R4 = RESOURCES
"""The resource names, in order: the keys of a started allocation's ``resources`` in its event."""


class RegularStage:
    """Regular scheduling on one node; see the module docstring."""

    def __init__(
        self,
        state: StrategyState,
        heaps: BestLeaf,
        packing: Packing,
        segments: SegmentsManager,
        ssd: SsdPreemption,
        tentative: TentativeGate,
    ) -> None:
        self.state = state
        self.heaps = heaps
        self.packing = packing
        """The tree's ``packing`` (`packing.py`): checked in regular stages while enabled."""
        self.segments = segments
        """The tree's scheduling segments (``segments.py``): which operations may run on which nodes."""
        self.ssd = ssd
        """The tree's ``ssd_priority_preemption`` (`ssd_preemption.py`): operations kept off SSD nodes."""
        self.tentative = tentative
        """Operations running tentatively in this tree (`tentative.py`)."""
        self.scheduling_tags_enabled = True
        """The tree's ``enable_scheduling_tags`` (YTsaurus: true; false ignores scheduling tag filters)."""
        self.high_priority: frozenset[str] = frozenset()
        """Operations below their promised guarantee fair share (`guarantee_priority.py`): scheduled in a stage first."""

    def can_start_more(self, node: ExecNode, discount: list[float] | None = None) -> bool:
        """Whether the node's free resources reach the spare (YTsaurus `CanStartMoreAllocations`)."""
        return self.has_spare(node.resource_limits.tolist(), node.usage.tolist(), discount)

    def has_spare(self, limits: list[float], usage: list[float], discount: list[float] | None) -> bool:
        """``min_spare_allocation_resources_on_node`` (YTsaurus `CanStartMoreAllocations`): free (+ discount) covers the spare.

        Without a discount (every attempt of a regular stage asks) written out for the five resources: the same
        comparisons on the same floats as the loop (``free + 0.0`` is ``free`` but for the sign of a zero, which
        no comparison sees; `tests/strategy/test_has_spare.py`)."""
        spare = self.state.spare
        if discount is None:
            limit = limits[0]
            if not limit <= 0 and limit - usage[0] + _FIT_EPSILON < spare[0]:
                return False
            limit = limits[1]
            if not limit <= 0 and limit - usage[1] + _FIT_EPSILON < spare[1]:
                return False
            limit = limits[2]
            if not limit <= 0 and limit - usage[2] + _FIT_EPSILON < spare[2]:
                return False
            limit = limits[3]
            if not limit <= 0 and limit - usage[3] + _FIT_EPSILON < spare[3]:
                return False
            limit = limits[4]
            return limit <= 0 or not limit - usage[4] + _FIT_EPSILON < spare[4]
        for r in range(RESOURCE_COUNT):
            if limits[r] <= 0:
                continue
            free = limits[r] - usage[r] + discount[r]
            if free + _FIT_EPSILON < spare[r]:
                return False
        return True

    def schedule(
        self,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        stage: SchedulingStage = SchedulingStage.REGULAR_MEDIUM_PRIORITY,
        excluded: Sequence[_Element] = (),
        one_only: bool = False,
    ) -> None:
        """§e.2 one regular stage on the node (YTsaurus `RunRegularSchedulingStage`).

        ``excluded`` operations are not considered in it (`guarantee_priority.run_regular_stages`); ``one_only``: at
        most one allocation (`packing.py`'s fallback)."""
        state = self.state
        heaps = self.heaps
        current = heaps.new_pass()
        packing = self.packing
        packing.in_regular_stage = packing.config.enable and stage != SchedulingStage.REGULAR_PACKING_FALLBACK
        bad_packing: list[_Element] = []
        for element in excluded:
            heaps.exclude(element, current)
        attempts = 0
        limit = state.config.max_schedule_attempts_per_heartbeat
        # the node's vectors as floats for the whole pass; ``usage`` follows ``node.usage`` step by step
        limits = node.resource_limits.tolist()
        usage = node.usage.tolist()
        try:
            while attempts < limit and self.has_spare(limits, usage, None) and not state.deadline.passed():
                leaf = heaps.best_leaf(current)
                if leaf is None:
                    break
                attempts += 1
                allocation, reason = self.try_schedule(leaf, node, now, None, None, (limits, usage))
                if allocation is None:
                    assert leaf.op is not None and reason is not None
                    leaf.op.deactivation_reasons[reason.value] += 1
                    heaps.exclude(leaf, current)
                    if reason is DeactivationReason.BAD_PACKING:
                        bad_packing.append(leaf)
                    continue
                self.started(allocation, leaf, node, now, result, stage, current)
                _add_list(usage, allocation.amounts)
                if one_only:
                    break
                for element in bad_packing:  # the node changed: operations it packed badly try again
                    element.excluded = -1
                    heaps.refresh_leaf(element, current)
                bad_packing.clear()
        finally:
            packing.in_regular_stage = False
            heaps.finish_pass(current)
        result.schedule_attempts += attempts

    def tag_matches(self, element: _Element, node: ExecNode) -> bool:
        """The operation's scheduling tag filter accepts the node (YTsaurus `CanSchedule`; off without ``enable_scheduling_tags``)."""
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

    def try_schedule(
        self,
        element: _Element,
        node: ExecNode,
        now: float,
        discount: list[float] | None,
        ancestor_discount: dict[str, list[float]] | None,
        node_floats: tuple[list[float], list[float]] | None = None,
    ) -> tuple[Allocation | None, DeactivationReason | None]:
        """§e.2 one attempt: checks, then the controller's answer (YTsaurus `TryStartScheduleAllocation`, `DoScheduleAllocation`).

        ``node_floats`` are the node's limits and usage as float lists when the caller keeps them current.
        """
        runtime = element.op
        if runtime is None:
            return None, DeactivationReason.NOT_SCHEDULABLE
        # `tag_matches` asked only where a filter is set (it answers True without), segments' ``enabled`` read
        # from their config as the property reads it: calls less an attempt
        if element.spec.scheduling_tag_filter is not None and not self.tag_matches(element, node):
            return None, DeactivationReason.SCHEDULING_TAG_FILTER_MISMATCH
        segments = self.segments
        if segments.config.enabled and not segments.compatible(element.id, node.address, node.tags):
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
            # ``limit - used`` each, unrolled (no comprehension's frame)
            available = _minus_list(limits, usage)
        else:
            available = [limits[r] - usage[r] + discount[r] for r in range(RESOURCE_COUNT)]
        min_needed = controller.min_needed_resources.tolist()
        if not fits_floats(min_needed, available, _FIT_EPSILON):  # the same comparisons, written out
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
            if not self.packing.check(element.id, snapshot, min_needed, self.state.total):
                self.packing.rejected.add(element.id)
                return None, DeactivationReason.BAD_PACKING
        tentative = self.tentative.deactivation(element.id, now) if self.tentative.operations else None
        if tentative is not None:  # a tentative tree that declines or is saturated (`tentative.py`)
            if tentative == "declined":
                return None, DeactivationReason.NO_CANDIDATE_ALLOCATIONS
            return None, DeactivationReason.SATURATED_IN_TENTATIVE_TREE
        # a controller that takes float lists gets the list itself (an array of it costs a start ~1 us)
        offered = available if controller.takes_float_lists else np.array(available)
        allocation = controller.schedule_allocation(node, offered, now)
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

    def started(
        self,
        allocation: Allocation,
        element: _Element,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        stage: SchedulingStage,
        current: _Pass | None,
    ) -> None:
        """Book a started allocation on the node, its operation and pools (YTsaurus `OnAllocationStarted`), re-keyed."""
        runtime = element.op
        assert runtime is not None
        state = self.state
        allocation.node_address = node.address
        if not allocation.revived:  # a re-attached job keeps the start time its controller gave it
            allocation.start_time = now
        if allocation.interruption_signal is None:
            allocation.interruption_signal = element.spec.interruption_signal
        node.allocations[allocation.id] = allocation
        node.usage += allocation.resources
        state.allocations[allocation.id] = allocation
        state.charge(allocation, runtime, element)  # stamps the start serial too
        self.heaps.refresh_leaf(element, current)
        result.allocations_to_start.append(allocation)
        sink = state.event_sink  # called as `StrategyState.emit` calls it, one call less a start
        if sink is not None:
            amounts = allocation.amounts
            sink(
                {
                    "event": "allocation_started",
                    "time": now,
                    "allocation_id": allocation.id,
                    "operation_id": allocation.operation_id,
                    "node": node.address,
                    "stage": str(stage),  # a StrEnum's str is its value, without the enum's property
                    # the same floats by name, in RESOURCES order (a display: ``dict(zip(...))`` cost ~0.5 us more)
                    "resources": {
                        _R0: amounts[0],
                        _R1: amounts[1],
                        _R2: amounts[2],
                        _R3: amounts[3],
                        _R4: amounts[4],
                    },
                }
            )
