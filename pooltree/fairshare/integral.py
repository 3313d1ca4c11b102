"""Integral guarantees (b.7, b.9): burst and relaxed pools' ratios, accumulated volumes and proposed shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pooltree.fairshare import functions as fn
from pooltree.fairshare.inputs import _vector
from pooltree.fairshare.layout import EPSILON, _sum_children_into, _Tree, floating_point_inverse_lower_bound
from pooltree.fairshare.model import UpdateSettings, UpdateState
from pooltree.resources import RESOURCE_COUNT, Vector

Build = Callable[[np.ndarray, np.ndarray, np.ndarray], fn.FunctionTable]
"""Builds the fair-share functions (b.5) of some elements (closed under descendants) with given guarantee and
limits shares: ``build(elements, guarantee, limits)``."""


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
@dataclass(frozen=True, slots=True)
class IntegralRatios:
    """b.7 step 4's results: integral pools' burst and flow ratios by element, their sums over every subtree, the
    integral pools, and the burst and relaxed ones in depth-first pre-order."""

    burst_ratio: np.ndarray
    flow_ratio: np.ndarray
    total_burst_ratio: np.ndarray
    total_flow_ratio: np.ndarray
    integral_pools: np.ndarray
    burst_pools: list[int]
    relaxed_pools: list[int]


def compute_integral_ratios(tree: _Tree, total: np.ndarray, integral_type: np.ndarray) -> IntegralRatios:
    """b.7 step 4: burst and flow ratios of integral pools and their cumulative sums up the tree."""
    n = len(tree.elements)
    burst_ratio = np.zeros(n)
    flow_ratio = np.zeros(n)
    integral_pools = np.flatnonzero(integral_type > 0)
    if not len(integral_pools):  # every ratio and every subtree's sum of them is 0.0
        return IntegralRatios(burst_ratio, flow_ratio, np.zeros(n), np.zeros(n), integral_pools, [], [])
    for i in integral_pools:
        ig = tree.elements[i].integral_guarantees  # type: ignore[attr-defined]
        burst = _vector(
            tree.elements[i],
            "integral_guarantees.burst_guarantee_resources",
            ig.burst_guarantee_resources,
        )
        flow = _vector(tree.elements[i], "integral_guarantees.resource_flow", ig.resource_flow)
        positive = total > 0
        burst_ratio[i] = float(np.max(burst[positive] / total[positive], initial=0.0))
        flow_ratio[i] = float(np.max(flow[positive] / total[positive], initial=0.0))
    # Burst, then relaxed pools, each in depth-first pre-order (InitIntegralPoolLists).
    order = _preorder_rank(tree, integral_pools)
    ranked = sorted(integral_pools.tolist(), key=lambda i: order[i])
    burst_pools = [i for i in ranked if integral_type[i] == 1]
    relaxed_pools = [i for i in ranked if integral_type[i] == 2]
    both = np.stack([burst_ratio.copy(), flow_ratio.copy()], axis=1)
    _sum_children_into(tree, both, own=True)
    return IntegralRatios(
        burst_ratio,
        flow_ratio,
        both[:, 0].copy(),
        both[:, 1].copy(),
        integral_pools,
        burst_pools,
        relaxed_pools,
    )


def _preorder_rank(tree: _Tree, integral_pools: np.ndarray) -> dict[int, tuple[int, ...]]:
    """Depth-first pre-order keys of the integral pools: their root paths compare lexicographically."""
    keys: dict[int, tuple[int, ...]] = {}
    for i in integral_pools.tolist():
        path = []
        j = i
        while j > 0:
            path.append(j)
            j = int(tree.parent[j])
        keys[i] = tuple(reversed(path))
    return keys


# ---- b.7 volume accounting ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Volumes:
    """b.7's volume accounting by integral pool row: accumulated volumes, capacities and the previous update's
    integral share ratios (LastShareRatio)."""

    volume: dict[int, np.ndarray]
    capacity: dict[int, np.ndarray]
    last_ratio: dict[int, float]


def consume_and_refill(
    tree: _Tree,
    total: np.ndarray,
    settings: UpdateSettings,
    state: UpdateState,
    now: float,
    ratios: IntegralRatios,
    integral_type: np.ndarray,
) -> Volumes:
    """b.7: integral pools' accumulated volumes consumed by usage since the last update and refilled by their flow."""
    n = len(tree.elements)
    volumes: dict[int, np.ndarray] = {}
    last_ratio: dict[int, float] = {}
    capacities: dict[int, np.ndarray] = {}
    overflow = np.zeros((n, RESOURCE_COUNT))
    acceptable = np.zeros((n, RESOURCE_COUNT))
    period = settings.integral_pool_capacity_saturation_period
    st = state
    for i in ratios.integral_pools:
        pid = tree.ids[i]
        volume = np.array(st.accumulated_resource_volume.get(pid, np.zeros(RESOURCE_COUNT)), dtype=float)
        last_ratio[i] = float(st.last_integral_share_ratio.get(pid, 0.0))
        capacity = total * ratios.flow_ratio[i] * period
        capacities[i] = capacity
        if st.previous_update_time is not None and np.any(total != 0):
            dt = now - st.previous_update_time
            old = volume.copy()
            volume = volume + total * dt * ratios.flow_ratio[i] - total * dt * last_ratio[i]
            volume = np.maximum(volume, 0.0)
            upper = np.maximum(old, capacity)
            overflow[i] = np.maximum(volume - upper, 0.0)
            if tree.elements[i].integral_guarantees.can_accept_free_volume:  # type: ignore[attr-defined]
                acceptable[i] = np.maximum(capacity - volume, 0.0)
            volume = np.minimum(volume, upper)
        volumes[i] = volume
    # Free volume only ever reaches integral pools through a pool that distributes it.
    if (
        len(ratios.integral_pools)
        and st.previous_update_time is not None
        and any(p.integral_guarantees.should_distribute_free_volume_among_children for p in tree.pools[1:])
    ):
        _distribute_free_volume(tree, integral_type, ratios.total_flow_ratio, volumes, overflow, acceptable)
    return Volumes(volumes, capacities, last_ratio)


