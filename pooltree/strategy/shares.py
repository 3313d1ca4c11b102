"""Share arithmetic the strategy needs on the heartbeat hot path (yt-semantics §e.2), on plain Python floats.

The rules themselves have one definition, :mod:`pooltree.fairshare.status` (numpy, vectorised over elements):
the strategy uses it directly where it evaluates them once per fair-share update (scheduling statuses). Per
allocation it needs the local satisfaction ratio of one element, where numpy temporaries would cost several times
more than a 5-element loop; :func:`local_satisfaction_ratio` here is that rule's float twin, and
``tests/strategy/test_shares_agree.py`` proves the two agree on every branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

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
    "fits_floats",
    "local_satisfaction_ratio",
    "minus_floats",
    "plus_floats",
    "satisfaction_ratios",
    "share_floats",
    "sub_floats",
    "usage_satisfaction_ratio",
]

SMALL_EPSILON = RATIO_COMPUTATION_PRECISION
EPSILON = RATIO_COMPARISON_PRECISION

Floats = Sequence[float]

if RESOURCE_COUNT != 5:  # the unrolled helpers below spell out the five resources
    raise ImportError(f"pooltree.strategy.shares expects 5 resources, got {RESOURCE_COUNT}")


def blocked_mask(fair_share: Floats, demand_share: Floats) -> tuple[bool, ...]:
    """Resource r is blocked when the fair share already covers the demand: FS_r >= Demand_r."""
    return tuple(f >= d for f, d in zip(fair_share, demand_share, strict=True))


def local_satisfaction_ratio(usage_share: Floats, fair_share: Floats, blocked: Sequence[bool]) -> float:
    """How satisfied an element is with current usage relative to its fair share (§e.2); smaller is hungrier.

    Same rule and results as :func:`pooltree.fairshare.status.local_satisfaction_ratio` for one element. Written
    out for the five resources (a start and a finish each ask it; loops over ``zip`` cost a start ~4 us): the same
    comparisons and divisions in the same order as the loops it replaced
    (``tests/strategy/test_shares_agree.py``).
    """
    if max(fair_share) <= SMALL_EPSILON:  # every component nearly zero (shares are never NaN)
        return INFINITE_SATISFACTION_RATIO
    u0, u1, u2, u3, u4 = usage_share
    f0, f1, f2, f3, f4 = fair_share
    if u0 > f0 or u1 > f1 or u2 > f2 or u3 > f3 or u4 > f4:
        return _above_ratio(u0, u1, u2, u3, u4, f0, f1, f2, f3, f4)
    b0, b1, b2, b3, b4 = blocked
    if b0 and b1 and b2 and b3 and b4:  # every resource blocked: the smallest ratio
        worst = INFINITE_SATISFACTION_RATIO
        ratio = 1.0 if f0 == 0.0 else u0 / f0
        if ratio < worst:
            worst = ratio
        ratio = 1.0 if f1 == 0.0 else u1 / f1
        if ratio < worst:
            worst = ratio
        ratio = 1.0 if f2 == 0.0 else u2 / f2
        if ratio < worst:
            worst = ratio
        ratio = 1.0 if f3 == 0.0 else u3 / f3
        if ratio < worst:
            worst = ratio
        ratio = 1.0 if f4 == 0.0 else u4 / f4
        if ratio < worst:
            worst = ratio
        return worst
    best = 0.0  # the largest ratio over the open resources with a fair share
    if not b0 and f0 != 0.0 and u0 / f0 > best:
        best = u0 / f0
    if not b1 and f1 != 0.0 and u1 / f1 > best:
        best = u1 / f1
    if not b2 and f2 != 0.0 and u2 / f2 > best:
        best = u2 / f2
    if not b3 and f3 != 0.0 and u3 / f3 > best:
        best = u3 / f3
    if not b4 and f4 != 0.0 and u4 / f4 > best:
        best = u4 / f4
    return best


def usage_satisfaction_ratio(
    usage: Floats, total: Floats, fair_share: Floats, blocked: Sequence[bool]
) -> float:
    """``local_satisfaction_ratio(share_floats(usage, total), fair_share, blocked)`` in one call (an operation's
    key at every start and finish, `BestLeaf.refresh_leaf`): the usage share's divisions written in, a tuple
    instead of ``share_floats``' list, then the one ratio rule; the same divisions, comparisons and results
    (``tests/strategy/test_usage_satisfaction.py``)."""
    t0, t1, t2, t3, t4 = total
    return local_satisfaction_ratio(
        (
            usage[0] / t0 if t0 > 0 else 0.0,
            usage[1] / t1 if t1 > 0 else 0.0,
            usage[2] / t2 if t2 > 0 else 0.0,
            usage[3] / t3 if t3 > 0 else 0.0,
            usage[4] / t4 if t4 > 0 else 0.0,
        ),
        fair_share,
        blocked,
    )


def _above_ratio(
    u0: float,
    u1: float,
    u2: float,
    u3: float,
    u4: float,
    f0: float,
    f1: float,
    f2: float,
    f3: float,
    f4: float,
) -> float:
    """`local_satisfaction_ratio` where some usage is above the fair share: the largest ratio, a zero fair share
    giving 0 for zero usage and infinity otherwise, capped at infinity."""
    inf = INFINITE_SATISFACTION_RATIO
    best = 0.0
    ratio = (0.0 if u0 == 0.0 else inf) if f0 == 0.0 else u0 / f0
    if ratio > best:
        best = ratio
    ratio = (0.0 if u1 == 0.0 else inf) if f1 == 0.0 else u1 / f1
    if ratio > best:
        best = ratio
    ratio = (0.0 if u2 == 0.0 else inf) if f2 == 0.0 else u2 / f2
    if ratio > best:
        best = ratio
    ratio = (0.0 if u3 == 0.0 else inf) if f3 == 0.0 else u3 / f3
    if ratio > best:
        best = ratio
    ratio = (0.0 if u4 == 0.0 else inf) if f4 == 0.0 else u4 / f4
    if ratio > best:
        best = ratio
    return min(best, inf)


def satisfaction_ratios(
    usage: Sequence[Floats],
    fair_shares: Sequence[Floats],
    blocked: Sequence[Sequence[bool]],
    total: Floats,
) -> list[float]:
    """Per row, ``local_satisfaction_ratio([u / t if t > 0 else 0.0 ...], fair_share, blocked)``: the same floats,
    bit for bit, computed in bulk (the incremental publish re-keys thousands of operations when usage moves).

    Each value comes from the same IEEE operations as the per-row loop (one division per resource, comparisons,
    a maximum or minimum over values that are never NaN); a row with a NaN, an infinity or a negative sign
    (``-0.0`` included, where a maximum's choice between equal zeros would show) is left to the loop itself.
    """
    rows = len(usage)
    if rows == 0:
        return []
    size = (
        rows * RESOURCE_COUNT
    )  # (one flat read per column set: faster than numpy's per-row shape discovery)
    usage_array = np.fromiter(chain.from_iterable(usage), dtype=float, count=size).reshape(
        rows, RESOURCE_COUNT
    )
    fair = np.fromiter(chain.from_iterable(fair_shares), dtype=float, count=size).reshape(
        rows, RESOURCE_COUNT
    )
    blocked_array = np.fromiter(chain.from_iterable(blocked), dtype=bool, count=size).reshape(
        rows, RESOURCE_COUNT
    )
    totals = np.array(total, dtype=float)
    positive = totals > 0
    infinite = INFINITE_SATISFACTION_RATIO
    with np.errstate(all="ignore"):
        share = np.where(positive, usage_array / np.where(positive, totals, 1.0), 0.0)
        ratio = share / fair
    odd = (~np.isfinite(share) | ~np.isfinite(fair) | np.signbit(share) | np.signbit(fair)).any(axis=1)
    zero = fair == 0.0
    # all usage within the fair share, every resource blocked: the least ratio (1 where the fair share is 0)
    least = np.minimum(np.where(zero, 1.0, ratio).min(axis=1), infinite)
    # within, some resource not blocked: the greatest ratio over the unblocked resources with a fair share
    greatest = np.where(~blocked_array & ~zero, ratio, 0.0).max(axis=1)
    # some usage above the fair share: the greatest ratio (infinite where the fair share is 0 and usage is not)
    above = np.where(zero, np.where(share == 0.0, 0.0, infinite), ratio).max(axis=1)
    above = np.minimum(np.maximum(above, 0.0), infinite)
    result = np.where(
        fair.max(axis=1) <= SMALL_EPSILON,
        infinite,
        np.where((share > fair).any(axis=1), above, np.where(blocked_array.all(axis=1), least, greatest)),
    )
    values: list[float] = result.tolist()
    for row in np.flatnonzero(odd).tolist():
        values[row] = local_satisfaction_ratio(
            [u / t if t > 0 else 0.0 for u, t in zip(usage[row], total, strict=True)],
            fair_shares[row],
            blocked[row],
        )
    return values


def add_floats(target: list[float], values: Floats) -> None:
    """target += values in place (an allocation's ``amounts``, a delta or a discount); unrolled for speed."""
    target[0] += values[0]
    target[1] += values[1]
    target[2] += values[2]
    target[3] += values[3]
    target[4] += values[4]


def sub_floats(target: list[float], values: Floats) -> None:
    """target -= values in place; unrolled for speed."""
    target[0] -= values[0]
    target[1] -= values[1]
    target[2] -= values[2]
    target[3] -= values[3]
    target[4] -= values[4]


def plus_floats(a: Floats, b: Floats) -> list[float]:
    """A new list a + b (elementwise); unrolled for speed."""
    return [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4]]


def minus_floats(a: Floats, b: Floats) -> list[float]:
    """A new list a - b (elementwise); unrolled for speed."""
    return [a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4]]


def share_floats(values: Floats, total: Floats) -> list[float]:
    """``[v / t if t > 0 else 0.0 for v, t in zip(values, total)]`` (a usage over the tree's resources); unrolled."""
    t0, t1, t2, t3, t4 = total
    return [
        values[0] / t0 if t0 > 0 else 0.0,
        values[1] / t1 if t1 > 0 else 0.0,
        values[2] / t2 if t2 > 0 else 0.0,
        values[3] / t3 if t3 > 0 else 0.0,
        values[4] / t4 if t4 > 0 else 0.0,
    ]


def fits_floats(amounts: Floats, available: Floats, epsilon: float = 1e-9) -> bool:
    """Every amount fits what is available (up to ``epsilon``): the per-allocation fit check. Written out for the
    five resources (a start asks it two or three times): the same comparisons in the same order as the loop it
    replaced (``tests/strategy/test_fits_floats.py``)."""
    return not (
        amounts[0] > available[0] + epsilon
        or amounts[1] > available[1] + epsilon
        or amounts[2] > available[2] + epsilon
        or amounts[3] > available[3] + epsilon
        or amounts[4] > available[4] + epsilon
    )
