"""An update's results: statuses and satisfaction (§c), the lazily built per-element mapping, the next state."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.fairshare.layout import _Tree
from pooltree.fairshare.model import DetailedFairShare, ElementResult, UpdateState
from pooltree.fairshare.status import BELOW_FAIR_SHARE, NORMAL, is_below_fair_share, local_satisfaction_ratio
from pooltree.resources import RESOURCES


def _detailed(total: np.ndarray, strong: np.ndarray, integral: np.ndarray) -> tuple[np.ndarray, ...]:
    """The fair share split into its strong-guarantee, integral and weight-proportional parts (orchid's detailed_fair_share)."""
    sg = np.minimum(total, strong)
    ig = np.minimum(total - sg, integral)
    return sg, ig, total - sg - ig


@dataclass(frozen=True, slots=True)
class Statuses:
    """§c's results by element: below fair share (the scheduling status), local and post-update satisfaction."""

    below: np.ndarray
    local: np.ndarray
    satisfaction: np.ndarray


def statuses(
    tree: _Tree,
    fs: np.ndarray,
    usage_share: np.ndarray,
    demand_share: np.ndarray,
    tolerance: np.ndarray,
    schedulable: np.ndarray,
    fifo: np.ndarray,
    fifo_rank: np.ndarray,
    fifo_order: bool,
) -> Statuses:
    """§c with usage at the update: every element's status (the root's normal), local satisfaction ratio and
    satisfaction (`_post_update_satisfaction`)."""
    is_op = tree.is_op
    below = np.asarray(
        is_below_fair_share(
            fs, usage_share, demand_share, tolerance, is_operation=is_op, schedulable=schedulable
        )
    ).copy()
    below[0] = False
    local = np.asarray(local_satisfaction_ratio(fs, usage_share, demand_share))
    satisfaction = _post_update_satisfaction(tree, local, schedulable, fifo, fifo_rank, fifo_order)
    return Statuses(below, local, satisfaction)


def _post_update_satisfaction(
    tree: _Tree,
    local: np.ndarray,
    schedulable: np.ndarray,
    fifo: np.ndarray,
    fifo_rank: np.ndarray,
    fifo_order: bool,
) -> np.ndarray:
    """§e.2: pools take their best schedulable child's satisfaction (smallest; first in FIFO order when
    ``fifo_pool_scheduling_order`` is "fifo")."""
    satisfaction = local.copy()
    schedulable = schedulable.copy()
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
        if fifo_order and np.any(fifo[parents]):
            rank = np.where(kids_ok, fifo_rank[clo:chi], np.iinfo(np.int64).max)
            slot = np.repeat(np.arange(len(parents)), tree.child_count[parents])
            first_rank = np.minimum.reduceat(rank, seg)
            chosen = kids_ok & (rank == first_rank[slot])
            fifo_best = np.minimum.reduceat(np.where(chosen, satisfaction[clo:chi], np.inf), seg)
            best = np.where(fifo[parents], fifo_best, best)
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


def element_kinds(elements: Mapping[str, ElementResult]) -> Iterator[tuple[str, bool]]:
    """``(id, is_operation)`` of each element of an update's results in order; an ``ElementResults`` answers from its
    arrays without materialising its elements (``ElementResults.kinds``), another mapping from its results."""
    if isinstance(elements, ElementResults):
        return elements.kinds()
    return ((element_id, element.is_operation) for element_id, element in elements.items())


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

    def kinds(self) -> Iterator[tuple[str, bool]]:
        """``(id, is_operation)`` of each element in order, read from the arrays: no ``ElementResult`` is made (a
        caller that only tells pools from operations, such as the read snapshot's capture under the scheduling
        lock, does not pay the ~20 array copies per element the first look-up of a new update's element costs)."""
        return zip(self.ids, self._is_op.tolist(), strict=True)

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


def next_state(
    tree: _Tree,
    now: float,
    integral_pools: np.ndarray,
    volume: dict[int, np.ndarray],
    last_ratio: dict[int, float],
    historic_usage: dict[tuple[str, str], Any],
) -> UpdateState:
    """What this update leaves to the next: its time, the integral pools' volumes and share ratios, the historic
    usage averages and the flattened tree."""
    return UpdateState(
        previous_update_time=now,
        accumulated_resource_volume={tree.ids[i]: volume[i] for i in integral_pools},
        last_integral_share_ratio={tree.ids[i]: last_ratio.get(i, 0.0) for i in integral_pools},
        historic_usage=historic_usage,
        layout=tree,
    )