def _distribute_free_volume(
    tree: _Tree,
    integral_type: np.ndarray,
    total_flow_ratio: np.ndarray,
    volumes: dict[int, np.ndarray],
    overflow: np.ndarray,
    acceptable: np.ndarray,
) -> None:
    """b.7: overflow of integral pools flows up through plain pools and, where enabled, down to hungry pools (added to
    ``volumes`` in place)."""
    children_overflow = np.zeros_like(overflow)

    def pool_children(i: int) -> list[int]:
        return [c for c in tree.children(i) if not tree.is_op[c]]

    def gather(i: int) -> None:
        if integral_type[i] > 0:
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
        if integral_type[i] > 0:
            volumes[i] = volumes[i] + free
            return
        element = tree.elements[i]
        should = i != 0 and element.integral_guarantees.should_distribute_free_volume_among_children  # type: ignore[attr-defined]
        kids = pool_children(i)
        if should and not (np.all(free == 0) and np.all(children_overflow[i] == 0)):
            free = free + children_overflow[i]
            for r in range(RESOURCE_COUNT):
                if free[r] == 0:
                    continue
                hungry = [c for c in kids if acceptable[c, r] > EPSILON and total_flow_ratio[c] > EPSILON]
                weight_sum = sum(total_flow_ratio[c] for c in hungry)
                hungry.sort(key=lambda c: acceptable[c, r] / total_flow_ratio[c])
                k = 0
                while k < len(hungry):
                    c = hungry[k]
                    suggested = free[r] * (total_flow_ratio[c] / weight_sum)
                    if suggested < acceptable[c, r]:
                        break
                    accepted[c, r] = acceptable[c, r]
                    free[r] -= acceptable[c, r]
                    weight_sum -= total_flow_ratio[c]
                    k += 1
                for c in hungry[k:]:
                    accepted[c, r] = free[r] * (total_flow_ratio[c] / weight_sum)
        for c in kids:
            distribute(c)

    distribute(0)


def volume_ratio(total: np.ndarray, volume: np.ndarray, smooth_period: float) -> float:
    """b.7: the share of the cluster an integral pool's accumulated volume pays for over the smooth period."""
    positive = total > 0
    if not np.any(positive):
        return 0.0
    return float(np.min(volume[positive] / total[positive])) / smooth_period


def _hierarchical_available(
    tree: _Tree, limits_share: np.ndarray, i: int, guarantee: np.ndarray
) -> np.ndarray:
    """min over the element and its non-root ancestors of (limits share − guarantee share)."""
    result = np.ones(RESOURCE_COUNT)
    while i > 0:
        result = np.minimum(result, limits_share[i] - guarantee[i])
        i = int(tree.parent[i])
    return np.maximum(result, 0.0)


def _increase_integral(
    tree: _Tree, limits_share: np.ndarray, sgs: np.ndarray, i: int, delta: np.ndarray, pis: np.ndarray
) -> None:
    """Add ``delta`` to the proposed integral share of the pool and every ancestor (root may overcommit)."""
    while i >= 0:
        increased = pis[i] + delta
        if i != 0:
            increased = adjust_proposed_integral_share(limits_share[i], sgs[i], increased)
        pis[i] = increased
        i = int(tree.parent[i])


