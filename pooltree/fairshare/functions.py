"""Batched piecewise-linear fair-share functions (yt-semantics §b.5), vectorised with numpy.

A ``FunctionBatch`` holds many monotone vector functions at once as ragged arrays: function ``i`` owns
points ``offsets[i]:offsets[i+1]`` with arguments ``x`` (non-decreasing) and values ``y`` (rows of 5).
A jump is two consecutive points with the same ``x`` (left value first, right value second). Functions are
left-continuous: at a jump the first point is the value. The left end is trimmed (the value at ``x = 0``
is the right limit, as YTsaurus's ``TrimLeft``), the right end is trimmed to its left limit.

FairShareBySuggestion batches also carry ``f``: the fit factor ``MaxFitFactorBySuggestion(s)`` at every
point, so one batch answers both FSBS(s) and MFFBS(s).

The two per-level passes, ``sum_functions`` and ``fair_share_by_suggestion``, also exist compiled
(``_kernels.c``, built at install time when a C compiler is there): the same rules function by function in
one pass instead of ~40 numpy passes over the whole level. The numpy versions (``reference.py``, step by step)
are the reference; ``use_compiled_kernels(False)`` switches back to them (tests run both and compare).
"""

from __future__ import annotations

import numpy as np

from pooltree.fairshare.batch import COMPRESS_EPSILON as COMPRESS_EPSILON
from pooltree.fairshare.batch import FunctionBatch as FunctionBatch
from pooltree.fairshare.batch import FunctionTable as FunctionTable
from pooltree.fairshare.batch import R as R
from pooltree.fairshare.batch import compress as compress
from pooltree.fairshare.batch import compress_collinear as compress_collinear
from pooltree.fairshare.batch import concatenate as concatenate
from pooltree.fairshare.batch import evaluate as evaluate
from pooltree.fairshare.batch import gather as gather
from pooltree.fairshare.batch import offsets_from_counts as offsets_from_counts
from pooltree.fairshare.batch import row_all as row_all
from pooltree.fairshare.batch import row_any as row_any
from pooltree.fairshare.batch import row_max as row_max
from pooltree.fairshare.batch import row_min as row_min
from pooltree.fairshare.batch import sort_by_group as sort_by_group
from pooltree.fairshare.compiled import COMPILED_KERNELS_AVAILABLE as COMPILED_KERNELS_AVAILABLE
from pooltree.fairshare.compiled import compiled_kernels_active as compiled_kernels_active
from pooltree.fairshare.compiled import kernels
from pooltree.fairshare.compiled import use_compiled_kernels as use_compiled_kernels
from pooltree.fairshare.reference import FULL_SUGGESTION_TOLERANCE as FULL_SUGGESTION_TOLERANCE
from pooltree.fairshare.reference import LIMIT_TOLERANCE as LIMIT_TOLERANCE
from pooltree.fairshare.reference import ZERO_SUGGESTION as ZERO_SUGGESTION
from pooltree.fairshare.reference import _envelope_breakpoints
from pooltree.fairshare.reference import fair_share_by_suggestion_numpy as fair_share_by_suggestion_numpy
from pooltree.fairshare.reference import snap_suggestions as snap_suggestions
from pooltree.fairshare.reference import sum_functions_numpy as sum_functions_numpy


def operation_fair_share_by_fit_factor(
    usage_share: np.ndarray, demand_share: np.ndarray, step: np.ndarray
) -> FunctionBatch:
    """Operations' FSBFF on [0, 2], all at once (closed form, b.5).

    On [0, 1] component r is ``min(usage_r, f * maxUsage)``; on [1, 2] it grows linearly from usage to demand.
    Where ``step`` is set (gang operations with the step function enabled): 0 on [0, 1], demand from f = 1 on.
    """
    n = len(usage_share)
    u, d = usage_share, demand_share
    max_usage = row_max(u) if n else np.zeros(0)
    has_usage = max_usage > 0
    sorted_usage = np.sort(u, axis=1)
    previous = np.concatenate([np.zeros((n, 1)), sorted_usage[:, :-1]], axis=1)
    xs = np.zeros((n, 9))
    ys = np.zeros((n, 9, R))
    valid = np.zeros((n, 9), dtype=bool)
    valid[:, 0] = True
    safe_max = np.where(has_usage, max_usage, 1.0)
    xs[:, 1:6] = sorted_usage / safe_max[:, None]
    ys[:, 1:6, :] = np.minimum(sorted_usage[:, :, None], u[:, None, :])
    valid[:, 1:6] = (sorted_usage > previous) & has_usage[:, None] & ~step[:, None]
    xs[:, 6] = 1.0
    valid[:, 6] = ~has_usage | step
    xs[:, 7] = 1.0
    ys[:, 7] = d
    valid[:, 7] = step
    xs[:, 8] = 2.0
    ys[:, 8] = d
    valid[:, 8] = True
    offsets = offsets_from_counts(valid.sum(axis=1))
    return FunctionBatch(offsets, xs[valid], ys[valid])


