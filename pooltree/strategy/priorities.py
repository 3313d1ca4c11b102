"""Elements' statuses and starvation (§c) with operations' preemption priorities (§e.2), and the configuration of
their preemptible lists (§d).

`update_priorities` is the one top-down pass both full publishes run (`publish.py`: the general path and the
three-pass same-structure path); the incremental publish (`changes.py`) applies the same rules to the elements
that moved. The preemptive stages read an operation's priority (`preemption.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pooltree.strategy.elements import StarvationState, _Element
from pooltree.strategy.model import PRIORITY_OF_RANK, STARVATION_RANK, PreemptionPriority, SchedulingStatus
from pooltree.strategy.state import StrategyState


def priority_of(element: _Element) -> PreemptionPriority:
    """The operation's preemption priority (``NONE`` without a runtime)."""
    return element.op.preemption_priority if element.op is not None else PreemptionPriority.NONE


def update_priorities(
    state: StrategyState,
    now: float | None = None,
    computed: Mapping[str, SchedulingStatus] | None = None,
) -> None:
    """Operation preemption priority from starving ancestors-or-self (§e.2, scheduling_preemption_priority_scope),
    in one top-down pass over the published tree.

    With ``now``, the same pass first sets each element's §c status (the snapshot's, else ``computed``'s; the root
    is normal) and advances its starvation clock (YTsaurus ``CheckForStarvation``); stale clocks are dropped.
    Without it, the statuses and clocks of the last publish with a time are read as they are.
    """
    config = state.config
    elements = state.elements
    states = state.starvation
    normal = SchedulingStatus.NORMAL
    own_only = config.scheduling_preemption_priority_scope == "operation_only"
    rank_of = STARVATION_RANK
    priority_of_rank = PRIORITY_OF_RANK
    by_priority: dict[PreemptionPriority, list[_Element]] = {
        PreemptionPriority.NORMAL: [],
        PreemptionPriority.AGGRESSIVE: [],
    }
    # per pool: the most severe starvation status among the pool and its ancestors (parents come first)
    severity: dict[str, int] = {}
    for element_id in state.tree.order:
        element = elements[element_id]
        parent = element.parent
        is_op = element.is_op
        if now is not None:
            status = element.spec.scheduling_status
            if status is None:
                assert computed is not None
                status = computed[element_id]
            elif type(status) is not SchedulingStatus:
                status = SchedulingStatus(status)
            if parent is None:
                status = normal
            element.status = status
            clock = states.get(element_id)
            if clock is None:
                clock = states[element_id] = StarvationState()
            own = element.starvation = clock.advance(element, status != normal, now, config)
        elif is_op:
            own = element.starvation = states.get(element_id, StarvationState()).status
        else:
            own = element.starvation
        rank = rank_of[own]
        if is_op:
            if not own_only and parent is not None:
                rank = max(rank, severity[parent.id])
            priority = priority_of_rank[rank]
            if element.op is not None:
                element.op.preemption_priority = priority
            if rank:
                by_priority[priority].append(element)
        else:
            if parent is not None:
                rank = max(rank, severity[parent.id])
            severity[element_id] = rank
    if now is not None and len(states) > len(elements):
        for stale in set(states) - set(elements):
            del states[stale]
    state.ops_by_priority = by_priority


def configure_lists(state: StrategyState, element: _Element) -> None:
    """The operation's preemptible lists configured from its shares and the tree's thresholds (§d), rebalanced."""
    config = state.config
    runtime = element.op
    assert runtime is not None
    key = (
        element.fair_share,
        element.demand_share,
        state.total,
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
    before = lists.state()
    # a rebalance that moved nothing left the very state it read (settled); one that moved allocations is
    # settled when they came back to the same sizes and sums
    if lists.rebalance():
        runtime.lists_settled = lists.state() == before
    else:
        runtime.lists_settled = True
