"""Attributes, strong guarantees, weights and estimated guarantees (b.1, b.3, b.4, b.6)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.fairshare import functions as fn
from pooltree.fairshare.inputs import _readonly
from pooltree.fairshare.integral import IntegralRatios
from pooltree.fairshare.layout import (
    EPSILON,
    _block,
    _share,
    _sum_children_into,
    _Tree,
    floating_point_inverse_lower_bound,
)
from pooltree.resources import RESOURCES

GUARANTEES_OVERCOMMIT = 29000

PRIORITY_POOLS_WITHOUT_DONOR = 29002


# ---- b.1, b.4 (attributes) ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Attributes:
    """b.1's attributes by element: usage and demand (a pool's: its subtree's sums), their shares of the total and
    the dominant resource."""

    usage: np.ndarray
    demand: np.ndarray
    usage_share: np.ndarray
    demand_share: np.ndarray
    dominant: np.ndarray


def compute_attributes(
    tree: _Tree,
    total: np.ndarray,
    usage: np.ndarray,
    demand: np.ndarray,
    schedulable: np.ndarray,
    apply_limits: np.ndarray,
    specified_limits: np.ndarray,
) -> Attributes:
    """b.1 (PreUpdate): operations' demand and usage; every element's usage and demand shares and dominant resource
    (its limits: `compute_limits`)."""
    is_op = tree.is_op
    usage, demand = usage.copy(), demand.copy()
    # Operation demand (b.1).
    not_running = is_op & ~schedulable
    demand[not_running] = usage[not_running]
    lim = apply_limits & is_op
    if np.any(lim):
        needed = np.maximum(np.minimum(demand[lim], specified_limits[lim]) - usage[lim], 0.0)
        demand[lim] = usage[lim] + needed
    _sum_children_into(tree, usage)
    _sum_children_into(tree, demand)
    usage_share = _share(usage, total)
    demand_share = _share(demand, total)
    # Dominant resource: on usage if non-zero, else on demand; ties to the earlier resource; zero -> cpu.
    basis = np.where(fn.row_any(usage > 0)[:, None], usage_share, demand_share)
    basis = np.where(total > 0, basis, 0.0)
    best = np.argmax(basis, axis=1)
    best = np.where(fn.row_max(basis) > 0, best, RESOURCES.index("cpu"))
    return Attributes(usage, demand, usage_share, demand_share, best)


@dataclass(frozen=True, slots=True)
class Limits:
    """b.1's resource limits by element and their shares of the total."""

    resource_limits: np.ndarray
    limits_share: np.ndarray


def compute_limits(
    total: np.ndarray, tag_limits: np.ndarray, max_share_ratio: np.ndarray, specified_limits: np.ndarray
) -> Limits:
    """b.1 (PreUpdate): every element's resource limits (the least of its tag-filter limits, its max share ratio of
    the total and its specified limits; the root's: the total) and their shares."""
    limits = np.minimum(np.minimum(tag_limits, total * max_share_ratio[:, None]), specified_limits)
    limits[0] = total
    return Limits(limits, _share(np.minimum(limits, total), total))


@dataclass(frozen=True, slots=True)
class Guarantees:
    """b.3-b.6's results by element: inferred strong guarantee resources, strong guarantee shares, weights and
    estimated guarantee shares."""

    inferred: np.ndarray
    sgs: np.ndarray
    weight: np.ndarray
    egs: np.ndarray


