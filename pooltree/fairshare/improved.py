"""The improved fair-share-by-fit-factor computation (tree ``enable_improved_fair_share_by_fit_factor_computation``).

YTsaurus's vector HDRF, in this mode, builds a pool's FSBFF so that children whose functions jump at the same fit
factor jump one after another, in child order ("each child's critical points expand into a stepwise segment, one
step per child"), instead of all at once. A pool can then take some of the simultaneous jumps: two pools holding
one 0.6-cluster gang each get 0.6 + 0 instead of 0 + 0. The top-down pass works with vector targets: a pool given
a target finds the largest fit factor whose children's (left) values fit in it, then its children take their
jumps at that fit factor in order while the total still fits (the steps of its own function). With the
``..._distribution_gap`` variant, a child whose jump does not fit is skipped and later children may still take
theirs (the remaining gap is distributed greedily).

How this module represents the steps: the sub-jumps at one fit factor are consecutive points with the same
argument (a "staircase" of vertical pieces); ``fair_share_by_suggestion`` turns each into its own "wait, then
jump" step of FSBS. YTsaurus stretches the fit-factor axis instead (its code for this mode is not public); the
values of FSBS and the shares are the same, the fit factors reported differ.

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


def split_target(
    values: Callable[[float], np.ndarray],
    target: np.ndarray,
    fit_range: float,
    epsilon: float,
    *,
    distribution_gap: bool,
    inverse_lower_bound: Callable[[float, float, Callable[[float], bool]], float],
) -> np.ndarray:
    """Children's targets for a pool's target: the largest fit factor whose children's values fit, then their
    jumps there in child order while they fit (all that fit with ``distribution_gap``)."""
    bound = np.asarray(target, dtype=float) + epsilon
    fit = inverse_lower_bound(0.0, fit_range, lambda f: bool(np.all(values(f).sum(axis=0) <= bound)))
    chosen = values(fit).copy()
    if fit >= fit_range:
        return chosen
    after = values(float(np.nextafter(fit, np.inf)))
    total = chosen.sum(axis=0)
    for k in range(len(chosen)):
        jump = after[k] - chosen[k]
        if not np.any(jump > JUMP_EPSILON):
            continue
        if np.all(total + jump <= bound):
            chosen[k] = after[k]
            total = total + jump
        elif not distribution_gap:
            break
    return chosen
