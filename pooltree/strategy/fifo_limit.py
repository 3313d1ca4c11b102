"""The tree's ``max_schedulable_element_count_in_fifo_pool``: at most N operations of a FIFO pool compete.

YTsaurus (``TPoolTreeCompositeElement::BuildSchedulableChildrenLists``, after each fair-share update): in a FIFO
pool, the schedulable operations are walked in FIFO order (``fifo_index``); once N of them are counted, every
further one whose fair share is (nearly) zero is left out with the unschedulable reason
``fifo_schedulable_element_count_limit_reached``; operations with a fair share are never left out (and counted).
A left-out operation gets no allocation on any node, its status is ``normal`` (so it never starves or preempts),
and it is considered again at the next update. Without the option every schedulable child is kept (pooltree's and
YTsaurus's default). It bounds the work of a heartbeat in FIFO pools with thousands of queued operations.

`SchedulerCore.update_fair_share` computes the set from the update's result (:func:`fifo_unschedulable`), clears
their ``below_fair_share`` flags in the result, and hands the set to the strategy, whose activity rule
(`BestLeaf.op_activity`) deactivates them (`DeactivationReason.NOT_SCHEDULABLE`); operations whose
membership changed are re-keyed after the publish (`TreeScheduler.set_fifo_unschedulable`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.fairshare.status import RATIO_COMPUTATION_PRECISION
from pooltree.tree.projection import TreeProjection


def fifo_unschedulable(projection: TreeProjection, result: Any, limit: int) -> frozenset[str]:
    """The operations of FIFO pools left out by the limit, from one update's ``result`` (its ``fair_share`` and
    ``fifo_index`` arrays) and the running, unsuspended operations of each FIFO pool as the period's projection
    lists them (`Projected.running`)."""
    elements = getattr(result, "elements", None)
    arrays = getattr(elements, "arrays", None)
    index = getattr(elements, "index", None)
    if arrays is None or index is None:
        return frozenset()
    fair_share = arrays["fair_share"]
    fifo_index = arrays["fifo_index"]
    operations = projection.operations
    left_out: set[str] = set()
    for entry in projection.pools.values():
        if entry.element.mode != "fifo" or len(entry.running) <= limit:
            continue
        children: list[tuple[int, int, str]] = []
        for operation_id in entry.running:
            if operations[operation_id].element.suspended:
                continue  # not schedulable: neither counted nor left out
            row = index.get(operation_id)
            if row is not None:
                children.append((int(fifo_index.get(row, 0)), row, operation_id))
        if len(children) <= limit:
            continue
        children.sort()
        counted = 0
        for _, row, operation_id in children:
            if counted >= limit and bool(np.all(fair_share[row] <= RATIO_COMPUTATION_PRECISION)):
                left_out.add(operation_id)
            else:
                counted += 1
    return frozenset(left_out)


def clear_statuses(result: Any, operations: frozenset[str]) -> None:
    """An operation left out is ``normal`` (YTsaurus's ``GetStatus`` of an unschedulable operation)."""
    elements = result.elements
    below = elements.arrays["below"]
    for operation_id in operations:
        row = elements.index.get(operation_id)
        if row is not None:
            below[row] = False