# ---- b.3 ----------------------------------------------------------------------------------------
def infer_strong_guarantees(
    tree: _Tree, total: np.ndarray, main_resource: str, strong_config: np.ndarray, spec_mask: np.ndarray
) -> np.ndarray:
    """b.3: strong guarantees of the resources a pool does not name, in proportion to its main_resource guarantee."""
    main = RESOURCES.index(main_resource)
    inferred = strong_config.copy()
    inferred[0] = total
    take = np.take
    for level in tree.parent_levels():
        parents, seg, slot = level.parents, level.seg, level.slot
        children = _block(level)  # a level's children are one contiguous block: slices, not gathers
        par = tree.parent[children]
        explicit = strong_config[children]
        explicit_sum = np.add.reduceat(explicit, seg, axis=0)
        parent_inferred = take(inferred, parents, axis=0)
        residual = np.maximum(parent_inferred - explicit_sum, 0.0)
        p_main = take(inferred[:, main], par)
        ratio = np.where(p_main > 0, explicit[:, main] / np.where(p_main > 0, p_main, 1.0), 0.0)
        implicit_mask = ~spec_mask[children]
        implicit_mask[:, main] = False
        implicit = np.where(implicit_mask, ratio[:, None] * take(inferred, par, axis=0), 0.0)
        implicit_sum = np.add.reduceat(implicit, seg, axis=0)
        scale = np.ones_like(implicit_sum)
        over = (implicit_sum > residual) & (parents != 0)[:, None]
        scale[over] = residual[over] / implicit_sum[over]
        implicit = implicit * take(scale, slot, axis=0)
        inferred[children] = np.where(implicit_mask, implicit, explicit)
    return inferred


# ---- b.4 ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Adjusted:
    """b.4's results: strong guarantee shares by element, the burst pools' ratios (scaled down when strong and burst
    guarantees overcommit the cluster) and the overcommit alerts."""

    sgs: np.ndarray
    burst_ratio: np.ndarray
    alerts: tuple[PooltreeError, ...]


def adjust_guarantees(
    tree: _Tree,
    total: np.ndarray,
    inferred: np.ndarray,
    limits_share: np.ndarray,
    priority: np.ndarray,
    ratios: IntegralRatios,
) -> Adjusted:
    """b.4: children's guarantees shrunk to fit their parent's, by tiers (``_shrink_guarantees``); alert 29000 on overcommit."""
    sgs = _share(inferred, total)
    top = (
        np.arange(tree.level_start[1], tree.level_start[2]) if len(tree.level_start) > 2 else np.zeros(0, int)
    )
    sgs[0] = sgs[top].sum(axis=0)
    strong_total = inferred[top].sum(axis=0)
    flow = total * ratios.total_flow_ratio[0]
    burst = total * ratios.total_burst_ratio[0]
    burst_ratio = ratios.burst_ratio
    alerts: list[PooltreeError] = []
    attrs = {
        "total_cluster_resources": total.tolist(),
        "total_strong_guarantee_resources": strong_total.tolist(),
    }
    if not np.all(total >= strong_total + flow):
        alerts.append(
            PooltreeError(
                "Strong guarantees and resource flows exceed total cluster resources",
                code=GUARANTEES_OVERCOMMIT,
                attributes={**attrs, "total_resource_flow": flow.tolist()},
            )
        )
    if not np.all(total >= strong_total + burst):
        alerts.append(
            PooltreeError(
                "Strong guarantees and burst guarantees exceed total cluster resources",
                code=GUARANTEES_OVERCOMMIT,
                attributes={**attrs, "total_burst_resources": burst.tolist()},
            )
        )
        burst_sum = sum(burst_ratio[i] for i in ratios.burst_pools)
        root_sgs = sgs[0].copy()
        factor = floating_point_inverse_lower_bound(
            0.0, 1.0, lambda f: bool(np.all(root_sgs * f + burst_sum * f <= 1.0))
        )
        sgs[0] = root_sgs * factor
        burst_ratio = burst_ratio.copy()
        for i in ratios.burst_pools:
            burst_ratio[i] *= factor
    _fit_children(tree, sgs, limits_share, priority)
    return Adjusted(sgs, burst_ratio, tuple(alerts))