@dataclass(frozen=True, slots=True)
class IntegralShares:
    """b.7's results: proposed integral shares by element, and every integral pool's integral share ratio of this
    update (the next update's LastShareRatio)."""

    pis: np.ndarray
    last_ratio: dict[int, float]


def integral_shares(
    tree: _Tree,
    total: np.ndarray,
    settings: UpdateSettings,
    ratios: IntegralRatios,
    volumes: Volumes,
    sgs: np.ndarray,
    limits_share: np.ndarray,
    demand_share: np.ndarray,
    build: Build,
) -> IntegralShares:
    """b.7: burst pools' proposed integral shares one by one, then relaxed pools' together (their functions rebuilt
    by ``build`` with the guarantees and limits each stage sets)."""
    pis = np.zeros((len(tree.elements), RESOURCE_COUNT))
    last_ratio = dict(volumes.last_ratio)
    smooth = settings.integral_smooth_period
    for b in ratios.burst_pools:
        ratio = min(ratios.burst_ratio[b], volume_ratio(total, volumes.volume[b], smooth))
        available = _hierarchical_available(tree, limits_share, b, sgs + pis)
        proposed = np.minimum(np.full(RESOURCE_COUNT, ratio), available)
        proposed = adjust_proposed_integral_share(limits_share[b], sgs[b], proposed)
        pis[b] = proposed
        table = build(tree.subtree(b), sgs + pis, limits_share)
        pis[b] = 0.0
        within, _ = table.evaluate(np.array([b]), np.zeros(1))
        integral = np.maximum(within[0] - sgs[b], 0.0)
        _increase_integral(tree, limits_share, sgs, b, integral, pis)
        last_ratio[b] = float(integral.max())
    relaxed = [r for r in ratios.relaxed_pools if volume_ratio(total, volumes.volume[r], smooth) != 0]
    for r in ratios.relaxed_pools:
        if r not in relaxed:
            last_ratio[r] = last_ratio.get(r, 0.0)
    if relaxed:
        weights = np.array([volume_ratio(total, volumes.volume[r], smooth) for r in relaxed])
        _relaxed_shares(
            tree, settings, ratios, sgs, limits_share, demand_share, build, relaxed, weights, pis, last_ratio
        )
    return IntegralShares(pis, last_ratio)


def _relaxed_shares(
    tree: _Tree,
    settings: UpdateSettings,
    ratios: IntegralRatios,
    sgs: np.ndarray,
    limits_share: np.ndarray,
    demand_share: np.ndarray,
    build: Build,
    relaxed: list[int],
    weights: np.ndarray,
    pis: np.ndarray,
    last_ratio: dict[int, float],
) -> None:
    """b.7: relaxed pools' proposed integral shares (into ``pis`` and ``last_ratio``): one fit factor over their
    functions, weighted by their volume ratios, within what the top pools' guarantees and demands leave."""
    top = list(tree.children(0))
    guarantee = sgs + pis
    available = np.maximum(1.0 - np.minimum(guarantee[top], demand_share[top]).sum(axis=0), 0.0)
    limits = limits_share.copy()
    for r, w in zip(relaxed, weights, strict=True):
        pool = tree.elements[r]
        multiplier = pool.integral_guarantees.relaxed_share_multiplier_limit  # type: ignore[attr-defined]
        if multiplier is None:
            multiplier = settings.relaxed_share_multiplier_limit
        cap = min(w, ratios.flow_ratio[r] * multiplier)
        limits[r] = np.minimum(limits[r], sgs[r] + cap)
    elements = np.unique(np.concatenate([tree.subtree(r) for r in relaxed]))
    table = build(elements, guarantee, limits)
    weights = weights / weights.min()
    relaxed_elements = np.array(relaxed, dtype=np.int64)
    strong = sgs[relaxed]

    def shares(f: float) -> np.ndarray:
        values, _ = table.evaluate(relaxed_elements, np.minimum(1.0, f * weights))
        return np.maximum(values - strong, 0.0)

    fit = floating_point_inverse_lower_bound(
        0.0, 1.0, lambda f: bool(np.all(shares(f).sum(axis=0) <= available))
    )
    integral = shares(fit)
    for k, r in enumerate(relaxed):
        limited = np.minimum(integral[k], _hierarchical_available(tree, limits_share, r, sgs + pis))
        _increase_integral(tree, limits_share, sgs, r, limited, pis)
        last_ratio[r] = float(limited.max())