def fair_share_by_suggestion(
    fsbff: FunctionBatch,
    guarantee_share: np.ndarray,
    limits_share: np.ndarray,
    *,
    merge_collinear: bool = True,
) -> FunctionBatch:
    """FSBS = FSBFF ∘ MFFBS on [0, 1] for every function of the batch, with MFFBS carried in ``f``.

    Runs the compiled pass when active, else ``fair_share_by_suggestion_numpy`` (the reference).
    """
    module = kernels()
    if module is None or fsbff.size == 0:
        return fair_share_by_suggestion_numpy(
            fsbff, guarantee_share, limits_share, merge_collinear=merge_collinear
        )
    n = fsbff.size
    offsets = np.ascontiguousarray(fsbff.offsets, dtype=np.int64)
    capacity = (R + 4) * len(fsbff.x) + 2 * n
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out_s = np.empty(capacity)
    out_y = np.empty((capacity, R))
    out_f = np.empty(capacity)
    total = module.fair_share_by_suggestion(
        offsets,
        np.ascontiguousarray(fsbff.x, dtype=float),
        np.ascontiguousarray(fsbff.y, dtype=float),
        _rows(guarantee_share, n),
        _rows(limits_share, n),
        merge_collinear,
        out_offsets,
        out_s,
        out_y,
        out_f,
    )
    return FunctionBatch(out_offsets, out_s[:total], out_y[:total], out_f[:total])