def _fit_children(tree: _Tree, sgs: np.ndarray, limits_share: np.ndarray, priority: np.ndarray) -> None:
    """b.4 top-down (in place): a pool's guarantee within its own limits, its children's sum within its guarantee."""
    ls = limits_share
    for d in range(len(tree.level_start) - 1):
        lo, hi = tree.level_start[d], tree.level_start[d + 1]
        pools = np.arange(lo, hi)
        pools = pools[~tree.is_op[pools]]
        sgs[pools] = np.minimum(sgs[pools], ls[pools])
        parents = pools[tree.child_count[pools] > 0]
        if len(parents) == 0 or d + 2 > len(tree.level_start) - 1:
            continue
        clo = tree.level_start[d + 1]
        sums = np.add.reduceat(sgs[clo : tree.level_start[d + 2]], tree.child_start[parents] - clo, axis=0)
        over = np.flatnonzero(fn.row_any(sums > sgs[parents]))
        for k in over:
            p = int(parents[k])
            kids = np.array(tree.children(p))
            sgs[kids] = _shrink_guarantees(sgs[kids].copy(), priority[kids], np.maximum(sgs[p], 0.0))


@dataclass(frozen=True, slots=True)
class PriorityTier:
    """The pools in the priority guarantee tier (by element), and the flagged pools without a donor ancestor."""

    priority: np.ndarray
    orphans: np.ndarray


def priority_tier(tree: _Tree) -> PriorityTier:
    """b.2 step 1: the pools with priority strong guarantee adjustment that have a donor ancestor; the others are
    orphans (`priority_alert`) and stay regular."""
    n = len(tree.elements)
    flags = [p.enable_priority_strong_guarantee_adjustment for p in tree.pools]
    donors = [p.enable_priority_strong_guarantee_adjustment_donorship for p in tree.pools]
    flagged = np.zeros(n, dtype=bool)
    donor = np.zeros(n, dtype=bool)
    pool_idx = tree.memo("pool_idx", lambda: np.flatnonzero(~tree.is_op))
    flagged[pool_idx] = [bool(f) for f in flags]
    donor[pool_idx] = [bool(d) for d in donors]
    # Whether some strict ancestor is a donor, top-down.
    donor_above = np.zeros(n, dtype=bool)
    for level in tree.parent_levels():
        parents_donor = donor_above[level.parents] | donor[level.parents]
        donor_above[level.children] = parents_donor[level.slot]
    return PriorityTier(_readonly(flagged & donor_above), np.flatnonzero(flagged & ~donor_above))


def priority_alert(tree: _Tree, tier: PriorityTier) -> PooltreeError | None:
    """b.2 step 1: alert 29002 naming the priority-tier pools without a donor ancestor, if any."""
    if not len(tier.orphans):
        return None
    return PooltreeError(
        "Found pools with enabled priority strong guarantee adjustment which have no donor ancestor",
        code=PRIORITY_POOLS_WITHOUT_DONOR,
        attributes={"pools_without_donor": [tree.ids[i] for i in tier.orphans]},
    )


# ---- b.6 ----------------------------------------------------------------------------------------
def compute_weights(
    tree: _Tree,
    weight_cfg: np.ndarray,
    multiplier: float | None,
    sgs: np.ndarray,
    total_flow_ratio: np.ndarray,
) -> np.ndarray:
    """b.6: weights (unset: 1, or inferred from guarantees by infer_weight_from_guarantees_share_multiplier)."""
    weight = np.where(np.isnan(weight_cfg), 1.0, weight_cfg)
    if multiplier is not None:
        g = fn.row_max(sgs) + total_flow_ratio
        unset = np.isnan(weight_cfg)
        unset[0] = False
        gp = g[np.maximum(tree.parent, 0)]
        ok = (g >= EPSILON) & (gp >= EPSILON)
        inferred = np.where(ok, multiplier * g / np.where(ok, gp, 1.0), 1.0)
        weight = np.where(unset, inferred, weight)
    weight[0] = 1.0
    return weight


@dataclass(frozen=True, slots=True)
class FifoOrder:
    """Every operation's rank in its FIFO pool (0 elsewhere), and the ranks of those in FIFO pools by row."""

    rank: np.ndarray
    index: dict[int, int]


