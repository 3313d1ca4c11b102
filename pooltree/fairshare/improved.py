"""The improved fair-share-by-fit-factor computation (tree ``enable_improved_fair_share_by_fit_factor_computation``).

YTsaurus's vector HDRF (``TCompositeElement::ComputeImprovedFairShareByFitFactor`` in
``yt/yt/library/vector_hdrf/fair_share_update.cpp``), in this mode, builds a pool's FSBFF so that children whose
functions jump at the same fit factor jump one after another, in child order, instead of all at once: every
critical point (suggestion, child) of the children's functions, sorted by suggestion then child index, gets a unit
of its own on a stretched fit-factor axis. A pool can then take some of the simultaneous jumps: two pools holding
one 0.6-cluster gang each get 0.6 + 0 instead of 0 + 0. The top-down pass works with vector targets
(``ComputeAndSetFairShare(TResourceVector)``): a pool given a target finds the largest fit factor whose
children's values fit in it (a binary search on the stretched axis, so the children's jumps at one suggestion are
taken in order while they fit). With the ``..._distribution_gap`` variant, when the children's total then falls
short of the target by more than Epsilon, the search is repeated with the target plus Epsilon: a step that
overshoots only by rounding is taken; a step that does not fit still stops the walk.

How this module represents the steps: the sub-jumps at one fit factor are consecutive points with the same
argument (a "staircase" of vertical pieces) instead of YTsaurus's unit-wide flat pieces between them;
``fair_share_by_suggestion`` turns each into its own "wait, then jump" step of FSBS. The values of FSBS and the
shares are the same; the fit factors reported differ.

This mode runs pool by pool in Python (it is off by default and not on the benchmark's path).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pooltree.fairshare import functions as fn

R = fn.R
JUMP_EPSILON = 1e-9


def _limits(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right limits of the piecewise-linear (x, y) at the points ``at`` (constant outside its range)."""
    last = len(x) - 1
    left = np.empty((len(at), R))
    right = np.empty((len(at), R))
    i = np.searchsorted(x, at, side="left")
    j = np.searchsorted(x, at, side="right") - 1
    for k, point in enumerate(at.tolist()):
        a = int(i[k])
        if a > last:
            left[k] = y[last]
        elif x[a] == point or a == 0:
            left[k] = y[a]
        else:
            t = (point - x[a - 1]) / (x[a] - x[a - 1])
            left[k] = y[a - 1] + (y[a] - y[a - 1]) * t
        b = int(j[k])
        if b < 0:
            right[k] = y[0]
        elif x[b] == point or b == last:
            right[k] = y[b]
        else:
            t = (point - x[b]) / (x[b + 1] - x[b])
            right[k] = y[b] + (y[b + 1] - y[b]) * t
    return left, right


def improved_sum(
    children: list[tuple[np.ndarray, np.ndarray]], scale: np.ndarray, shift: np.ndarray, right_bound: float
) -> tuple[np.ndarray, np.ndarray]:
    """One pool's FSBFF from its children's FSBS ``(s, values)``: child c contributes FSBS_c((f − shift_c) / scale_c)
    clipped to [0, 1] (``scale_c = inf``: its value at 0), on [0, ``right_bound``]; simultaneous jumps are split
    into consecutive steps in child order."""
    mapped: list[tuple[np.ndarray, np.ndarray]] = []
    points = [np.array([0.0, right_bound])]
    for (s, y), sc, sh in zip(children, scale.tolist(), shift.tolist(), strict=True):
        if not np.isfinite(sc):
            x = np.array([0.0])
            y = y[:1]
        else:
            x = s * sc + sh
        mapped.append((x, y))
        points.append(x[(x >= 0.0) & (x <= right_bound)])
    at = np.unique(np.concatenate(points))
    lefts = []
    rights = []
    for x, y in mapped:
        left, right = _limits(x, y, at)
        lefts.append(left)
        rights.append(right)
    out_x: list[float] = []
    out_y: list[np.ndarray] = []
    for k, point in enumerate(at.tolist()):
        total = np.zeros(R)
        for left in lefts:
            total = total + left[k]
        out_x.append(point)
        out_y.append(total)
        for left, right in zip(lefts, rights, strict=True):
            jump = right[k] - left[k]
            if np.any(jump != 0.0):
                total = total + jump
                out_x.append(point)
                out_y.append(total)
    x_arr = np.array(out_x)
    y_arr = np.array(out_y)
    keep = np.ones(len(x_arr), dtype=bool)
    keep[1:] = (x_arr[1:] != x_arr[:-1]) | np.any(y_arr[1:] != y_arr[:-1], axis=1)
    x_arr, y_arr = x_arr[keep], y_arr[keep]
    # Trim as YTsaurus: at the left end only the right limit, at the right end only the left limit.
    first_right = int(np.searchsorted(x_arr, x_arr[0], side="right")) - 1
    x_arr, y_arr = x_arr[first_right:], y_arr[first_right:]
    last_left = int(np.searchsorted(x_arr, x_arr[-1], side="left"))
    return x_arr[: last_left + 1], y_arr[: last_left + 1]


