"""An update's results: statuses and satisfaction (§c), the lazily built per-element mapping, the next state."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.fairshare.model import DetailedFairShare, ElementResult, FairShareResult, UpdateState
from pooltree.fairshare.status import BELOW_FAIR_SHARE, NORMAL, is_below_fair_share, local_satisfaction_ratio
from pooltree.resources import RESOURCES

if TYPE_CHECKING:
    from pooltree.fairshare.layout import _Tree
    from pooltree.fairshare.update import _Update


def _detailed(total: np.ndarray, strong: np.ndarray, integral: np.ndarray) -> tuple[np.ndarray, ...]:
    """The fair share split into its strong-guarantee, integral and weight-proportional parts (orchid's detailed_fair_share)."""
    sg = np.minimum(total, strong)
    ig = np.minimum(total - sg, integral)
    return sg, ig, total - sg - ig


def _post_update_satisfaction(upd: _Update, local: np.ndarray) -> np.ndarray:
    """Pools take their best schedulable child's satisfaction (smallest; first in FIFO order when so set)."""
    tree = upd.tree
    satisfaction = local.copy()
    schedulable = upd.schedulable.copy()
    fifo_order = upd.settings.fifo_pool_scheduling_order == "fifo"
    for childless, parents, clo, chi, seg in tree.memo(
        "satisfaction_levels", lambda: _satisfaction_levels(tree)
    ):
        schedulable[childless] = False
        if parents is None:
            continue
        kids_ok = schedulable[clo:chi]
        any_ok = np.logical_or.reduceat(kids_ok, seg)
        schedulable[parents] = any_ok
        candidate = np.where(kids_ok, satisfaction[clo:chi], np.inf)
        best = np.minimum.reduceat(candidate, seg)
        if fifo_order and np.any(upd.fifo[parents]):
            rank = np.where(kids_ok, upd.fifo_rank[clo:chi], np.iinfo(np.int64).max)
            slot = np.repeat(np.arange(len(parents)), tree.child_count[parents])
            first_rank = np.minimum.reduceat(rank, seg)
            chosen = kids_ok & (rank == first_rank[slot])
            fifo_best = np.minimum.reduceat(np.where(chosen, satisfaction[clo:chi], np.inf), seg)
            best = np.where(upd.fifo[parents], fifo_best, best)
        satisfaction[parents] = np.where(any_ok, best, satisfaction[parents])
    return satisfaction


def _satisfaction_levels(tree: _Tree) -> list[tuple[Any, ...]]:
    """Bottom-up from the second-deepest level: the level's pools without children, the pools with children
    (None if none), the range of the next level and where each pool's children start in it."""
    is_op = tree.is_op
    levels: list[tuple[Any, ...]] = []
    for d in range(len(tree.level_start) - 3, -1, -1):
        lo, hi = tree.level_start[d], tree.level_start[d + 1]
        parents = np.arange(lo, hi)
        parents = parents[~is_op[parents]]
        childless = parents[tree.child_count[parents] == 0]
        parents = parents[tree.child_count[parents] > 0]
        if len(parents) == 0:
            levels.append((childless, None, None, None, None))
            continue
        clo, chi = tree.level_start[d + 1], tree.level_start[d + 2]
        levels.append((childless, parents, clo, chi, tree.child_start[parents] - clo))
    return levels


class ElementResults(Mapping[str, ElementResult]):
    """Per-element results as a read-only mapping id → ElementResult, built on access from the update's arrays.

    The update itself only fills arrays (one row per element, breadth-first); an ``ElementResult`` is
    materialised (and cached) the first time its id is looked up, so callers that read a few elements do not
    pay for all of them. ``index`` and the array attributes serve vectorised callers.
    """

    def __init__(
        self,
        arrays: dict[str, Any],
        ids: list[str],
        parent: np.ndarray,
        is_op: np.ndarray,
        index: dict[str, int] | None = None,
    ):
        self.arrays = arrays
        self.ids = ids
        # ``index`` (id -> row) may be shared by the results of updates of the same tree: read-only.
        self.index = dict(zip(ids, range(len(ids)), strict=True)) if index is None else index
        self._parent = parent
        self._is_op = is_op
        self._cache: dict[int, ElementResult] = {}

    def __getitem__(self, element_id: str) -> ElementResult:
        i = self.index[element_id]
        cached = self._cache.get(i)
        if cached is None:
            cached = self._build(i)
            self._cache[i] = cached
        return cached

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, element_id: object) -> bool:
        return element_id in self.index

    def _build(self, i: int) -> ElementResult:
        a = self.arrays
        prom = None
        promised = a["promised"]
        if promised is not None and not np.isnan(promised[i, 0]):
            total_p = promised[i].copy()
            sg, ig, wp = _detailed(total_p, a["strong_guarantee_share"][i], a["proposed_integral_share"][i])
            prom = DetailedFairShare(sg, ig, wp, total_p)
        integral = a["integral_rows"].get(i)
        parent = int(self._parent[i])
        fifo_index = a["fifo_index"].get(i)
        return ElementResult(
            id=self.ids[i],
            is_operation=bool(self._is_op[i]),
            parent=None if parent < 0 else self.ids[parent],
            resource_usage=a["resource_usage"][i].copy(),
            resource_demand=a["resource_demand"][i].copy(),
            usage_share=a["usage_share"][i].copy(),
            demand_share=a["demand_share"][i].copy(),
            limits_share=a["limits_share"][i].copy(),
            resource_limits=a["resource_limits"][i].copy(),
            strong_guarantee_share=a["strong_guarantee_share"][i].copy(),
            inferred_strong_guarantee_resources=a["inferred_strong_guarantee_resources"][i].copy(),
            estimated_guarantee_share=a["estimated_guarantee_share"][i].copy(),
            proposed_integral_share=a["proposed_integral_share"][i].copy(),
            fair_share=a["fair_share"][i].copy(),
            detailed_fair_share=DetailedFairShare(
                a["strong_part"][i].copy(),
                a["integral_part"][i].copy(),
                a["weight_part"][i].copy(),
                a["fair_share"][i].copy(),
            ),
            limited_demand_share=a["limited_demand_share"][i].copy(),
            promised_guarantee_fair_share=prom,
            dominant_resource=RESOURCES[int(a["dominant"][i])],
            weight=float(a["weight"][i]),
            satisfaction_ratio=float(a["satisfaction_ratio"][i]),
            local_satisfaction_ratio=float(a["local_satisfaction_ratio"][i]),
            scheduling_status=BELOW_FAIR_SHARE if a["below"][i] else NORMAL,
            fifo_index=None if fifo_index is None else int(fifo_index),
            burst_ratio=float(a["burst_ratio"][i]),
            resource_flow_ratio=float(a["resource_flow_ratio"][i]),
            total_burst_ratio=float(a["total_burst_ratio"][i]),
            total_resource_flow_ratio=float(a["total_resource_flow_ratio"][i]),
            accumulated_resource_volume=None if integral is None else integral[0].copy(),
            integral_pool_capacity=None if integral is None else integral[1].copy(),
        )


