"""Share comparisons the strategy needs (yt-semantics §c, §e.2), on plain Python floats for speed.

The strategy evaluates these per allocation on the heartbeat hot path, so they avoid numpy temporaries:
a 5-element Python loop is several times faster than the equivalent numpy expression.
"""

from __future__ import annotations

from collections.abc import Sequence

from pooltree.strategy.model import SchedulingStatus

SMALL_EPSILON = 1e-9
EPSILON = 1e-4
INFINITE_SATISFACTION_RATIO = 1e9

Floats = Sequence[float]


def blocked_mask(fair_share: Floats, demand_share: Floats) -> tuple[bool, ...]:
    """Resource r is blocked when the fair share already covers the demand: FS_r >= Demand_r."""
    return tuple(f >= d for f, d in zip(fair_share, demand_share, strict=True))


def strictly_dominates_non_blocked(lhs: Floats, rhs: Floats, blocked: Sequence[bool]) -> bool:
    """All blocked: some lhs_r > rhs_r. Otherwise lhs_r > rhs_r for every non-blocked r."""
    if all(blocked):
        return any(a > b for a, b in zip(lhs, rhs, strict=True))
    return all(a > b for a, b, is_blocked in zip(lhs, rhs, blocked, strict=True) if not is_blocked)


def strictly_dominates(lhs: Floats, rhs: Floats) -> bool:
    return all(a > b for a, b in zip(lhs, rhs, strict=True))


def dominates(lhs: Floats, rhs: Floats) -> bool:
    return all(a >= b for a, b in zip(lhs, rhs, strict=True))


def local_satisfaction_ratio(usage_share: Floats, fair_share: Floats, blocked: Sequence[bool]) -> float:
    """How satisfied an element is with current usage relative to its fair share (§e.2); smaller is hungrier."""
    if all(f <= SMALL_EPSILON for f in fair_share):
        return INFINITE_SATISFACTION_RATIO
    over = False
    for u, f in zip(usage_share, fair_share, strict=True):
        if u > f:
            over = True
            break
    if over:
        best = 0.0
        for u, f in zip(usage_share, fair_share, strict=True):
            if f == 0.0:
                ratio = 0.0 if u == 0.0 else INFINITE_SATISFACTION_RATIO
            else:
                ratio = u / f
            best = max(best, ratio)
        return min(best, INFINITE_SATISFACTION_RATIO)
    if all(blocked):
        worst = INFINITE_SATISFACTION_RATIO
        for u, f in zip(usage_share, fair_share, strict=True):
            ratio = 1.0 if f == 0.0 else u / f
            worst = min(worst, ratio)
        return worst
    best = 0.0
    for u, f, is_blocked in zip(usage_share, fair_share, blocked, strict=True):
        if not is_blocked and f != 0.0:
            best = max(best, u / f)
    return best


def scheduling_status(
    usage_share: Floats,
    fair_share: Floats,
    demand_share: Floats,
    tolerance: float,
    *,
    is_operation: bool,
    schedulable: bool = True,
) -> SchedulingStatus:
    """Normal or BelowFairShare per §c: below iff min(FS × tolerance, Demand) strictly dominates (non-blocked) usage."""
    if is_operation:
        if not schedulable:
            return SchedulingStatus.NORMAL
        if all(f + EPSILON >= d for f, d in zip(fair_share, demand_share, strict=True)):
            tolerance = 1.0
    bound = [min(f * tolerance, d) for f, d in zip(fair_share, demand_share, strict=True)]
    blocked = blocked_mask(fair_share, demand_share)
    if strictly_dominates_non_blocked(bound, usage_share, blocked):
        return SchedulingStatus.BELOW_FAIR_SHARE
    return SchedulingStatus.NORMAL