def sequential_sum(rows: np.ndarray) -> np.ndarray:
    """The sum of ``rows`` (k, 5) added one row after another, as YTsaurus adds children's shares (numpy's
    ``sum(axis=0)`` adds in blocks, which rounds differently: at a flat piece that meets a target exactly, one
    unit in the last place decides whether the next jump is taken)."""
    return np.add.reduceat(rows, [0], axis=0)[0] if len(rows) else np.zeros(R)


def split_target(
    values: Callable[[float], np.ndarray],
    target: np.ndarray,
    fit_range: float,
    epsilon: float,
    *,
    distribution_gap: bool,
    inverse_lower_bound: Callable[[float, float, Callable[[float], bool]], float],
) -> np.ndarray:
    """One pool's split, the reference the update's level-by-level ``distribution._split_targets`` is tested against
    (``tests/fairshare/test_improved_vectorized.py``). Children's targets for a pool's target, as YTsaurus's
    vector ``ComputeAndSetFairShare``: the largest fit
    factor whose children's values fit in the target, then their jumps there in child order while they fit
    (the steps of the stretched fit-factor axis). When the children's total then falls short of the target by
    more than ``epsilon`` in some resource, the ``distribution_gap`` variant repeats the walk with the target
    plus ``epsilon`` (so a step that overshoots only by rounding is taken); a step that does not fit still
    ends the walk, in both variants."""
    target = np.asarray(target, dtype=float)
    chosen = _walk(values, target, fit_range, inverse_lower_bound)
    if distribution_gap and np.any(target - sequential_sum(chosen) > epsilon):
        chosen = _walk(values, target + epsilon, fit_range, inverse_lower_bound)
    return chosen


def _walk(
    values: Callable[[float], np.ndarray],
    bound: np.ndarray,
    fit_range: float,
    inverse_lower_bound: Callable[[float, float, Callable[[float], bool]], float],
) -> np.ndarray:
    fit = inverse_lower_bound(0.0, fit_range, lambda f: bool(np.all(sequential_sum(values(f)) <= bound)))
    chosen = values(fit).copy()
    if fit >= fit_range:
        return chosen
    after = values(float(np.nextafter(fit, np.inf)))
    total = sequential_sum(chosen)
    for k in range(len(chosen)):
        jump = after[k] - chosen[k]
        if not np.any(jump > JUMP_EPSILON):
            continue
        if not np.all(total + jump <= bound):
            break
        chosen[k] = after[k]
        total = total + jump
    return chosen


def staircase_sums(
    base: fn.FunctionBatch,
    children: fn.FunctionBatch,
    parent_slot: np.ndarray,
    scale: np.ndarray,
    shift: np.ndarray,
    right_bound: np.ndarray,
) -> tuple[fn.FunctionBatch, np.ndarray]:
    """Pools' improved FSBFF from their plain sums ``base`` (``functions.sum_children`` of the same children):
    every vertical piece of a sum where two or more children jump becomes a staircase, the children's jumps in
    child order. ``children`` holds the children's FSBS (rows in child order, ``parent_slot`` their pool).

    Returns the new batch and a mask of the pools whose staircase could not be placed (a child jump position
    with no vertical piece of the sum exactly there): the caller builds those with ``improved_sum``.
    """
    failed = np.zeros(base.size, dtype=bool)
    jumps = _children_jumps(children, parent_slot, scale, shift, right_bound)
    if jumps is None:
        return base, failed
    j_pos, j_parent, jump = jumps
    # Groups of jumps at one (pool, position); only groups of two or more children change the sum.
    first = np.ones(len(j_pos), dtype=bool)
    first[1:] = (j_parent[1:] != j_parent[:-1]) | (j_pos[1:] != j_pos[:-1])
    group = np.cumsum(first) - 1
    size = np.bincount(group)
    multi = size[group] > 1
    if not np.any(multi):
        return base, failed
    inserts_at: list[int] = []
    inserts_y: list[np.ndarray] = []
    for g in np.flatnonzero(first & multi).tolist():
        p = int(j_parent[g])
        if failed[p]:
            continue
        steps = _staircase(base, p, float(j_pos[g]), jump[g : g + int(size[group[g]]) - 1])
        if steps is None:
            failed[p] = True
            continue
        at, values = steps
        inserts_at.extend([at] * len(values))
        inserts_y.append(values)
    if not inserts_at:
        return base, failed
    return _with_points_inserted(
        base, np.array(inserts_at, dtype=np.int64), np.concatenate(inserts_y)
    ), failed