def _results(
    upd: _Update,
    fs: np.ndarray,
    strong_part: np.ndarray,
    integral_part: np.ndarray,
    weight_part: np.ndarray,
    limited_demand: np.ndarray,
    promised: np.ndarray | None,
    pis: np.ndarray,
) -> FairShareResult:
    """b.2 step 10 and §c: the update's result: per-element arrays, statuses, satisfaction and the next state."""
    tree = upd.tree
    is_op = tree.is_op
    # Statuses (§c), computed with usage at update.
    below = np.asarray(
        is_below_fair_share(
            fs,
            upd.usage_share,
            upd.demand_share,
            upd.tolerance,
            is_operation=is_op,
            schedulable=upd.schedulable,
        )
    ).copy()
    below[0] = False
    local = np.asarray(local_satisfaction_ratio(fs, upd.usage_share, upd.demand_share))
    satisfaction = _post_update_satisfaction(upd, local)
    arrays: dict[str, Any] = {
        "resource_usage": upd.usage,
        "resource_demand": upd.demand,
        "usage_share": upd.usage_share,
        "demand_share": upd.demand_share,
        "limits_share": upd.limits_share,
        "resource_limits": upd.resource_limits,
        "strong_guarantee_share": upd.sgs,
        "inferred_strong_guarantee_resources": upd.inferred,
        "estimated_guarantee_share": upd.egs,
        "proposed_integral_share": pis,
        "fair_share": fs,
        "strong_part": strong_part,
        "integral_part": integral_part,
        "weight_part": weight_part,
        "limited_demand_share": limited_demand,
        "promised": promised,
        "dominant": upd.dominant,
        "weight": upd.weight,
        "satisfaction_ratio": satisfaction,
        "local_satisfaction_ratio": local,
        "below": below,
        "fifo_index": upd.fifo_index,
        "burst_ratio": upd.burst_ratio,
        "resource_flow_ratio": upd.flow_ratio,
        "total_burst_ratio": upd.total_burst_ratio,
        "total_resource_flow_ratio": upd.total_flow_ratio,
        "integral_rows": {int(i): (upd.volume[i], upd.capacity[i]) for i in upd.integral_pools},
    }
    elements = ElementResults(arrays, tree.ids, tree.parent, is_op, tree.id_index())
    new_state = UpdateState(
        previous_update_time=upd.now,
        accumulated_resource_volume={tree.ids[i]: upd.volume[i] for i in upd.integral_pools},
        last_integral_share_ratio={tree.ids[i]: upd.last_ratio.get(i, 0.0) for i in upd.integral_pools},
        historic_usage=upd.historic_usage,
        layout=tree,
    )
    return FairShareResult(elements=elements, state=new_state, errors=upd.errors)
