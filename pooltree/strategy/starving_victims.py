"""The tree's ``allow_preemption_from_starving_operations``: whether a starving operation's allocations may be
preempted.

YTsaurus's ``FindPreemptionBlockingAncestor`` (newer scheduling policy): when the option is false and the operation
itself is starving (``starving`` or ``aggressively_starving``), the operation is its own blocking element, so none
of its allocations is a preemption candidate; when it is true, the operation's own starvation protects nothing.
Older YTsaurus (and pooltree when the option is not set) applies the COMPAT option ``preemption_check_starvation``
(default true) to the operation and every ancestor alike. pooltree keeps that walk for the ancestors (and the
satisfaction checks of ``preemption_check_satisfaction``), so the option decides only the operation's own
starvation; YTsaurus's newest policy no longer checks ancestors at all, which pooltree does not follow because
the COMPAT options are still accepted and documented there.
"""

from __future__ import annotations

from pooltree.strategy.elements import _Element
from pooltree.strategy.model import StarvationStatus
from pooltree.strategy.snapshot import StrategyConfig

_NON_STARVING = StarvationStatus.NON_STARVING


def starvation_blocks(config: StrategyConfig, cursor: _Element, operation: _Element) -> bool:
    """Whether ``cursor`` (the operation or one of its ancestors) blocks preemption of ``operation``'s allocations
    because it is starving."""
    if cursor.starvation == _NON_STARVING:
        return False
    allow = config.allow_preemption_from_starving_operations
    if cursor is operation and allow is not None:
        return not allow
    return config.preemption_check_starvation