def _children_jumps(
    children: fn.FunctionBatch,
    parent_slot: np.ndarray,
    scale: np.ndarray,
    shift: np.ndarray,
    right_bound: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The children's jumps strictly inside their pool's range, on the pool's axis, as (position, pool, rise),
    sorted by pool, position and child, one per (pool, position, child); None when there is none."""
    x, y = children.x, children.y
    owner = children.owners()
    if len(x) < 2:
        return None
    finite = np.isfinite(scale)[owner]
    pos = np.zeros(len(x))
    pos[finite] = x[finite] * scale[owner[finite]] + shift[owner[finite]]
    seg = np.flatnonzero((owner[:-1] == owner[1:]) & finite[:-1])
    xa, xb = pos[seg], pos[seg + 1]
    # The same jump test as the sums (near-vertical pieces are jumps at their left end).
    vertical = (xb - xa) <= 1e-13 * np.maximum(1.0, np.abs(xb))
    seg = seg[vertical]
    dy = y[seg + 1] - y[seg]
    ev_pos = pos[seg]
    ev_child = owner[seg]
    ev_parent = parent_slot[ev_child]
    keep = fn.row_any(dy != 0.0) & (ev_pos > 0.0) & (ev_pos < right_bound[ev_parent])
    if not np.any(keep):
        return None
    ev_pos, ev_child, ev_parent, dy = ev_pos[keep], ev_child[keep], ev_parent[keep], dy[keep]
    order = np.lexsort((ev_child, ev_pos, ev_parent))
    ev_pos, ev_child, ev_parent, dy = ev_pos[order], ev_child[order], ev_parent[order], dy[order]
    # One jump per (pool, position, child): a child's own consecutive vertical pieces there are one jump.
    new = np.ones(len(ev_pos), dtype=bool)
    new[1:] = (
        (ev_parent[1:] != ev_parent[:-1]) | (ev_pos[1:] != ev_pos[:-1]) | (ev_child[1:] != ev_child[:-1])
    )
    starts = np.flatnonzero(new)
    return ev_pos[starts], ev_parent[starts], np.add.reduceat(dy, starts, axis=0)


def _staircase(
    base: fn.FunctionBatch, p: int, position: float, rises: np.ndarray
) -> tuple[int, np.ndarray] | None:
    """The steps inside pool ``p``'s vertical piece at ``position`` (YTsaurus's improved FSBFF: simultaneous
    jumps of children one after another, in child order): where they go in ``base`` and their values (the
    left limit plus the ``rises`` of all children but the last, at most the right limit); None when the sum has
    no vertical piece exactly there."""
    lo, hi = int(base.offsets[p]), int(base.offsets[p + 1])
    xs = base.x[lo:hi]
    a = int(np.searchsorted(xs, position, side="left"))
    b = int(np.searchsorted(xs, position, side="right"))
    if b - a != 2:
        return None
    left, right = base.y[lo + a], base.y[lo + a + 1]
    return lo + a + 1, np.minimum(left + np.cumsum(rises, axis=0), right)


def _with_points_inserted(base: fn.FunctionBatch, where: np.ndarray, new_y: np.ndarray) -> fn.FunctionBatch:
    """``base`` with a point of value ``new_y[k]`` before point ``where[k]``, at the position of the one before."""
    out_x = np.insert(base.x, where, base.x[where - 1])
    out_y = np.insert(base.y, where, new_y, axis=0)
    owner_of_insert = np.searchsorted(base.offsets, where, side="right") - 1
    added = np.bincount(owner_of_insert, minlength=base.size)
    offsets = base.offsets + np.concatenate([[0], np.cumsum(added)])
    return fn.FunctionBatch(offsets.astype(np.int64), out_x, out_y)
