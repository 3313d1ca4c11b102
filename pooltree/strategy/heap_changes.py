"""The activity, deactivation counts and heap entries of an incremental publish (`changes.py`): only the changed
operations are re-keyed (§e.2 satisfaction and activity) and only the pools above them re-read their best child
(`requeue`), leaving every heap as a rebuild would (`BestLeaf`)."""

from __future__ import annotations

import heapq

from pooltree.strategy.best_leaf import BestLeaf, remake_pool_heap
from pooltree.strategy.change_log import PENDING
from pooltree.strategy.elements import _Element
from pooltree.strategy.model import DeactivationReason
from pooltree.strategy.publish_step import COUNTED_REASONS, PublishStep
from pooltree.strategy.shares import (
    INFINITE_SATISFACTION_RATIO,
    local_satisfaction_ratio,
    satisfaction_ratios,
)
from pooltree.strategy.starvation_changes import element_index
from pooltree.strategy.state import StrategyState

_NO_DEMAND = DeactivationReason.NO_AVAILABLE_DEMAND
_NOT_SCHEDULABLE = DeactivationReason.NOT_SCHEDULABLE


def requeue(
    state: StrategyState,
    heaps: BestLeaf,
    step: PublishStep,
    fresh: list[_Element],
    changed_ops: list[_Element],
    total: tuple[float, ...],
    removed_parents: list[_Element] | None = None,
    rebuild: bool = False,
) -> None:
    """Satisfaction and activity of the changed operations, deactivation counts, and the heap entries of
    every element whose key, activity or last start moved (as `_rebuild_heaps_same_structure` leaves them);
    ``removed_parents``: pools that lost children (their entries are stale) re-read their best child too;
    ``rebuild``: every heap made anew instead."""
    visit = _pending_crossed(state, changed_ops)
    pools: list[tuple[int, _Element]] = []
    queued: set[_Element] = set()
    order = sorted(visit, key=element_index) if len(visit) > len(changed_ops) else changed_ops
    _rekey_operations(state, heaps, step, order, total, rebuild, pools, queued)
    for element in fresh:
        if not element.is_op and element.use_fifo and element not in queued:
            queued.add(element)
            heapq.heappush(pools, (-element.index, element))
    if rebuild:
        elements = state.elements
        _rebuild_heaps(
            [elements[element_id] for element_id in state.tree.order],
            total if state.tree.pool_satisfaction_used else None,
        )
        return
    for parent in removed_parents or ():
        if parent is not None and parent not in queued:
            queued.add(parent)
            heapq.heappush(pools, (-parent.index, parent))
    fresh_fifo = {element for element in fresh if element.use_fifo}
    # heartbeats push entries between publishes, and no rebuild drops the stale ones any more: compact
    for pool in [pool for pool in step.pools if len(pool.heap) > 2 * len(pool.children) + 8]:
        heap = [entry for entry in pool.heap if entry[3] == entry[4].version and entry[4].active]
        heapq.heapify(heap)
        pool.heap = heap
    _rekey_pools(heaps, pools, queued, fresh_fifo)


def _pending_crossed(state: StrategyState, changed_ops: list[_Element]) -> set[_Element]:
    """``changed_ops`` and the operations whose pending count crossed zero since their activity was last set.

    Only the operations whose controllers reported a change of their pending work since the last call
    and those that cannot report (the change log's pending work, `change_log.py`, `pooltree.strategy.watch`) can be
    such, so only these are checked, not every operation."""
    visit = set(changed_ops)
    elements = state.elements
    for operation_id in state.changes.take(PENDING):
        element = elements.get(operation_id)
        if element is None or not element.is_op:
            continue
        runtime = element.op
        if runtime is None:
            continue
        reason = element.inactive_reason
        if reason is _NOT_SCHEDULABLE:
            continue
        if (runtime.controller.pending_allocation_count <= 0) is not (reason is _NO_DEMAND):
            visit.add(element)
    return visit


