"""Integral guarantees (b.7, b.9): burst and relaxed pools' ratios, accumulated volumes and proposed shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pooltree.fairshare.building import build_functions
from pooltree.fairshare.inputs import _vector
from pooltree.fairshare.layout import EPSILON, _sum_children_into, floating_point_inverse_lower_bound
from pooltree.resources import RESOURCE_COUNT, Vector

if TYPE_CHECKING:
    from pooltree.fairshare.update import _Update


def adjust_proposed_integral_share(limits: Vector, strong: Vector, proposed: Vector) -> Vector:
    """Make strong + proposed fit into limits when it overshoots by rounding (b.9)."""
    if np.all(limits >= strong + proposed):
        return proposed
    proposed = np.maximum(limits - strong, 0.0)
    for r in range(RESOURCE_COUNT):
        for _ in range(32):
            if limits[r] >= strong[r] + proposed[r]:
                break
            proposed[r] = np.nextafter(proposed[r], 0.0)
    return proposed


# ---- b.2 step 4 (cumulative integral attributes) --------------------------------------------------
def compute_integral_ratios(upd: _Update) -> None:
    """b.7 step 4: burst and flow ratios of integral pools and their cumulative sums up the tree."""
    tree, total = upd.tree, upd.total
    n = len(tree.elements)
    upd.burst_ratio = np.zeros(n)
    upd.flow_ratio = np.zeros(n)
    upd.integral_pools = np.flatnonzero(upd.integral_type > 0)
    if not len(upd.integral_pools):  # every ratio and every subtree's sum of them is 0.0
        upd.burst_pools, upd.relaxed_pools = [], []
        upd.total_burst_ratio, upd.total_flow_ratio = np.zeros(n), np.zeros(n)
        return
    for i in upd.integral_pools:
        ig = tree.elements[i].integral_guarantees  # type: ignore[attr-defined]
        burst = _vector(
            tree.elements[i],
            "integral_guarantees.burst_guarantee_resources",
            ig.burst_guarantee_resources,
        )
        flow = _vector(tree.elements[i], "integral_guarantees.resource_flow", ig.resource_flow)
        positive = total > 0
        upd.burst_ratio[i] = float(np.max(burst[positive] / total[positive], initial=0.0))
        upd.flow_ratio[i] = float(np.max(flow[positive] / total[positive], initial=0.0))
    if len(upd.integral_pools):
        # Burst, then relaxed pools, each in depth-first pre-order (InitIntegralPoolLists).
        order = _preorder_rank(upd)
        ranked = sorted(upd.integral_pools.tolist(), key=lambda i: order[i])
        upd.burst_pools = [i for i in ranked if upd.integral_type[i] == 1]
        upd.relaxed_pools = [i for i in ranked if upd.integral_type[i] == 2]
    else:
        upd.burst_pools, upd.relaxed_pools = [], []
    upd.total_burst_ratio = upd.burst_ratio.copy()
    upd.total_flow_ratio = upd.flow_ratio.copy()
    both = np.stack([upd.total_burst_ratio, upd.total_flow_ratio], axis=1)
    _sum_children_into(tree, both, own=True)
    upd.total_burst_ratio, upd.total_flow_ratio = both[:, 0].copy(), both[:, 1].copy()


def _preorder_rank(upd: _Update) -> dict[int, tuple[int, ...]]:
    """Depth-first pre-order keys of the integral pools: their root paths compare lexicographically."""
    tree = upd.tree
    keys: dict[int, tuple[int, ...]] = {}
    for i in upd.integral_pools.tolist():
        path = []
        j = i
        while j > 0:
            path.append(j)
            j = int(tree.parent[j])
        keys[i] = tuple(reversed(path))
    return keys


# ---- b.7 volume accounting ----------------------------------------------------------------------
def consume_and_refill(upd: _Update) -> None:
    """b.7: integral pools' accumulated volumes consumed by usage since the last update and refilled by their flow."""
    tree, total, st = upd.tree, upd.total, upd.state
    n = len(tree.elements)
    upd.volume: dict[int, np.ndarray] = {}
    upd.last_ratio: dict[int, float] = {}
    upd.capacity: dict[int, np.ndarray] = {}
    overflow = np.zeros((n, RESOURCE_COUNT))
    acceptable = np.zeros((n, RESOURCE_COUNT))
    period = upd.settings.integral_pool_capacity_saturation_period
    for i in upd.integral_pools:
        pid = tree.ids[i]
        volume = np.array(st.accumulated_resource_volume.get(pid, np.zeros(RESOURCE_COUNT)), dtype=float)
        upd.last_ratio[i] = float(st.last_integral_share_ratio.get(pid, 0.0))
        capacity = total * upd.flow_ratio[i] * period
        upd.capacity[i] = capacity
        if st.previous_update_time is not None and np.any(total != 0):
            dt = upd.now - st.previous_update_time
            old = volume.copy()
            volume = volume + total * dt * upd.flow_ratio[i] - total * dt * upd.last_ratio[i]
            volume = np.maximum(volume, 0.0)
            upper = np.maximum(old, capacity)
            overflow[i] = np.maximum(volume - upper, 0.0)
            if tree.elements[i].integral_guarantees.can_accept_free_volume:  # type: ignore[attr-defined]
                acceptable[i] = np.maximum(capacity - volume, 0.0)
            volume = np.minimum(volume, upper)
        upd.volume[i] = volume
    # Free volume only ever reaches integral pools through a pool that distributes it.
    if (
        len(upd.integral_pools)
        and st.previous_update_time is not None
        and any(p.integral_guarantees.should_distribute_free_volume_among_children for p in tree.pools[1:])
    ):
        _distribute_free_volume(upd, overflow, acceptable)


