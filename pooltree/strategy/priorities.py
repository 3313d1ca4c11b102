"""Operations' preemption priorities from starvation (§e.2) and the configuration of their preemptible lists (§d).

Both are read by the publish of a fair-share update, in full (`publish.py`) and incrementally (`changes.py`); the
preemptive stages read an operation's priority (`preemption.py`).
"""

from __future__ import annotations

from pooltree.strategy.elements import StarvationState, _Element, _lists_state
from pooltree.strategy.model import PRIORITY_OF_RANK, STARVATION_RANK, PreemptionPriority
from pooltree.strategy.state import StrategyState


def priority_of(element: _Element) -> PreemptionPriority:
    """The operation's preemption priority (``NONE`` without a runtime)."""
    return element.op.preemption_priority if element.op is not None else PreemptionPriority.NONE


def update_priorities(state: StrategyState) -> None:
    """Operation preemption priority from starving ancestors-or-self (§e.2, scheduling_preemption_priority_scope)."""
    by_priority: dict[PreemptionPriority, list[_Element]] = {
        PreemptionPriority.NORMAL: [],
        PreemptionPriority.AGGRESSIVE: [],
    }
    own_only = state.config.scheduling_preemption_priority_scope == "operation_only"
    # per pool: the most severe starvation status among the pool and its ancestors (parents come first)
    severity: dict[str, int] = {}
    elements = state.elements
    starvation = state.starvation
    for element_id in state.tree.order:
        element = elements[element_id]
        if element.is_op:
            element.starvation = starvation.get(element_id, StarvationState()).status
            rank = STARVATION_RANK[element.starvation]
            if not own_only and element.parent is not None:
                rank = max(rank, severity[element.parent.id])
            priority = PRIORITY_OF_RANK[rank]
            if element.op is not None:
                element.op.preemption_priority = priority
            if rank:
                by_priority[priority].append(element)
        else:
            rank = STARVATION_RANK[element.starvation]
            if element.parent is not None:
                rank = max(rank, severity[element.parent.id])
            severity[element_id] = rank
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
    before = _lists_state(lists)
    lists.rebalance()
    runtime.lists_settled = _lists_state(lists) == before
