"""The numpy reference of the two per-level passes of the fair-share functions (yt-semantics §b.5), step by step.

``fair_share_by_suggestion_numpy`` (FSBS = FSBFF ∘ MFFBS) and ``sum_functions_numpy`` (a pool's FSBFF, the sum of
its children's FSBS) compute, for a whole batch at once, what the compiled kernels (``_kernels.c``) compute
function by function: ``functions.py`` runs these when the kernels are not built or are switched off
(``use_compiled_kernels(False)``), and the tests compare both. Each step is a plain function over arrays; the
constants and helpers here are shared with the operations' closed form in ``functions.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pooltree.fairshare.batch import (
    FunctionBatch,
    R,
    compress,
    offsets_from_counts,
    row_any,
    row_max,
    row_min,
    sort_by_group,
)

# Tolerances: values above a limit by less than this are treated as at the limit (float noise of sums).
LIMIT_TOLERANCE = 1e-12


# Suggestions below this are rounding noise of (value − guarantee) and count as 0.
ZERO_SUGGESTION = 1e-15


# Suggestions this close below 1 are rounding noise of sums that reach the whole cluster, and count as 1.
FULL_SUGGESTION_TOLERANCE = 1e-12


def snap_suggestions(s: np.ndarray) -> np.ndarray:
    """Round suggestions that are rounding noise away from 0 or 1 to it, in place (and return them).

    sigma is a sum over children; summed in another order, a pool that takes the whole of a resource may
    reach 1 - 4e-16 instead of 1. Left there, its FSBS would jump at that point and take the right limit at
    s = 1 instead of the left one: the order of summation would decide the value at the end.
    """
    s[s < ZERO_SUGGESTION] = 0.0
    s[(s < 1.0) & (s > 1.0 - FULL_SUGGESTION_TOLERANCE)] = 1.0
    return s


def _envelope_breakpoints(
    h0: np.ndarray, slope: np.ndarray, t_max: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints t in (0, t_max) of max over lines ``h0 + t * slope`` (rows are segments).

    Walks the upper envelope from t = 0: from the current top line, the next top line is the steeper line
    that crosses it first. Returns (row index, t) pairs sorted by row then t.
    """
    rows_out: list[np.ndarray] = []
    ts_out: list[np.ndarray] = []
    m, lines = h0.shape
    if m == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    rows = np.arange(m)
    # Current top line at t = 0: highest value, ties broken by the steepest slope.
    top = h0.max(axis=1, keepdims=True)
    at_top = h0 >= top
    current = np.argmax(np.where(at_top, slope, -np.inf), axis=1)
    t_now = np.zeros(m)
    for _ in range(lines):
        if len(rows) == 0:
            break
        cur_h = h0[rows, current]
        cur_s = slope[rows, current]
        steeper = slope[rows] > cur_s[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = (cur_h[:, None] - h0[rows]) / (slope[rows] - cur_s[:, None])
        cross = np.where(steeper & (cross >= t_now[:, None]), cross, np.inf)
        best = cross.min(axis=1)
        # Among lines crossing at the same point, continue with the steepest.
        ties = cross <= best[:, None]
        nxt = np.argmax(np.where(ties, slope[rows], -np.inf), axis=1)
        # Breakpoints within 1e-12 of a segment end would only add near-duplicate points.
        go = (best < t_max[rows] - 1e-12) & (best > 1e-12)
        keep_going = best < t_max[rows]
        if np.any(go):
            rows_out.append(rows[go])
            ts_out.append(best[go])
        current = nxt[keep_going]
        t_now = best[keep_going]
        rows = rows[keep_going]
    if not rows_out:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    r = np.concatenate(rows_out)
    t = np.concatenate(ts_out)
    order = np.lexsort((t, r))
    return r[order], t[order]


def _drop_jump_onto_limit(
    first_exceeding: np.ndarray, first: np.ndarray, x: np.ndarray, y: np.ndarray, limit: np.ndarray
) -> None:
    """Cut a jump whose right limit lands on a limit that the curve then crosses (in place).

    In YTsaurus, MFFBS_r beyond limit_r is the right limit of the transposed FSBFF_r at limit_r. When
    FSBFF_r jumps onto limit_r at fit factor f* and rises above it right after, that right limit is f*
    itself: MFFBS never passes f* and FSBS keeps the jump's left value up to s = 1
    (``TestNonContinuousFairShareFunctionIsLeftContinuous``: a pool under a 40-cpu parent keeps 0.14 cpu,
    not 0.4). Only when FSBFF_r stays at the limit after the jump (a flat part) does MFFBS pass f* and FSBS
    take the right value. So the jump's right point counts as above the limits when the next point
    crosses the limit in a resource the right point already reached (within the tolerance).
    """
    count = len(x)
    j = first_exceeding - 1
    candidate = np.flatnonzero((first_exceeding < count) & (j - 1 >= first))
    if len(candidate) == 0:
        return
    right, nxt = j[candidate], first_exceeding[candidate]
    jump = x[right] == x[right - 1]
    lim = limit[candidate]
    onto = row_any((y[nxt] > lim + LIMIT_TOLERANCE) & (y[right] >= lim - LIMIT_TOLERANCE))
    hit = candidate[jump & onto]
    first_exceeding[hit] -= 1


def fair_share_by_suggestion_numpy(
    fsbff: FunctionBatch,
    guarantee_share: np.ndarray,
    limits_share: np.ndarray,
    *,
    merge_collinear: bool = True,
) -> FunctionBatch:
    """The numpy reference of ``fair_share_by_suggestion``, for a whole batch at once.

    MFFBS(s) is the largest fit factor whose FSBFF stays within ``min(guarantee_r + s, limit_r)`` in every
    resource (limits and guarantees clamped to the function's range first, as in YTsaurus). Equivalently the
    graph of FSBS is the FSBFF curve re-parametrised by ``sigma(f) = max(0, max_r FSBFF_r(f) - guarantee_r)``
    and cut where the curve first exceeds the limits. Jumps of FSBFF become "wait, then jump" (the value
    stays at the left limit until the suggestion covers the right limit); flat parts of sigma become jumps
    of FSBS whose left value is taken (left-continuity).

    ``merge_collinear=False`` skips the collinear pass of ``compress`` (operations' functions, built from
    the closed form, almost never have collinear points: 8 of 56,000 in the 1k/10k benchmark).
    """
    guarantee, limit = _clamped_to_range(fsbff, guarantee_share, limits_share)
    pieces = _pieces_within_limits(fsbff, guarantee, limit)
    path = _path_points(fsbff, pieces, _extra_points(pieces))
    s = np.maximum(0.0, row_max(path.sigma - guarantee[path.owner]))
    # Suggestions within rounding noise of 0 are 0: the value at s = 0 is then the right limit there (the
    # guarantee), whatever order the children's sums were accumulated in; the same near 1.
    snap_suggestions(s)
    return _extended_to_full_suggestion(fsbff.size, s, path, merge_collinear)


def _clamped_to_range(
    fsbff: FunctionBatch, guarantee_share: np.ndarray, limits_share: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """YTsaurus's FSBS: guarantee and limits clamped to the range of the function's values (left to right)."""
    value_left, value_right = fsbff.y[fsbff.offsets[:-1]], fsbff.y[fsbff.offsets[1:] - 1]
    limit = np.minimum(np.maximum(limits_share, value_left), value_right)
    return np.minimum(np.maximum(guarantee_share, value_left), limit), limit


@dataclass(frozen=True, slots=True)
class _Pieces:
    """The pieces ``index -> index + 1`` of FSBFF whose start is within the limits, with their ends, the owner's
    guarantee, the part of each kept (``t_max``, 1: whole) and the last points of the functions never cut."""

    index: np.ndarray
    owner: np.ndarray
    end_kept: np.ndarray
    xa: np.ndarray
    xb: np.ndarray
    ya: np.ndarray
    yb: np.ndarray
    dy: np.ndarray
    vertical: np.ndarray
    guarantee: np.ndarray
    t_max: np.ndarray
    tilted: np.ndarray
    uncut_ends: np.ndarray


def _pieces_within_limits(fsbff: FunctionBatch, guarantee: np.ndarray, limit: np.ndarray) -> _Pieces:
    """MFFBS stops where FSBFF first exceeds the limits: each function's pieces before that point, the last one
    cut at the limit crossing (a jump onto a limit the curve then crosses ends there, `_drop_jump_onto_limit`)."""
    offsets, x, y = fsbff.offsets, fsbff.x, fsbff.y
    first = offsets[:-1]
    owner = np.repeat(np.arange(fsbff.size), np.diff(offsets))
    count = len(x)
    point_index = np.arange(count)
    exceeds = row_any(y > limit[owner] + LIMIT_TOLERANCE)
    first_exceeding = np.minimum.reduceat(np.where(exceeds, point_index, count), first)
    _drop_jump_onto_limit(first_exceeding, first, x, y, limit)
    cut = first_exceeding < count
    keep_point = point_index < np.where(cut, first_exceeding, count)[owner]
    seg = np.flatnonzero(keep_point[:-1] & (owner[:-1] == owner[1:]))
    seg_owner = owner[seg]
    seg_end_kept = keep_point[seg + 1]
    xa, xb = x[seg], x[seg + 1]
    ya, yb = y[seg], y[seg + 1]
    dy = yb - ya
    vertical = xb == xa
    l_seg = limit[seg_owner]
    # Parameter range of every kept segment: 1, or up to the limit crossing for a cut tilted segment.
    with np.errstate(divide="ignore", invalid="ignore"):
        t_cross = np.where(yb > l_seg + LIMIT_TOLERANCE, (l_seg - ya) / dy, np.inf)
    t_max = np.where(seg_end_kept, 1.0, np.clip(row_min(t_cross), 0.0, 1.0))
    t_max = np.where(~seg_end_kept & vertical, 0.0, t_max)
    return _Pieces(
        index=seg,
        owner=seg_owner,
        end_kept=seg_end_kept,
        xa=xa,
        xb=xb,
        ya=ya,
        yb=yb,
        dy=dy,
        vertical=vertical,
        guarantee=guarantee[seg_owner],
        t_max=t_max,
        tilted=~vertical & (t_max > 0),
        uncut_ends=(offsets[1:] - 1)[~cut],
    )


def _sigma_breakpoints(pieces: _Pieces) -> tuple[np.ndarray, np.ndarray]:
    """Where sigma (the top resource above its guarantee) changes its resource inside a tilted piece: (piece,
    parameter t) of each such breakpoint."""
    tilted_idx = np.flatnonzero(pieces.tilted)
    h0 = np.concatenate(
        [pieces.ya[tilted_idx] - pieces.guarantee[tilted_idx], np.zeros((len(tilted_idx), 1))], axis=1
    )
    slopes = np.concatenate([pieces.dy[tilted_idx], np.zeros((len(tilted_idx), 1))], axis=1)
    top_start = np.argmax(h0, axis=1)
    h1 = h0 + slopes * pieces.t_max[tilted_idx, None]
    top_end = np.argmax(h1, axis=1)
    changes = np.flatnonzero(top_start != top_end)
    bp_rows, bp_t = _envelope_breakpoints(h0[changes], slopes[changes], pieces.t_max[tilted_idx[changes]])
    bp_seg = tilted_idx[changes[bp_rows]] if len(bp_rows) else np.zeros(0, dtype=np.int64)
    return bp_seg, bp_t


def _extra_points(pieces: _Pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points of FSBS inside pieces, as (piece, t, kind), sorted by piece then t: sigma's breakpoints and the
    cut ends of tilted pieces (kind 0), and the "wait" point of every whole vertical piece (kind 1, a jump of
    FSBFF: the value stays at its left limit until the suggestion covers the right one)."""
    bp_seg, bp_t = _sigma_breakpoints(pieces)
    cut_tilted = np.flatnonzero(~pieces.end_kept & pieces.tilted)
    vert_full = np.flatnonzero(pieces.vertical & pieces.end_kept)
    extra_seg = np.concatenate([bp_seg, cut_tilted, vert_full])
    extra_t = np.concatenate([bp_t, pieces.t_max[cut_tilted], np.full(len(vert_full), 0.5)])
    extra_kind = np.concatenate(
        [np.zeros(len(bp_seg), np.int8), np.zeros(len(cut_tilted), np.int8), np.ones(len(vert_full), np.int8)]
    )
    order = sort_by_group(extra_t, extra_seg)
    return extra_seg[order], extra_t[order], extra_kind[order]


@dataclass(frozen=True, slots=True)
class _Path:
    """The points of FSBS in order, function by function: value, fit factor, the value sigma is read from (the
    right limit at a "wait" point) and the function each belongs to."""

    values: np.ndarray
    fits: np.ndarray
    sigma: np.ndarray
    owner: np.ndarray


def _path_points(
    fsbff: FunctionBatch, pieces: _Pieces, extras: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> _Path:
    """FSBFF re-parametrised: every kept piece's start, its extra points, and the last point of every function
    never cut, in order; points inside a piece are interpolated."""
    extra_seg, extra_t, extra_kind = extras
    seg, ends = pieces.index, pieces.uncut_ends
    # Everything is keyed by the position of its piece in ``seg``.
    nseg = len(seg)
    end_pos = np.searchsorted(seg, ends - 1)  # the piece that ends there (functions have ≥ 2 points)
    key = np.concatenate([np.arange(nseg), extra_seg, end_pos])
    merge = np.argsort(key, kind="stable")
    t_all = np.concatenate([np.zeros(nseg), extra_t, np.ones(len(ends))])[merge]
    kind = np.concatenate([np.zeros(nseg, np.int8), extra_kind, np.full(len(ends), 2, np.int8)])[merge]
    seg_pos = key[merge]
    src = np.concatenate([seg, seg[extra_seg], ends])[merge]
    xa, xb, ya, yb, dy = pieces.xa, pieces.xb, pieces.ya, pieces.yb, pieces.dy
    # Piece starts and function ends are existing points; only points inside a piece are interpolated.
    values = fsbff.y[src]
    fits = fsbff.x[src]
    inside = np.flatnonzero((kind == 0) & (t_all != 0))
    if len(inside):
        sp = seg_pos[inside]
        t_in = t_all[inside]
        t_col = t_in[:, None]
        values[inside] = np.where(t_col < 0.5, ya[sp] + dy[sp] * t_col, yb[sp] - dy[sp] * (1.0 - t_col))
        fits[inside] = xa[sp] + (xb[sp] - xa[sp]) * t_in
    # Vertical "wait" point: value stays at the left limit, suggestion already at the right limit.
    wait = np.flatnonzero(kind == 1)
    sigma_values = values
    if len(wait):
        sigma_values = values.copy()
        values[wait] = ya[seg_pos[wait]]
        fits[wait] = xa[seg_pos[wait]]
        sigma_values[wait] = yb[seg_pos[wait]]
    return _Path(values, fits, sigma_values, pieces.owner[seg_pos])


def _extended_to_full_suggestion(n: int, s: np.ndarray, path: _Path, merge_collinear: bool) -> FunctionBatch:
    """FSBS on the whole [0, 1]: a function ending below s = 1 keeps its last value up to 1."""
    values, fits = path.values, path.fits
    counts = np.bincount(path.owner, minlength=n)
    out_offsets = offsets_from_counts(counts)
    last_out = out_offsets[1:] - 1
    need_tail = s[last_out] < 1.0
    tail_owner = np.flatnonzero(need_tail)
    insert_at = out_offsets[1:][need_tail]
    s = np.insert(s, insert_at, 1.0)
    values = np.insert(values, insert_at, values[last_out[need_tail]], axis=0)
    fits = np.insert(fits, insert_at, fits[last_out[need_tail]])
    counts[tail_owner] += 1
    return compress(FunctionBatch(offsets_from_counts(counts), s, values, fits), collinear=merge_collinear)


def sum_functions_numpy(
    children: FunctionBatch,
    parent_slot: np.ndarray,
    scale: np.ndarray,
    shift: np.ndarray,
    right_bound: np.ndarray,
) -> FunctionBatch:
    """Pools' FSBFF: for every parent slot p, the sum over its children c of ``FSBS_c((f - shift_c) / scale_c)``.

    Child c's function (on [0, 1]) is placed on ``[shift_c, shift_c + scale_c]`` and extended constantly on
    both sides (its left value is 0 for FIFO children, which have no guarantees). ``scale_c = inf`` means the
    child stays at its left value (zero weight). Result on ``[0, right_bound_p]``, computed by merging the
    breakpoints of all children: slope changes and jumps are summed per position and integrated.
    """
    m = len(right_bound)
    owner = np.repeat(np.arange(children.size), np.diff(children.offsets))
    init = np.zeros((m, R))
    np.add.at(init, parent_slot, children.y[children.offsets[:-1]])
    pos, seg, slope, dy, jump = _placed_pieces(children, owner, scale, shift)
    events = _breakpoint_events(len(children.x), pos, seg, slope, dy, jump, owner, parent_slot, right_bound)
    gx, gp, gslope, gjump = _summed_by_position(*events)
    left, right, parent_first, parent_last = _integrated(init, gx, gp, gslope, gjump)
    return _sum_points(m, gx, gp, gjump, left, right, parent_first, parent_last)


def _placed_pieces(
    children: FunctionBatch, owner: np.ndarray, scale: np.ndarray, shift: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each child's FSBS placed on its parent's axis (``x * scale + shift``): every point's position, the pieces
    of children of finite scale, their slopes and rises, and which of them are jumps (near-vertical)."""
    x, y = children.x, children.y
    finite = np.isfinite(scale)[owner]
    seg = np.flatnonzero((owner[:-1] == owner[1:]) & finite[:-1])
    pts = np.flatnonzero(finite)
    po = owner[pts]
    pos = np.zeros(len(x))
    pos[pts] = x[pts] * scale[po] + shift[po]
    xa = pos[seg]
    xb = pos[seg + 1]
    dy = y[seg + 1] - y[seg]
    dx = xb - xa
    # Near-vertical pieces are jumps: their huge slopes would only add rounding noise to the running sums.
    jump = dx <= 1e-13 * np.maximum(1.0, np.abs(xb))
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(jump[:, None], 0.0, dy / np.where(jump, 1.0, dx)[:, None])
    return pos, seg, slope, dy, jump


def _breakpoint_events(
    count: int,
    pos: np.ndarray,
    seg: np.ndarray,
    slope: np.ndarray,
    dy: np.ndarray,
    jump: np.ndarray,
    owner: np.ndarray,
    parent_slot: np.ndarray,
    right_bound: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One event per child point where the sum's slope changes or a jump starts, and each parent's bounds 0 and
    ``right_bound``, sorted by parent then position: (position, parent, slope change, jump) of each."""
    m = len(right_bound)
    # Row ``count`` (one past the last point) stays zero: the parents' bound events read it.
    change = np.zeros((count + 1, R))
    change[seg] = slope
    before = np.zeros((count + 1, R))
    before[seg + 1] = slope
    change -= before
    jumps = np.zeros((count + 1, R))
    jumps[seg[jump]] = dy[jump]
    active = np.flatnonzero(row_any(change[:count] != 0) | row_any(jumps[:count] != 0))
    ev_pos = np.concatenate([pos[active], np.zeros(m), right_bound])
    ev_parent = np.concatenate([parent_slot[owner[active]], np.arange(m), np.arange(m)])
    ev_src = np.concatenate([active, np.full(2 * m, count)])
    order = sort_by_group(ev_pos, ev_parent)  # equal positions are summed, in child order
    ev_src = ev_src[order]
    return ev_pos[order], ev_parent[order], change[ev_src], jumps[ev_src]


def _summed_by_position(
    ev_pos: np.ndarray, ev_parent: np.ndarray, ev_slope: np.ndarray, ev_jump: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The events at one (parent, position) summed: position, parent, slope change and jump of each group."""
    new_group = np.ones(len(ev_pos), dtype=bool)
    new_group[1:] = (ev_pos[1:] != ev_pos[:-1]) | (ev_parent[1:] != ev_parent[:-1])
    starts = np.flatnonzero(new_group)
    return (
        ev_pos[starts],
        ev_parent[starts],
        np.add.reduceat(ev_slope, starts, axis=0),
        np.add.reduceat(ev_jump, starts, axis=0),
    )


def _integrated(
    init: np.ndarray, gx: np.ndarray, gp: np.ndarray, gslope: np.ndarray, gjump: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sum at every group, parent by parent from its children's left values: its left and right limits, and
    which groups are each parent's first and last."""
    groups = len(gx)
    parent_first = np.ones(groups, dtype=bool)
    parent_first[1:] = gp[1:] != gp[:-1]
    parent_last = np.ones(groups, dtype=bool)
    parent_last[:-1] = parent_first[1:]
    dxg = np.zeros(groups)
    dxg[:-1] = gx[1:] - gx[:-1]
    dxg[parent_last] = 0.0
    # Running sums parent by parent, in the compiled sweep's order (``_kernels.c`` ``sum_functions``): the slope
    # after each group, and the value before it from the parent's left value, one addition per group. (One
    # cumulative sum over every parent with each parent's base subtracted rounds differently.)
    slope_after = np.empty_like(gslope)
    left = np.empty_like(gslope)
    starts = np.flatnonzero(parent_first)
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), groups], strict=True):
        slope_after[a:b] = np.cumsum(gslope[a:b], axis=0)
        increment = gjump[a:b] + slope_after[a:b] * dxg[a:b, None]
        running = np.empty((b - a + 1, R))
        running[0] = init[gp[a]]
        running[1:] = increment
        left[a:b] = np.cumsum(running, axis=0)[:-1]
    return left, left + gjump, parent_first, parent_last


def _sum_points(
    m: int,
    gx: np.ndarray,
    gp: np.ndarray,
    gjump: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    parent_first: np.ndarray,
    parent_last: np.ndarray,
) -> FunctionBatch:
    """The sums' points: a jump is two points (left and right limit), trimmed as ``compress`` does: at x = 0 only
    the right limit is kept, at the right bound only the left one. Positions are distinct within a parent, so no
    other point is redundant."""
    has_jump = row_any(gjump != 0)
    both = has_jump & ~parent_first & ~parent_last
    reps = 1 + both.astype(np.int64)
    out_x = np.repeat(gx, reps)
    out_y = np.repeat(np.where((has_jump & parent_first)[:, None], right, left), reps, axis=0)
    pos = np.cumsum(reps) - 1
    out_y[pos[both]] = right[both]
    counts = np.bincount(np.repeat(gp, reps), minlength=m)
    return FunctionBatch(offsets_from_counts(counts), out_x, out_y)