def _distribute_free_volume(upd: _Update, overflow: np.ndarray, acceptable: np.ndarray) -> None:
    """Overflow of integral pools flows up through plain pools and, where enabled, down to hungry pools."""
    tree = upd.tree
    children_overflow = np.zeros_like(overflow)

    def pool_children(i: int) -> list[int]:
        return [c for c in tree.children(i) if not tree.is_op[c]]

    def gather(i: int) -> None:
        if upd.integral_type[i] > 0:
            return
        kids = pool_children(i)
        for c in kids:
            gather(c)
        child_acceptable = np.zeros(RESOURCE_COUNT)
        for c in kids:
            children_overflow[i] += overflow[c]
            child_acceptable += acceptable[c]
        diff = children_overflow[i] - child_acceptable
        can_accept = i != 0 and tree.elements[i].integral_guarantees.can_accept_free_volume  # type: ignore[attr-defined]
        overflow[i] = np.where(diff > 0, diff, 0.0)
        acceptable[i] = np.where(diff > 0, 0.0, -diff if can_accept else 0.0)

    gather(0)
    accepted = np.zeros_like(overflow)

    def distribute(i: int) -> None:
        free = accepted[i].copy()
        if upd.integral_type[i] > 0:
            upd.volume[i] = upd.volume[i] + free
            return
        element = tree.elements[i]
        should = i != 0 and element.integral_guarantees.should_distribute_free_volume_among_children  # type: ignore[attr-defined]
        kids = pool_children(i)
        if should and not (np.all(free == 0) and np.all(children_overflow[i] == 0)):
            free = free + children_overflow[i]
            for r in range(RESOURCE_COUNT):
                if free[r] == 0:
                    continue
                hungry = [c for c in kids if acceptable[c, r] > EPSILON and upd.total_flow_ratio[c] > EPSILON]
                weight_sum = sum(upd.total_flow_ratio[c] for c in hungry)
                hungry.sort(key=lambda c: acceptable[c, r] / upd.total_flow_ratio[c])
                k = 0
                while k < len(hungry):
                    c = hungry[k]
                    suggested = free[r] * (upd.total_flow_ratio[c] / weight_sum)
                    if suggested < acceptable[c, r]:
                        break
                    accepted[c, r] = acceptable[c, r]
                    free[r] -= acceptable[c, r]
                    weight_sum -= upd.total_flow_ratio[c]
                    k += 1
                for c in hungry[k:]:
                    accepted[c, r] = free[r] * (upd.total_flow_ratio[c] / weight_sum)
        for c in kids:
            distribute(c)

    distribute(0)


