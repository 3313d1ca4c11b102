"""Best-leaf selection: one lazy min-heap of children per pool (yt-semantics §e.2).

`BestLeaf` keeps, for every pool, a heap of its active children keyed by satisfaction (or FIFO index); equal keys
go to the child served least recently, then tree order. Starting an allocation only re-keys the operation and its
ancestors (`refresh_leaf`); operations deactivated on one node are popped aside in a `_Pass` and restored after
the heartbeat (`finish_pass`). Nothing recomputes the whole tree per allocation.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from pooltree.strategy.elements import _Element, _Pass
from pooltree.strategy.model import DeactivationReason, SchedulingStatus
from pooltree.strategy.pool_satisfaction import pool_key
from pooltree.strategy.shares import (
    INFINITE_SATISFACTION_RATIO,
    local_satisfaction_ratio,
    usage_satisfaction_ratio,
)
from pooltree.strategy.snapshot import ROOT_ID
from pooltree.strategy.state import StrategyState


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


class BestLeaf:
    """The per-pool heaps that choose the best leaf operation; see the module docstring."""

    def __init__(self, state: StrategyState) -> None:
        self.state = state
        self.fifo_unschedulable: frozenset[str] = frozenset()
        """Operations of FIFO pools left out by ``max_schedulable_element_count_in_fifo_pool`` (`fifo_limit.py`;
        `SchedulerCore` sets them through `TreeScheduler.fifo_unschedulable`)."""

    def local_satisfaction(self, element: _Element) -> float:
        """The element's local satisfaction ratio from its current usage (§e.2)."""
        return local_satisfaction_ratio(self.state.usage_share(element), element.fair_share, element.blocked)

    def op_activity(self, element: _Element) -> DeactivationReason | None:
        """§e.2 why an operation cannot be scheduled now, or None (YTsaurus `CheckForDeactivation`)."""
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

    def rebuild_heaps(self) -> None:
        """Every operation re-keyed and every pool's heap made anew, children before their parents."""
        state = self.state
        elements = state.elements
        total = state.pool_total()
        for element_id in reversed(state.tree.order):
            element = elements[element_id]
            element.version += 1
            if element.is_op:
                element.sat = self.local_satisfaction(element)
                element.inactive_reason = self.op_activity(element)
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
                remake_pool_heap(element, False, total)

    def peek(self, composite: _Element, current: _Pass | None) -> _Element | None:
        """The pool's best active child, dropping stale entries (and setting aside those excluded in ``current``)."""
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

    def recompute(self, composite: _Element, current: _Pass | None) -> bool:
        """A pool's key from its best child (YTsaurus `UpdateAttributesAtCompositeElement`); whether it moved."""
        best = self.peek(composite, current)
        active = best is not None
        sat = best.sat if best is not None else INFINITE_SATISFACTION_RATIO
        if best is not None and self.state.tree.pool_satisfaction_used:
            sat = pool_key(composite, sat, self.state.total)
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
            self.push(parent, composite)
        return True

    def propagate(self, element: _Element, current: _Pass | None) -> None:
        """Re-key the element's ancestors upwards while their keys move."""
        parent = element.parent
        while parent is not None:
            if current is not None:
                current.touched.add(parent)
            if not self.recompute(parent, current) and not self.state.tree.pool_satisfaction_used:
                return  # (a pool's own satisfaction moves with usage below it: then every ancestor is re-keyed)
            parent = parent.parent

    def refresh_leaf(self, element: _Element, current: _Pass | None = None) -> None:
        """Re-key an operation after its usage or demand changed and propagate to the root."""
        state = self.state
        state.changes.usage.add(element.id)
        # `local_satisfaction`, its usage share divided in place
        element.sat = usage_satisfaction_ratio(
            element.usage, state.total, element.fair_share, element.blocked
        )
        element.inactive_reason = self.op_activity(element)
        element.active = element.inactive_reason is None
        element.version += 1
        parent = element.parent
        if parent is not None and element.active:
            self.push(parent, element)
        self.propagate(element, current)

    def push(self, parent: _Element, child: _Element) -> None:
        """A fresh heap entry for ``child``: (key, least recently served first, tree order, version)."""
        child.keyed_start = child.last_start
        key = child.fifo_key if child.use_fifo else child.sat
        heapq.heappush(parent.heap, (key, child.last_start, child.index, child.version, child))

    def best_leaf(self, current: _Pass) -> _Element | None:
        """§e.2 the best leaf, descending by satisfaction or FIFO order (YTsaurus `FindBestOperationForScheduling`)."""
        elements = self.state.elements
        element = elements[ROOT_ID]
        while not element.is_op:
            child = self.peek(element, current)
            if child is None:
                if element.parent is None:
                    return None
                # stale composite: recompute it and start again from the root
                current.touched.add(element)
                self.recompute(element, current)
                self.propagate(element, current)
                element = elements[ROOT_ID]
                continue
            element = child
        return element

    def leading(self, count: int) -> list[_Element]:
        """Up to ``count`` active operations in heap order, each pool's best children first (depth first): a
        guess of the operations the next heartbeat's regular stage tries first, read without changing any heap
        (stale entries skipped, not popped). Node shards grant allocations ahead for them
        (`pooltree/shards/remote.py`); no decision reads it."""
        found: list[_Element] = []
        seen: set[str] = set()
        pending = [self.state.elements[ROOT_ID]]
        while pending and len(found) < count:
            element = pending.pop()
            if element.is_op:
                found.append(element)
                continue
            children = [
                entry[4]
                for entry in heapq.nsmallest(2 * count, element.heap)
                if entry[3] == entry[4].version and entry[4].active
            ]
            for child in reversed(children):  # the best child on top of the stack
                if child.id not in seen:
                    seen.add(child.id)
                    pending.append(child)
        return found

    def exclude(self, element: _Element, current: _Pass) -> None:
        """Leave the operation out of the rest of the pass ``current``."""
        element.excluded = current.serial
        self.propagate(element, current)

    def new_pass(self) -> _Pass:
        self.state.serial += 1
        return _Pass(self.state.serial)

    def finish_pass(self, current: _Pass) -> None:
        """Put back what the pass set aside and re-key the pools it touched, deepest first.

        A pass that set nothing aside re-keys nothing: a pool's key leaves an excluded operation out only once a
        `peek` meets its entry and sets it aside, so without that every touched pool was keyed as outside a pass
        by the last `propagate` through it, after the last change below it (a start stamps every pool above it,
        so that propagation reaches the root). A re-key would find the same best child, key and last start; only
        the root, whose ``keyed_start`` is always 0, would count a move, with no parent to push to and no heap
        entry reading its version (`tests/strategy/test_pass_rekey_skip.py`)."""
        for heap, entry in current.popped:
            heapq.heappush(heap, entry)
        self.state.serial += 1
        if not current.popped:
            return
        # deepest first, then tree order: never the set's own order (identity-hashed elements, memory addresses)
        for composite in sorted(current.touched, key=lambda e: (-e.depth, e.index)):
            if self.recompute(composite, None):
                self.propagate(composite, None)