def compute_fifo_order(tree: _Tree, fifo: np.ndarray, weight: np.ndarray) -> FifoOrder:
    """b.6: FIFO order of operations in FIFO pools, by the pools' ``fifo_sort_parameters``."""
    n = len(tree.elements)
    fifo_rank = np.zeros(n, dtype=np.int64)
    fifo_index: dict[int, int] = {}
    for p in np.flatnonzero(fifo):
        pool = tree.elements[p]
        kids = list(tree.children(int(p)))
        params = pool.fifo_sort_parameters  # type: ignore[attr-defined]

        def key(c: int, params: tuple[str, ...] = params) -> tuple[float, ...]:
            op = tree.elements[c]
            out = []
            for name in params:
                if name == "weight":
                    out.append(-weight[c])
                elif name == "start_time":
                    out.append(op.start_time)  # type: ignore[attr-defined]
                else:
                    out.append(op.pending_allocation_count)  # type: ignore[attr-defined]
            return tuple(out)

        for rank, c in enumerate(sorted(kids, key=key)):
            fifo_rank[c] = rank
            fifo_index[c] = rank
    return FifoOrder(fifo_rank, fifo_index)


def compute_estimated_guarantees(
    tree: _Tree, sgs: np.ndarray, total_flow_ratio: np.ndarray, weight: np.ndarray
) -> np.ndarray:
    """b.3: estimated guarantees top-down: each child takes its guarantee and flow within what its parent's
    estimate has left, in order, and the rest of the parent's is split by weight."""
    egs = np.zeros_like(sgs)
    egs[0] = sgs[0]
    take = np.take
    for level in tree.parent_levels():
        parents, seg, slot = level.parents, level.seg, level.slot
        children = _block(level)
        want = sgs[children] + total_flow_ratio[children, None]
        budget = take(take(egs, parents, axis=0), slot, axis=0)
        prefix = np.cumsum(want, axis=0)
        base = np.where((seg > 0)[:, None], take(prefix, np.maximum(seg - 1, 0), axis=0), 0.0)
        incl = prefix - take(base, slot, axis=0)
        excl = incl - want
        # Sequential "min(want, still undistributed)" over the children, as prefix sums.
        got = np.minimum(incl, budget) - np.minimum(excl, budget)
        undistributed = take(egs, parents, axis=0) - np.add.reduceat(got, seg, axis=0)
        weights = weight[children]
        wsum = np.add.reduceat(weights, seg)
        with np.errstate(divide="ignore", invalid="ignore"):
            part = np.where(take(wsum, slot) > 0, weights / take(wsum, slot), 0.0)
        egs[children] = got + take(undistributed, slot, axis=0) * part[:, None]
    return egs


def _guarantee_fit_factor(shares: np.ndarray, available: np.ndarray) -> float:
    """Largest f in [0, 1] with Σ shares × f ≤ available in every resource (binary search, b.4)."""
    return floating_point_inverse_lower_bound(
        0.0, 1.0, lambda f: bool(np.all((shares * f).sum(axis=0) <= available))
    )


def _shrink_guarantees(child_sgs: np.ndarray, priority: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Children's guarantees fitted into the parent's (b.4 tiers).

    Priority-tier children keep theirs and the regular tier is scaled into what is left; if the priority tier
    alone overflows, it is scaled and the regular tier gets nothing. Without priority children: one scaling.
    """
    if not np.any(priority):
        return child_sgs * _guarantee_fit_factor(child_sgs, available)
    out = child_sgs.copy()
    first = child_sgs[priority]
    first_sum = first.sum(axis=0)
    if np.all(first_sum <= available):
        rest = child_sgs[~priority]
        out[~priority] = rest * _guarantee_fit_factor(rest, np.maximum(available - first_sum, 0.0))
    else:
        out[priority] = first * _guarantee_fit_factor(first, available)
        out[~priority] = 0.0
    return out