def volume_ratio(upd: _Update, i: int) -> float:
    """b.7: the share of the cluster an integral pool's accumulated volume pays for over the smooth period."""
    total = upd.total
    positive = total > 0
    if not np.any(positive):
        return 0.0
    return float(np.min(upd.volume[i][positive] / total[positive])) / upd.settings.integral_smooth_period


def _hierarchical_available(upd: _Update, i: int, guarantee: np.ndarray) -> np.ndarray:
    """min over the element and its non-root ancestors of (limits share − guarantee share)."""
    result = np.ones(RESOURCE_COUNT)
    tree = upd.tree
    while i > 0:
        result = np.minimum(result, upd.limits_share[i] - guarantee[i])
        i = int(tree.parent[i])
    return np.maximum(result, 0.0)


def _increase_integral(upd: _Update, i: int, delta: np.ndarray, pis: np.ndarray) -> None:
    """Add ``delta`` to the proposed integral share of the pool and every ancestor (root may overcommit)."""
    tree = upd.tree
    while i >= 0:
        increased = pis[i] + delta
        if i != 0:
            increased = adjust_proposed_integral_share(upd.limits_share[i], upd.sgs[i], increased)
        pis[i] = increased
        i = int(tree.parent[i])


def _integral_shares(upd: _Update) -> np.ndarray:
    """Burst then relaxed pools' proposed integral shares (b.7); also sets their LastShareRatio."""
    tree = upd.tree
    pis = np.zeros((len(tree.elements), RESOURCE_COUNT))
    for b in upd.burst_pools:
        ratio = min(upd.burst_ratio[b], volume_ratio(upd, b))
        proposed = np.minimum(np.full(RESOURCE_COUNT, ratio), _hierarchical_available(upd, b, upd.sgs + pis))
        proposed = adjust_proposed_integral_share(upd.limits_share[b], upd.sgs[b], proposed)
        pis[b] = proposed
        subtree = tree.subtree(b)
        table = build_functions(upd, subtree, upd.sgs + pis, upd.limits_share)
        pis[b] = 0.0
        within, _ = table.evaluate(np.array([b]), np.zeros(1))
        integral = np.maximum(within[0] - upd.sgs[b], 0.0)
        _increase_integral(upd, b, integral, pis)
        upd.last_ratio[b] = float(integral.max())
    relaxed = [r for r in upd.relaxed_pools if volume_ratio(upd, r) != 0]
    for r in upd.relaxed_pools:
        if r not in relaxed:
            upd.last_ratio[r] = upd.last_ratio.get(r, 0.0)
    if not relaxed:
        return pis
    top = list(tree.children(0))
    guarantee = upd.sgs + pis
    available = np.maximum(1.0 - np.minimum(guarantee[top], upd.demand_share[top]).sum(axis=0), 0.0)
    weights = np.array([volume_ratio(upd, r) for r in relaxed])
    limits = upd.limits_share.copy()
    for r, w in zip(relaxed, weights, strict=True):
        pool = tree.elements[r]
        multiplier = pool.integral_guarantees.relaxed_share_multiplier_limit  # type: ignore[attr-defined]
        if multiplier is None:
            multiplier = upd.settings.relaxed_share_multiplier_limit
        cap = min(w, upd.flow_ratio[r] * multiplier)
        limits[r] = np.minimum(limits[r], upd.sgs[r] + cap)
    elements = np.unique(np.concatenate([tree.subtree(r) for r in relaxed]))
    table = build_functions(upd, elements, guarantee, limits)
    weights = weights / weights.min()
    relaxed_elements = np.array(relaxed, dtype=np.int64)
    strong = upd.sgs[relaxed]

    def shares(f: float) -> np.ndarray:
        values, _ = table.evaluate(relaxed_elements, np.minimum(1.0, f * weights))
        return np.maximum(values - strong, 0.0)

    fit = floating_point_inverse_lower_bound(
        0.0, 1.0, lambda f: bool(np.all(shares(f).sum(axis=0) <= available))
    )
    integral = shares(fit)
    for k, r in enumerate(relaxed):
        limited = np.minimum(integral[k], _hierarchical_available(upd, r, upd.sgs + pis))
        _increase_integral(upd, r, limited, pis)
        upd.last_ratio[r] = float(limited.max())
    return pis