def _rekey_operations(
    state: StrategyState,
    heaps: BestLeaf,
    step: PublishStep,
    order: list[_Element],
    total: tuple[float, ...],
    rebuild: bool,
    pools: list[tuple[int, _Element]],
    queued: set[_Element],
) -> None:
    """The operations of ``order`` (tree order): satisfaction, activity (§e.2), deactivation counts and heap
    entries (none with ``rebuild``); their parents are queued in ``pools`` (deepest first)."""
    step.serial += 1
    serial = step.serial
    counted = step.counted
    activity = heaps.op_activity
    if len(order) >= _BULK_SATISFACTION:
        # in bulk, bit for bit the per-element floats (`satisfaction_ratios`); the memo is not consulted
        # (a pure function of its key) and is forgotten, so no key tuple is made per element
        sats = satisfaction_ratios(
            [element.usage for element in order],
            [element.fair_share for element in order],
            [element.blocked for element in order],
            total,
        )
        for element in order:
            element.sat_for = None
    else:
        sats = [memoised_satisfaction(element, total) for element in order]
    push = heapq.heappush
    for element, sat in zip(order, sats, strict=True):
        element.sat = sat
        reason = activity(element)
        element.inactive_reason = reason
        element.active = reason is None
        element.version += 1
        parent = element.parent
        assert parent is not None
        if rebuild:
            pass  # every heap is made anew by the caller
        elif reason is None:  # `BestLeaf.push`
            start = element.last_start
            element.keyed_start = start
            key = element.fifo_key if element.use_fifo else sat
            push(parent.heap, (key, start, element.index, element.version, element))
        else:
            element.keyed_start = 0
        entry = counted.pop(element, None)
        if entry is not None and entry[2] < serial:  # counted up to the previous publish
            entry[0].deactivation_reasons[entry[1]] += serial - entry[2]
        if reason in COUNTED_REASONS and element.op is not None:
            counted[element] = (element.op, reason.value, serial)
        if parent not in queued:
            queued.add(parent)
            push(pools, (-parent.index, parent))


def _rekey_pools(
    heaps: BestLeaf, pools: list[tuple[int, _Element]], queued: set[_Element], fresh_fifo: set[_Element]
) -> None:
    """The queued pools, deepest first: each re-reads its best child and, when its activity, satisfaction or
    last start moved (or it is a new FIFO pool), re-keys itself in its parent and queues the parent."""
    while pools:
        _, pool = heapq.heappop(pools)
        best = heaps.peek(pool, None)
        active = best is not None
        sat = best.sat if best is not None else INFINITE_SATISFACTION_RATIO
        parent = pool.parent
        if (
            active == pool.active
            and sat == pool.sat
            and (not active or parent is None or pool.keyed_start == pool.last_start)
            and pool not in fresh_fifo
        ):
            if not active:
                pool.keyed_start = 0
            continue
        pool.active = active
        pool.sat = sat
        pool.version += 1
        if parent is None:
            continue
        if active:
            heaps.push(parent, pool)
        else:
            pool.keyed_start = 0
        if parent not in queued:
            queued.add(parent)
            heapq.heappush(pools, (-parent.index, parent))


_BULK_SATISFACTION = 64
"""From this many operations re-keyed in one publish on, their satisfactions are computed in bulk."""


def _rebuild_heaps(ordered: list[_Element], total: tuple[float, ...] | None = None) -> None:
    """Every pool's heap made anew from its children's current keys (the pool branch of
    `_rebuild_heaps_same_structure`), children before their parents (``total``: see `remake_pool_heap`)."""
    for element in reversed(ordered):
        if not element.is_op:
            remake_pool_heap(element, True, total)


def memoised_satisfaction(element: _Element, total: tuple[float, ...]) -> float:
    """An operation's satisfaction at publish, memoised on (usage, fair share, blocked, total)."""
    usage = element.usage
    fair_share = element.fair_share
    blocked = element.blocked
    key = (tuple(usage), fair_share, blocked, total)
    if key == element.sat_for:
        sat: float = element.sat_memo
        return sat
    sat = local_satisfaction_ratio(
        [u / t if t > 0 else 0.0 for u, t in zip(usage, total, strict=True)],
        fair_share,
        blocked,
    )
    element.sat_for = key
    element.sat_memo = sat
    return sat
