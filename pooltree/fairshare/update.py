"""One fair-share update of a pool tree (yt-semantics §b, steps in the order of b.2).

The element tree is flattened once in breadth-first order (``layout.py``), so the children of every pool are
contiguous and every depth level is a contiguous range: per-element rules then run as numpy operations over
whole levels, and fair-share functions are built level by level in ``FunctionBatch`` objects. The steps live
by concern: ``inputs.py`` (reading, b.1), ``guarantees.py`` (attributes, strong and estimated guarantees,
weights), ``integral.py`` (b.7), ``building.py`` (functions, b.5), ``distribution.py`` (top-down), and
``results.py``; ``_Update`` combines them and ``update_fair_share`` runs them in order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pooltree.errors import ConfigError, PooltreeError
from pooltree.fairshare import functions as fn
from pooltree.fairshare.building import _Building
from pooltree.fairshare.distribution import _Distribution, _truncate_unsatisfied_gangs_in_fifo_pools
from pooltree.fairshare.guarantees import (
    GUARANTEES_OVERCOMMIT,
    PRIORITY_POOLS_WITHOUT_DONOR,
    _Guarantees,
    _StaticGuarantees,
)
from pooltree.fairshare.inputs import _Inputs
from pooltree.fairshare.integral import _Integral, _integral_shares, adjust_proposed_integral_share
from pooltree.fairshare.layout import EPSILON, _flatten, floating_point_inverse_lower_bound
from pooltree.fairshare.model import FairShareResult, Pool, UpdateSettings, UpdateState
from pooltree.fairshare.results import ElementResults, _detailed, _results
from pooltree.resources import RESOURCE_COUNT, RESOURCES, Vector

NESTED_PROMISED_GUARANTEE_POOLS = 29001


__all__ = [
    "EPSILON",
    "GUARANTEES_OVERCOMMIT",
    "NESTED_PROMISED_GUARANTEE_POOLS",
    "PRIORITY_POOLS_WITHOUT_DONOR",
    "ElementResults",
    "adjust_proposed_integral_share",
    "floating_point_inverse_lower_bound",
    "update_fair_share",
]


class _Update(_Inputs, _Guarantees, _Integral, _Building, _Distribution):
    """State of one update run; methods follow the steps of b.2 (each concern's mixin in its module)."""

    def __init__(
        self, root: Pool, total: Vector, settings: UpdateSettings, now: float, state: UpdateState | None
    ):
        self.settings = settings
        self.now = float(now)
        self.state = state or UpdateState()
        self.errors: list[PooltreeError] = []
        self.total = np.asarray(total, dtype=float)
        if (
            self.total.shape != (RESOURCE_COUNT,)
            or not np.all(np.isfinite(self.total))
            or np.any(self.total < 0)
        ):
            raise ConfigError("total_resources", "expected 5 non-negative finite resource amounts")
        if settings.main_resource not in RESOURCES:
            raise ConfigError("settings.main_resource", f"unknown resource {settings.main_resource!r}")
        m = settings.infer_weight_from_guarantees_share_multiplier
        if m is not None and not (math.isfinite(m) and m >= 1.0):
            raise ConfigError(
                "settings.infer_weight_from_guarantees_share_multiplier", "must be a number ≥ 1"
            )
        if settings.integral_smooth_period <= 0:
            raise ConfigError("settings.integral_smooth_period", "must be positive")
        if settings.fifo_pool_scheduling_order not in ("satisfaction", "fifo"):
            raise ConfigError("settings.fifo_pool_scheduling_order", "must be 'satisfaction' or 'fifo'")
        self.tree = _flatten(root)
        self._base_functions: tuple[fn.FunctionTable, np.ndarray, np.ndarray] | None = None
        self.reused: _StaticGuarantees | None = None
        self.statics: _StaticGuarantees | None = None  # reused or kept by this update
        self._key: tuple[Any, ...] = ()
        self._read_inputs()
        self.any_fifo = bool(self.fifo.any())


def update_fair_share(
    root: Pool,
    total_resources: Vector,
    settings: UpdateSettings,
    now: float,
    state: UpdateState | None = None,
) -> FairShareResult:
    """Run one fair-share update (yt-semantics §b) and compute statuses (§c) for every element.

    ``now`` is the update time in seconds (any epoch; only differences to ``state.previous_update_time``
    matter). Raises ``ConfigError`` naming the field for bad input; guarantee overcommit is reported as
    alerts in ``FairShareResult.errors``.
    """
    upd = _Update(root, total_resources, settings, now, state)
    tree = upd.tree
    n = len(tree.elements)
    # b.2 step 1: nested promised-guarantee pools.
    pool_idx = tree.memo("pool_idx", lambda: np.flatnonzero(~tree.is_op)).tolist()
    promised_pools = [
        i for i, p in zip(pool_idx, tree.pools, strict=True) if p.compute_promised_guarantee_fair_share
    ]
    promised_flag = np.zeros(n, dtype=bool)
    promised_flag[promised_pools] = True
    nested = []
    for i in promised_pools:
        p = int(tree.parent[i])
        while p >= 0:
            if promised_flag[p]:
                nested.append(i)
                break
            p = int(tree.parent[p])
    if nested:
        upd.errors.append(
            PooltreeError(
                "Found pools with enabled promised guarantee fair share computation which are nested inside other such pools",
                code=NESTED_PROMISED_GUARANTEE_POOLS,
                attributes={"nested_promised_guarantee_fair_share_pools": [tree.ids[i] for i in nested]},
            )
        )
    upd.validate_priority_pools()
    # Steps 2-6. The integral ratios come first (they read only the pools' inputs): with the priority tier,
    # they are among the inputs of the steps the previous update's results may stand in for.
    upd.compute_integral_ratios()
    upd.reuse_guarantees()
    upd.compute_attributes()
    reused = upd.reused
    if reused is None:
        upd.infer_strong_guarantees()
    else:
        upd.inferred = reused.inferred
    upd.consume_and_refill()
    if reused is None:
        alerts = len(upd.errors)
        upd.adjust_guarantees()
        upd.compute_weights()
        upd.compute_estimated_guarantees()
        if len(upd.errors) == alerts:
            upd.keep_guarantees()
    else:
        upd.sgs, upd.weight, upd.egs = reused.sgs, reused.weight, reused.egs
        upd.compute_fifo_order()
    # Step 7: integral guarantees.
    pis = np.zeros((n, RESOURCE_COUNT))
    if len(upd.integral_pools):
        # The base functions (strong guarantees only); integral stages rebuild just the pools they change.
        upd.build_functions(np.arange(n), upd.sgs, upd.limits_share)
        pis = _integral_shares(upd)
    guarantee = upd.sgs + pis
    # Step 8: functions and the top-down distribution from the root with suggestion 1.
    table = upd.build_functions(np.arange(n), guarantee, upd.limits_share)
    if settings.enable_improved_fair_share_by_fit_factor_computation:
        fs = upd.distribute_improved(table)
    else:
        fs = upd.distribute(table, np.array([0]), np.ones(1))
    _truncate_unsatisfied_gangs_in_fifo_pools(upd, fs)
    limited_demand, _ = table.evaluate(np.arange(n), np.ones(n))
    # Step 9: promised guarantee fair share.
    promised = None
    outermost = [i for i in promised_pools if i not in nested]
    if outermost:
        promised = np.full((n, RESOURCE_COUNT), np.nan)
        for i in outermost:
            part = upd.distribute(table, np.array([i]), np.zeros(1))
            sub = tree.subtree(i)
            promised[sub] = part[sub]
    # Step 10: root fair share = sum of children.
    top = np.array(list(tree.children(0)), dtype=np.int64)
    strong_part, integral_part, weight_part = _detailed(fs, upd.sgs, pis)
    if len(top):
        fs[0] = fs[top].sum(axis=0)
        used_strong = strong_part[top].sum(axis=0)
    else:
        fs[0] = 0.0
        used_strong = np.zeros(RESOURCE_COUNT)
    root_sg, root_ig, root_wp = _detailed(fs[0], used_strong, pis[0])
    strong_part[0], integral_part[0], weight_part[0] = root_sg, root_ig, root_wp
    return _results(upd, fs, strong_part, integral_part, weight_part, limited_demand, promised, pis)
