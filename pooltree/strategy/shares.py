"""Share arithmetic the strategy needs on the heartbeat hot path (yt-semantics §e.2), on plain Python floats.

The rules themselves have one definition, :mod:`pooltree.fairshare.status` (numpy, vectorised over elements):
the strategy uses it directly where it evaluates them once per fair-share update (scheduling statuses). Per
allocation it needs the local satisfaction ratio of one element, where numpy temporaries would cost several times
more than a 5-element loop; :func:`local_satisfaction_ratio` here is that rule's float twin, and
``tests/strategy/test_shares_agree.py`` proves the two agree on every branch.
"""

from __future__ import annotations

from collections.abc import Sequence

from pooltree.fairshare.status import (
    INFINITE_SATISFACTION_RATIO,
    RATIO_COMPARISON_PRECISION,
    RATIO_COMPUTATION_PRECISION,
)
from pooltree.resources import RESOURCE_COUNT

__all__ = [
    "EPSILON",
    "INFINITE_SATISFACTION_RATIO",
    "SMALL_EPSILON",
    "add_floats",
    "blocked_mask",
    "local_satisfaction_ratio",
    "sub_floats",
]

SMALL_EPSILON = RATIO_COMPUTATION_PRECISION
EPSILON = RATIO_COMPARISON_PRECISION

Floats = Sequence[float]


def blocked_mask(fair_share: Floats, demand_share: Floats) -> tuple[bool, ...]:
    """Resource r is blocked when the fair share already covers the demand: FS_r >= Demand_r."""
    return tuple(f >= d for f, d in zip(fair_share, demand_share, strict=True))


def local_satisfaction_ratio(usage_share: Floats, fair_share: Floats, blocked: Sequence[bool]) -> float:
    """How satisfied an element is with current usage relative to its fair share (§e.2); smaller is hungrier.

    Same rule and results as :func:`pooltree.fairshare.status.local_satisfaction_ratio` for one element.
    """
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


def add_floats(target: list[float], values: Floats) -> None:
    """target += values in place (an allocation's ``amounts``, a delta or a discount)."""
    for r in range(RESOURCE_COUNT):
        target[r] += values[r]


def sub_floats(target: list[float], values: Floats) -> None:
    """target -= values in place."""
    for r in range(RESOURCE_COUNT):
        target[r] -= values[r]