def _rows(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` as a C-contiguous (n, R) float64 array: itself when it is one, else broadcast and converted."""
    if type(a) is np.ndarray and a.shape == (n, R) and a.dtype == np.float64 and a.flags.c_contiguous:
        return a
    return np.ascontiguousarray(np.broadcast_to(a, (n, R)), dtype=float)


def operation_fair_share_by_suggestion(
    usage_share: np.ndarray,
    demand_share: np.ndarray,
    step: np.ndarray,
    guarantee_share: np.ndarray,
    limits_share: np.ndarray,
) -> FunctionBatch:
    """Operations' FSBS (with MFFBS in ``f``), the closed form where it applies, the generic one elsewhere.

    For an operation with usage u (max component M > 0), no guarantee and usage within its limits, sigma
    is f·M on [0, 1] (the top resource is always the one at M), so FSBS(s) = min(u, s) with fit s / M up
    to s = M; from there it follows u + t·(d − u) with s = max_r of that (upper envelope of five lines),
    fit 1 + t, until t = 1 or the first resource reaches its limit; then it stays. The points are exactly
    those ``fair_share_by_suggestion`` finds on ``operation_fair_share_by_fit_factor`` (same formulas, so
    the same floating-point values); gang steps, zero usage, usage over a limit and operations with a
    guarantee take the generic path. With the compiled passes active every operation takes the generic
    path: the compiled pass is faster than this closed form in numpy.
    """
    n = len(usage_share)
    u, d = usage_share, demand_share
    if n and compiled_kernels_active():
        # The compiled generic pass is faster than the numpy closed form, and gives the same points.
        return fair_share_by_suggestion(
            operation_fair_share_by_fit_factor(u, d, step),
            guarantee_share,
            limits_share,
            merge_collinear=False,
        )
    max_usage = row_max(u) if n else np.zeros(0)
    limit = np.minimum(np.maximum(limits_share, 0.0), d)
    simple = ~step & (max_usage > 0) & ~row_any(u > limit + LIMIT_TOLERANCE) & ~row_any(guarantee_share != 0)
    if not np.all(simple):
        hard = np.flatnonzero(~simple)
        generic = fair_share_by_suggestion(
            operation_fair_share_by_fit_factor(u[hard], d[hard], step[hard]),
            guarantee_share[hard],
            limits_share[hard],
            merge_collinear=False,
        )
        if len(hard) == n:
            return generic
        easy = np.flatnonzero(simple)
        closed = _simple_operation_fsbs(u[easy], d[easy], max_usage[easy], limit[easy])
        # Interleave back into operation order.
        order = np.argsort(np.concatenate([easy, hard]), kind="stable")
        return gather(concatenate([closed, generic]), order)
    return _simple_operation_fsbs(u, d, max_usage, limit)


def _simple_operation_fsbs(
    u: np.ndarray, d: np.ndarray, max_usage: np.ndarray, limit: np.ndarray
) -> FunctionBatch:
    """Closed-form FSBS of operations with usage, no guarantee and usage within limits (see above)."""
    n = len(u)
    p1_s, p1_f, p1_valid = _usage_points(u, max_usage)
    p1_rows = np.nonzero(p1_valid)[0]
    bp_rows, bp_t, cut_end, t_cut, uncut, mid_y = _demand_piece(u, d, limit)
    # Output positions without sorting: phase 1 points, breakpoints (sorted by row then t), end, tail.
    p1_count = p1_valid.sum(axis=1)
    bp_count = np.bincount(bp_rows, minlength=n)
    has_end = np.zeros(n, dtype=bool)
    has_end[cut_end] = True
    has_end[uncut] = True
    last_s = np.where(has_end, 0.0, max_usage)
    last_s[cut_end] = row_max(mid_y[len(bp_rows) :])
    last_s[uncut] = row_max(d[uncut])
    last_s = snap_suggestions(np.maximum(last_s, 0.0))
    need_tail = last_s < 1.0
    counts = p1_count + bp_count + has_end + need_tail
    offsets = offsets_from_counts(counts)
    total = int(offsets[-1])
    out_s = np.empty(total)
    out_f = np.empty(total)
    out_y = np.empty((total, R))
    p1_pos = (offsets[:-1, None] + np.cumsum(p1_valid, axis=1) - 1)[p1_valid]
    p1_values = p1_s[p1_valid]
    out_s[p1_pos] = p1_values
    out_f[p1_pos] = p1_f[p1_valid]
    out_y[p1_pos] = np.minimum(p1_values[:, None], u[p1_rows])
    if len(bp_rows):
        rank = np.arange(len(bp_rows)) - np.searchsorted(bp_rows, bp_rows)
        bp_pos = offsets[bp_rows] + p1_count[bp_rows] + rank
        out_s[bp_pos] = row_max(mid_y[: len(bp_rows)])
        out_f[bp_pos] = 1.0 + bp_t
        out_y[bp_pos] = mid_y[: len(bp_rows)]
    end_pos = offsets[:-1] + p1_count + bp_count
    out_s[end_pos[cut_end]] = row_max(mid_y[len(bp_rows) :])
    out_f[end_pos[cut_end]] = 1.0 + t_cut
    out_y[end_pos[cut_end]] = mid_y[len(bp_rows) :]
    out_s[end_pos[uncut]] = row_max(d[uncut])
    out_f[end_pos[uncut]] = 2.0
    out_y[end_pos[uncut]] = d[uncut]
    np.maximum(out_s, 0.0, out=out_s)
    snap_suggestions(out_s)
    # Extend to s = 1 with the last value.
    tail = np.flatnonzero(need_tail)
    tail_pos = offsets[1:][tail] - 1
    out_s[tail_pos] = 1.0
    out_f[tail_pos] = out_f[tail_pos - 1]
    out_y[tail_pos] = out_y[tail_pos - 1]
    return compress(FunctionBatch(offsets, out_s, out_y, out_f), collinear=False)


def _usage_points(u: np.ndarray, max_usage: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The closed form's first phase (fit factor up to 1): s = 0 and every distinct positive usage value v, with
    fit v / M and value min(u, v); as (suggestions, fits, which of them are points), one row per operation."""
    n = len(u)
    sorted_usage = np.sort(u, axis=1)
    previous = np.concatenate([np.zeros((n, 1)), sorted_usage[:, :-1]], axis=1)
    distinct = sorted_usage > previous
    p1_s = np.concatenate([np.zeros((n, 1)), sorted_usage], axis=1)
    p1_f = np.concatenate([np.zeros((n, 1)), sorted_usage / max_usage[:, None]], axis=1)
    p1_valid = np.concatenate([np.ones((n, 1), dtype=bool), distinct], axis=1)
    return p1_s, p1_f, p1_valid


def _demand_piece(
    u: np.ndarray, d: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The closed form's second phase: the piece from (1, u) to (2, d), cut where the first resource passes its
    limit. Returns sigma's breakpoints on it (rows, t), the cut ends inside (0, 1] (rows, t), the uncut rows, and
    the values at the breakpoints then at the cut ends; a cut at t = 0 ends the function at the top usage."""
    n = len(u)
    dy = d - u
    over = d > limit + LIMIT_TOLERANCE
    with np.errstate(divide="ignore", invalid="ignore"):
        t_cross = np.where(over, (limit - u) / dy, np.inf)
    cut = row_any(over)
    t_max = np.where(cut, np.clip(row_min(t_cross), 0.0, 1.0), 1.0)
    h0 = np.concatenate([u, np.zeros((n, 1))], axis=1)
    slopes = np.concatenate([dy, np.zeros((n, 1))], axis=1)
    top_start = np.argmax(h0, axis=1)
    top_end = np.argmax(h0 + slopes * t_max[:, None], axis=1)
    changes = np.flatnonzero(top_start != top_end)
    bp_rows, bp_t = _envelope_breakpoints(h0[changes], slopes[changes], t_max[changes])
    bp_rows = changes[bp_rows] if len(bp_rows) else np.zeros(0, dtype=np.int64)
    cut_end = np.flatnonzero(cut & (t_max > 0))
    t_cut = t_max[cut_end]
    uncut = np.flatnonzero(~cut)
    mid_rows = np.concatenate([bp_rows, cut_end])
    t_col = np.concatenate([bp_t, t_cut])[:, None]
    ya, dyr = u[mid_rows], dy[mid_rows]
    mid_y = np.where(t_col < 0.5, ya + dyr * t_col, d[mid_rows] - dyr * (1.0 - t_col))
    return bp_rows, bp_t, cut_end, t_cut, uncut, mid_y


def sum_functions(
    children: FunctionBatch,
    parent_slot: np.ndarray,
    scale: np.ndarray,
    shift: np.ndarray,
    right_bound: np.ndarray,
) -> FunctionBatch:
    """Pools' FSBFF (see ``sum_functions_numpy``): the compiled pass when active, else the numpy reference."""
    if not compiled_kernels_active():
        return sum_functions_numpy(children, parent_slot, scale, shift, right_bound)
    table = FunctionTable([children], np.zeros(children.size, np.int64), np.arange(children.size))
    return sum_children(table, np.arange(children.size), parent_slot, scale, shift, right_bound)


def sum_children(
    table: FunctionTable,
    children: np.ndarray,
    parent_slot: np.ndarray,
    scale: np.ndarray,
    shift: np.ndarray,
    right_bound: np.ndarray,
) -> FunctionBatch:
    """``sum_functions`` over the functions of elements ``children`` kept in ``table`` (no copy of them)."""
    children = np.asarray(children, dtype=np.int64)
    module = kernels()
    if module is None:
        batch = table.gather(children)
        return sum_functions_numpy(batch, parent_slot, scale, shift, right_bound)
    m = len(right_bound)
    source = table.batch_of[children]
    row = table.row_of[children]
    if not len(children):
        points = 0
    elif table.points is not None:
        points = int(table.points[children].sum())
    else:
        points = int(np.sum(np.diff(table.offsets_of(source, row), axis=0)))
    capacity = 2 * (points + 2 * m)
    out_offsets = np.empty(m + 1, dtype=np.int64)
    out_x = np.empty(capacity)
    out_y = np.empty((capacity, R))
    total = module.sum_functions(
        table.sources(with_f=False),
        np.ascontiguousarray(source, dtype=np.int64),
        np.ascontiguousarray(row, dtype=np.int64),
        np.ascontiguousarray(parent_slot, dtype=np.int64),
        np.ascontiguousarray(scale, dtype=float),
        np.ascontiguousarray(shift, dtype=float),
        np.ascontiguousarray(right_bound, dtype=float),
        out_offsets,
        out_x,
        out_y,
    )
    return FunctionBatch(out_offsets, out_x[:total], out_y[:total])
