"""The top-down distribution of fair share (ComputeAndSetFairShare), plain and improved, and FIFO gang truncation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.fairshare import functions as fn
from pooltree.fairshare import improved
from pooltree.fairshare.layout import EPSILON, _child_ranges, _Tree, floating_point_inverse_lower_bound
from pooltree.resources import RESOURCE_COUNT


@dataclass(frozen=True, slots=True)
class Suggestions:
    """What children's suggestions are made from (`child_suggestions`): weights, FIFO flags and FIFO ranks by
    element, and where the weight ratios of fixed levels may be kept for later updates (``reuse.derived_statics``;
    None: computed each time)."""

    weight: np.ndarray
    fifo: np.ndarray
    fifo_rank: np.ndarray
    ratios: dict[Any, Any] | None


def distribute(
    tree: _Tree, table: fn.FunctionTable, suggestions: Suggestions, start: np.ndarray, suggestion: np.ndarray
) -> np.ndarray:
    """ComputeAndSetFairShare top-down from ``start`` elements with scalar suggestions; returns FS (N, 5)."""
    fs = np.zeros((len(tree.elements), RESOURCE_COUNT))
    current = np.asarray(start, dtype=np.int64)
    s = np.asarray(suggestion, dtype=float)
    values, fits = table.evaluate(current, s)
    start_key = ("distribute", tuple(current.tolist()))
    steps = tree.memo(start_key, lambda: _distribution_steps(tree, current))
    for depth, (current, pools, parents, kids, slot, seg) in enumerate(steps):
        fs[current] = values
        if parents is None:
            break
        target = values[pools]
        fit = fits[pools]  # type: ignore[index]
        ks = child_suggestions(suggestions, parents, kids, slot, fit, key=(start_key, depth))
        kv, kf = table.evaluate(kids, ks)
        sums = np.add.reduceat(kv, seg, axis=0)
        bad = np.flatnonzero(fn.row_any(sums > target + EPSILON))
        for k in bad:
            sel = np.flatnonzero(slot == k)
            p_arr = parents[k : k + 1]
            sub_kids = kids[sel]
            zero_slot = np.zeros(len(sel), dtype=np.int64)

            def fits_target(
                f: float, p_arr=p_arr, sub_kids=sub_kids, zero_slot=zero_slot, bound=target[k] + EPSILON
            ) -> bool:
                sug = child_suggestions(suggestions, p_arr, sub_kids, zero_slot, np.array([f]))
                v, _ = table.evaluate(sub_kids, sug)
                return bool(np.all(v.sum(axis=0) <= bound))

            f_new = floating_point_inverse_lower_bound(0.0, float(fit[k]), fits_target)
            sug = child_suggestions(suggestions, p_arr, sub_kids, zero_slot, np.array([f_new]))
            v, f2 = table.evaluate(sub_kids, sug)
            ks[sel], kv[sel], kf[sel] = sug, v, f2  # type: ignore[index]
        values, fits = kv, kf
    return fs


def distribute_improved(
    tree: _Tree, table: fn.FunctionTable, suggestions: Suggestions, distribution_gap: bool
) -> np.ndarray:
    """The improved top-down pass (``improved.py``, YTsaurus's vector ``ComputeAndSetFairShare``), level by level:
    every pool splits its target vector among its children (``_split_targets``); an operation's fair share is its
    target."""
    fs = np.zeros((len(tree.elements), RESOURCE_COUNT))
    root_value, _ = table.evaluate(np.array([0]), np.ones(1))
    fs[0] = root_value[0]
    gap = distribution_gap
    for level in tree.parent_levels():
        parents = level.parents
        chosen = _split_targets(
            suggestions, table, parents, level.children, level.seg, level.slot, fs[parents]
        )
        if gap:
            short = fn.row_any(fs[parents] - np.add.reduceat(chosen, level.seg, axis=0) > EPSILON)
            if np.any(short):
                again = np.flatnonzero(short)
                member = short[level.slot]
                sub_kids = level.children[member]
                sub_slot = np.searchsorted(again, level.slot[member])
                sub_seg = np.concatenate([[0], np.cumsum(np.bincount(sub_slot, minlength=len(again)))[:-1]])
                chosen[member] = _split_targets(
                    suggestions,
                    table,
                    parents[again],
                    sub_kids,
                    sub_seg,
                    sub_slot,
                    fs[parents[again]] + EPSILON,
                )
        fs[level.children] = chosen
    return fs


def _split_targets(
    suggestions: Suggestions,
    table: fn.FunctionTable,
    parents: np.ndarray,
    kids: np.ndarray,
    seg: np.ndarray,
    slot: np.ndarray,
    bound: np.ndarray,
) -> np.ndarray:
    """Children's shares of every pool's target ``bound`` (YTsaurus's vector ``ComputeAndSetFairShare``):
    the largest fit factor whose children's values fit (the bisection of
    ``floating_point_inverse_lower_bound``, run for all pools at once), then the children's jumps there in
    child order while they fit; the first that does not fit ends the walk (the stretched fit-factor axis)."""
    m = len(parents)
    fit_range = np.where(suggestions.fifo[parents], np.diff(np.append(seg, len(kids))).astype(float), 1.0)

    def values(rows: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Children's values of pools ``rows`` (sorted) at fit factors ``f`` (per pool), the children's rows
        and where each pool's children start among them."""
        selected = np.zeros(m, dtype=bool)
        selected[rows] = True
        sub = np.flatnonzero(selected[slot])
        position = np.searchsorted(rows, slot[sub])
        starts = np.flatnonzero(np.concatenate([[True], position[1:] != position[:-1]]))
        values = child_suggestions(suggestions, parents[rows], kids[sub], position, f)
        return table.evaluate(kids[sub], values)[0], sub, starts

    def fits(rows: np.ndarray, f: np.ndarray) -> np.ndarray:
        v, _, starts = values(rows, f)
        return np.all(np.add.reduceat(v, starts, axis=0) <= bound[rows], axis=1)

    everyone = np.arange(m)
    lo = np.zeros(m)
    hi = fit_range.copy()
    fit = np.zeros(m)
    done = fits(everyone, hi)
    fit[done] = hi[done]
    active = np.flatnonzero(~done)
    for _ in range(200):
        if not len(active):
            break
        mid = (lo[active] + hi[active]) / 2.0
        stop = (mid <= lo[active]) | (mid >= hi[active])
        if np.any(stop):
            fit[active[stop]] = lo[active[stop]]
            active, mid = active[~stop], mid[~stop]
            if not len(active):
                break
        ok = fits(active, mid)
        lo[active[ok]] = mid[ok]
        hi[active[~ok]] = mid[~ok]
    fit[active] = lo[active]
    chosen, _, _ = values(everyone, fit)
    walking = np.flatnonzero(fit < fit_range)
    if len(walking):
        after_values, sub, _ = values(walking, np.nextafter(fit[walking], np.inf))
        jump = after_values - chosen[sub]
        significant = fn.row_any(jump > improved.JUMP_EPSILON)
        for k in np.unique(slot[sub[significant]]).tolist():
            rows = np.flatnonzero(slot == k)
            total = improved.sequential_sum(chosen[rows])
            for r in rows.tolist():
                step = after_values[np.searchsorted(sub, r)] - chosen[r]
                if not np.any(step > improved.JUMP_EPSILON):
                    continue
                if not np.all(total + step <= bound[k]):
                    break
                chosen[r] = after_values[np.searchsorted(sub, r)]
                total = total + step
    return chosen


def child_suggestions(
    suggestions: Suggestions,
    parents: np.ndarray,
    kids: np.ndarray,
    slot: np.ndarray,
    fit: np.ndarray,
    key: Any = None,
) -> np.ndarray:
    """b.5: children's suggestions from the parent's fit factor: min(1, f·w/w_min), or FIFO unit steps.

    ``key`` names a fixed (parents, kids, slot) of the tree: without FIFO pools, the weight ratios are then
    taken from ``suggestions.ratios`` (the kept guarantees' ``derived``), where the first update with these weights
    put them.
    """
    f = fit[slot]
    ratios = suggestions.ratios if key is not None else None
    if ratios is not None:
        kept = ratios.get(key)
        if kept is None:
            w = suggestions.weight[kids]
            positive = w > EPSILON
            min_w = np.full(len(parents), np.inf)
            np.minimum.at(min_w, slot[positive], w[positive])
            with np.errstate(invalid="ignore"):
                kept = (positive, w / min_w[slot])
            ratios[key] = kept
        positive, ratio = kept
        with np.errstate(invalid="ignore"):
            return np.minimum(1.0, np.where(positive, f * ratio, 0.0))
    fifo = suggestions.fifo[parents][slot]
    w = suggestions.weight[kids]
    positive = w > EPSILON
    min_w = np.full(len(parents), np.inf)
    np.minimum.at(min_w, slot[positive], w[positive])
    with np.errstate(invalid="ignore"):
        normal = np.minimum(1.0, np.where(positive, f * (w / min_w[slot]), 0.0))
    fifo_s = np.clip(f - suggestions.fifo_rank[kids], 0.0, 1.0)
    return np.where(fifo, fifo_s, normal)


def _distribution_steps(tree: _Tree, start: np.ndarray) -> list[tuple[Any, ...]]:
    """The levels ``distribute`` walks down from ``start``: each level's elements, which of them are pools with
    children (mask and indices), those pools' children, every child's parent position and the children's
    segment starts; the last entry (elements without children below) has ``None`` for the pools."""
    steps: list[tuple[Any, ...]] = []
    current = start
    while len(current):
        pools = ~tree.is_op[current] & (tree.child_count[current] > 0)
        parents = current[pools]
        if len(parents) == 0:
            steps.append((current, None, None, None, None, None))
            break
        counts = tree.child_count[parents]
        kids = _child_ranges(tree, parents)
        slot = np.repeat(np.arange(len(parents)), counts)
        seg = np.concatenate([[0], np.cumsum(counts)[:-1]])
        steps.append((current, pools, parents, kids, slot, seg))
        current = kids
    return steps


def truncate_unsatisfied_gangs_in_fifo_pools(
    tree: _Tree, fifo: np.ndarray, demand_share: np.ndarray, fs: np.ndarray
) -> np.ndarray:
    """YTsaurus ``TruncateFairShareInFifoPools``: in FIFO pools with truncation enabled, a gang operation with a
    non-zero fair share that does not cover its demand (within ``EPSILON``) gets zero; every ancestor loses the
    truncated amounts of its subtree (never below zero). Returns the fair shares (``fs`` itself when none is
    truncated)."""
    pools = [
        p
        for p in np.flatnonzero(fifo).tolist()
        if tree.elements[p].enable_fair_share_truncation_in_fifo_pool  # type: ignore[attr-defined]
    ]
    if not pools:
        return fs
    fs = fs.copy()
    truncated = np.zeros_like(fs)
    for p in pools:
        for c in tree.children(p):
            op = tree.elements[c]
            if not tree.is_op[c] or not op.is_gang:  # type: ignore[attr-defined]
                continue
            share = fs[c]
            if not np.any(share != 0.0) or np.all(share + EPSILON >= demand_share[c]):
                continue
            truncated[c] = share
            fs[c] = 0.0
    # Ancestors (deepest first, so every pool has its subtree's total) lose what their subtrees lost.
    for level in tree.parent_levels(bottom_up=True):
        sums = np.add.reduceat(truncated[level.children], level.seg, axis=0)
        truncated[level.parents] += sums
        changed = level.parents[fn.row_any(sums != 0.0)]
        fs[changed] = np.maximum(fs[changed] - sums[fn.row_any(sums != 0.0)], 0.0)
    return fs
