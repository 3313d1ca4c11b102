"""The tree's ``enable_guarantee_priority_scheduling``: operations below their promised guarantee go first.

YTsaurus (``CollectSchedulableOperationsPerPriority``, ``DoRegularAllocationScheduling``): after each fair-share
update, a schedulable operation has the *high* scheduling priority when its promised guarantee fair share (computed
under pools with ``compute_promised_guarantee_fair_share``; zero elsewhere) strictly dominates its usage share in
every non-blocked resource (``pooltree.fairshare.status.strictly_dominates_non_blocked``); every other one is
*medium*. A heartbeat's regular scheduling then runs two stages: ``regular_high_priority`` over the high operations
only, then ``regular_medium_priority`` over the medium ones only, each choosing the best operation as usual within
its set. Off (YTsaurus's default), every operation is medium and there is one stage, as before.

`SchedulerCore.update_fair_share` computes the set (:func:`high_priority_operations`) and hands it to the strategy
(``TreeScheduler.high_priority``); :func:`run_regular_stages` runs the stages, each a regular pass of
`RegularStage.schedule` with the other set excluded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.fairshare.status import strictly_dominates_non_blocked
from pooltree.strategy.model import SchedulingStage


def high_priority_operations(result: Any, operation_ids: Any) -> frozenset[str]:
    """The operations (of ``operation_ids``) whose promised guarantee fair share strictly dominates their usage
    share (non-blocked resources), from one update's result arrays; empty when no pool computes promised shares."""
    elements = getattr(result, "elements", None)
    arrays = getattr(elements, "arrays", None)
    index = getattr(elements, "index", None)
    if arrays is None or index is None or arrays.get("promised") is None:
        return frozenset()
    promised = arrays["promised"]
    high: set[str] = set()
    for operation_id in operation_ids:
        row = index.get(operation_id)
        if row is None or np.isnan(promised[row, 0]):
            continue
        if strictly_dominates_non_blocked(
            promised[row], arrays["usage_share"][row], arrays["fair_share"][row], arrays["demand_share"][row]
        ):
            high.add(operation_id)
    return frozenset(high)


def run_regular_stages(regular: Any, node: Any, now: float, result: Any) -> None:
    """The heartbeat's regular scheduling (``regular``: the tree's `RegularStage`): one stage over every operation,
    or, with high-priority operations, the high stage over them and then the medium stage over the others."""
    high = regular.high_priority
    if not high:
        regular.schedule(node, now, result)
        return
    elements = regular.state.elements
    high_elements = [elements[op] for op in sorted(high) if op in elements]
    medium_elements = [element for op, element in elements.items() if element.is_op and op not in high]
    regular.schedule(node, now, result, stage=SchedulingStage.REGULAR_HIGH_PRIORITY, excluded=medium_elements)
    regular.schedule(node, now, result, stage=SchedulingStage.REGULAR_MEDIUM_PRIORITY, excluded=high_elements)
