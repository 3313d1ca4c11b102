"""One fair-share update of a pool tree (yt-semantics §b, steps in the order of b.2).

The element tree is flattened once in breadth-first order (``layout.py``), so the children of every pool are
contiguous and every depth level is a contiguous range: per-element rules then run as numpy operations over
whole levels, and fair-share functions are built level by level in ``FunctionBatch`` objects. The steps live
by concern: ``inputs.py`` (reading, b.1), ``guarantees.py`` (attributes, strong and estimated guarantees,
weights), ``integral.py`` (b.7), ``building.py`` (functions, b.5), ``distribution.py`` (top-down), and
``results.py`` (§c). Each step is a plain function of the arrays and small dataclasses it reads and returns what
it computes; ``update_fair_share`` calls them in order, and the decisions of ``reuse.py`` (whether the previous
update's results stand in for a step's) sit beside them here, never inside a step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.errors import ConfigError, PooltreeError
from pooltree.fairshare import (
    best_allocation,
    building,
    discretized,
    distribution,
    guarantees,
    historic_usage,
    integral,
    results,
    reuse,
)
from pooltree.fairshare import functions as fn
from pooltree.fairshare import inputs as reader
from pooltree.fairshare.guarantees import (
    GUARANTEES_OVERCOMMIT,
    PRIORITY_POOLS_WITHOUT_DONOR,
)
from pooltree.fairshare.inputs import ElementInputs
from pooltree.fairshare.integral import adjust_proposed_integral_share
from pooltree.fairshare.layout import EPSILON, _Tree, floating_point_inverse_lower_bound
from pooltree.fairshare.model import FairShareResult, Pool, UpdateSettings, UpdateState
from pooltree.fairshare.results import ElementResults, _detailed
from pooltree.fairshare.reuse import _StaticGuarantees
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


class _Update:
    """What one update run starts from: its settings, time and state, the checked totals, the flattened tree, the
    inputs read (b.1) and the alerts raised so far. The orchestrator's record, never a step's argument."""

    def __init__(
        self, root: Pool, total: Vector, settings: UpdateSettings, now: float, state: UpdateState | None
    ):
        self.settings = settings
        self.now = float(now)
        self.state = state or UpdateState()
        self.errors: list[PooltreeError] = []
        self.total = _checked(total, settings)
        self.tree = reuse.flatten(root, self.state.layout, self.state.relaid, self.state.renewed)
        last, rows = reuse.rows_to_read(self.tree, self.total, self.state.written)
        read, kept = reader.read_rows(self.tree, self.total, settings.main_resource, last, rows)
        reuse.keep_read(self.tree, kept)
        self.inputs: ElementInputs = read

    def alert(self, alert: PooltreeError | None) -> None:
        if alert is not None:
            self.errors.append(alert)


@dataclass(frozen=True, slots=True)
class _Statics:
    """What steps 2-6 computed: the best-allocation-capped tag limits, the priority tier, the integral ratios, limits,
    attributes, configured weights (historic ones made) and the averages behind them, guarantees and weights, FIFO
    order, integral volumes, and the kept guarantees they were taken from or kept as (None: neither)."""

    tag_limits: np.ndarray
    priority: np.ndarray
    ratios: integral.IntegralRatios
    limits: guarantees.Limits
    attrs: guarantees.Attributes
    weight_cfg: np.ndarray
    historic_usage: dict[tuple[str, str], Any]
    strong: guarantees.Guarantees
    fifo: guarantees.FifoOrder
    volumes: integral.Volumes
    kept: _StaticGuarantees | None


def _checked(total: Vector, settings: UpdateSettings) -> np.ndarray:
    """The cluster's total resources as floats, once they and the settings are valid (else an error naming the
    field)."""
    array = np.asarray(total, dtype=float)
    if array.shape != (RESOURCE_COUNT,) or not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ConfigError("total_resources", "expected 5 non-negative finite resource amounts")
    if settings.main_resource not in RESOURCES:
        raise ConfigError("settings.main_resource", f"unknown resource {settings.main_resource!r}")
    m = settings.infer_weight_from_guarantees_share_multiplier
    if m is not None and not (math.isfinite(m) and m >= 1.0):
        raise ConfigError("settings.infer_weight_from_guarantees_share_multiplier", "must be a number ≥ 1")
    if settings.integral_smooth_period <= 0:
        raise ConfigError("settings.integral_smooth_period", "must be positive")
    if settings.fifo_pool_scheduling_order not in ("satisfaction", "fifo"):
        raise ConfigError("settings.fifo_pool_scheduling_order", "must be 'satisfaction' or 'fifo'")
    return array


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
    upd = _Update(root, total_resources, settings, now, state)  # b.1: the inputs read
    tree = upd.tree
    n = len(tree.elements)
    promised_pools, nested = _promised_guarantee_pools(tree)  # b.2 step 1
    upd.alert(_nested_promised_alert(tree, nested))
    tier = tree.memo("priority_tier", lambda: guarantees.priority_tier(tree))
    upd.alert(guarantees.priority_alert(tree, tier))
    st = _statics(upd, tier.priority)  # steps 2-6
    function_inputs = _function_inputs(upd, st)
    builds = reuse.FunctionBuilds(function_inputs, upd.inputs.read_rows, upd.inputs.read_from)
    shares = _integral_shares(upd, st, builds)  # step 7
    # Step 8: functions and the top-down distribution from the root with suggestion 1.
    table = builds.build(np.arange(n), st.strong.sgs + shares.pis, st.limits.limits_share)
    derived = reuse.derived_statics(st.kept, bool(upd.inputs.fifo.any()))
    suggestions = distribution.Suggestions(st.strong.weight, upd.inputs.fifo, st.fifo.rank, derived)
    if settings.enable_improved_fair_share_by_fit_factor_computation:
        gap = settings.enable_improved_fair_share_by_fit_factor_computation_distribution_gap
        fs = distribution.distribute_improved(tree, table, suggestions, gap)
    else:
        fs = distribution.distribute(tree, table, suggestions, np.array([0]), np.ones(1))
    fs = distribution.truncate_unsatisfied_gangs_in_fifo_pools(
        tree, upd.inputs.fifo, st.attrs.demand_share, fs
    )
    limited_demand, _ = table.evaluate(np.arange(n), np.ones(n))
    # Step 9: promised guarantee fair share.
    outermost = [i for i in promised_pools if i not in nested]
    promised = _promised_fair_share(tree, table, suggestions, outermost)
    # Step 10: root fair share = sum of children.
    fs, parts = _root_sum(tree, fs, st.strong.sgs, shares.pis)
    result = _result(upd, st, shares, fs, parts, limited_demand, promised)
    if function_inputs.discretized is not None:
        ops = np.flatnonzero(tree.is_op)
        active, last = discretized.finish(function_inputs.discretized, fs, ops, function_inputs.step[ops])
        result.discretized_fair_share_active, result.state.discretized_fair_share = active, last
    return result


def _statics(upd: _Update, priority: np.ndarray) -> _Statics:
    """Steps 2-6: integral ratios, limits, attributes, historic weights, integral volumes, guarantees and weights, FIFO
    order. The limits, guarantees and weights are the previous update's where those stand in for them (``reuse``:
    every input they are computed from is the same in every bit), else computed and kept for the next update."""
    tree, total, settings, inputs = upd.tree, upd.total, upd.settings, upd.inputs
    tag_limits = best_allocation.cap_memory_limits(tree, inputs.tag_limits, settings.best_allocation_memory)
    # The integral ratios come first (they read only the pools' inputs): with the priority tier, they are among the
    # inputs of the steps the previous update's results may stand in for.
    ratios = integral.compute_integral_ratios(tree, total, inputs.integral_type)
    key, sources = (
        reuse.guarantees_key(settings, total),
        _static_sources(inputs, tag_limits, priority, ratios),
    )
    reused = reuse.reuse_guarantees(tree, key, sources, inputs.read_rows, inputs.read_from)
    if reused is not None:
        limits = reused.limits
    else:
        limits = guarantees.compute_limits(total, tag_limits, inputs.max_share_ratio, inputs.specified_limits)
    attrs = guarantees.compute_attributes(
        tree,
        total,
        inputs.usage,
        inputs.demand,
        inputs.schedulable,
        inputs.apply_limits,
        inputs.specified_limits,
    )
    weight_cfg, averages = inputs.weight_cfg, {}
    historic = historic_usage.apply_historic_weights(
        tree, upd.now, upd.state.historic_usage, attrs.usage_share, weight_cfg
    )
    if historic is not None:
        weight_cfg, averages = historic.weight_cfg, historic.averages
        reused = reuse.check_weights(reused, weight_cfg)
    volumes = integral.consume_and_refill(
        tree, total, settings, upd.state, upd.now, ratios, inputs.integral_type
    )
    if reused is not None:
        strong = reused.strong
    else:
        strong, adjusted = _guarantees(upd, tag_limits, priority, weight_cfg, limits, ratios)
        ratios = dataclasses.replace(ratios, burst_ratio=adjusted.burst_ratio)
        for alert in adjusted.alerts:
            upd.alert(alert)
        if not adjusted.alerts:
            reused = reuse.keep_guarantees(tree, key, sources, weight_cfg, limits, strong)
    fifo = guarantees.compute_fifo_order(tree, inputs.fifo, strong.weight)
    return _Statics(
        tag_limits, priority, ratios, limits, attrs, weight_cfg, averages, strong, fifo, volumes, reused
    )


def _guarantees(
    upd: _Update,
    tag_limits: np.ndarray,
    priority: np.ndarray,
    weight_cfg: np.ndarray,
    limits: guarantees.Limits,
    ratios: integral.IntegralRatios,
) -> tuple[guarantees.Guarantees, guarantees.Adjusted]:
    """b.3, b.4, b.6 in order: inferred strong guarantees, their adjustment, weights, estimated guarantees."""
    tree, total, settings, inputs = upd.tree, upd.total, upd.settings, upd.inputs
    inferred = guarantees.infer_strong_guarantees(
        tree, total, settings.main_resource, inputs.strong_config, inputs.spec_mask
    )
    adjusted = guarantees.adjust_guarantees(tree, total, inferred, limits.limits_share, priority, ratios)
    multiplier = settings.infer_weight_from_guarantees_share_multiplier
    weight = guarantees.compute_weights(tree, weight_cfg, multiplier, adjusted.sgs, ratios.total_flow_ratio)
    egs = guarantees.compute_estimated_guarantees(tree, adjusted.sgs, ratios.total_flow_ratio, weight)
    return guarantees.Guarantees(inferred, adjusted.sgs, weight, egs), adjusted


def _static_sources(
    inputs: ElementInputs, tag_limits: np.ndarray, priority: np.ndarray, ratios: integral.IntegralRatios
) -> tuple[np.ndarray, ...]:
    """The element inputs of the steps the previous update's results may stand in for, in the order of
    ``reuse._STATIC_INPUTS``."""
    return (
        tag_limits,
        inputs.max_share_ratio,
        inputs.specified_limits,
        inputs.strong_config,
        inputs.spec_mask,
        inputs.weight_cfg,
        inputs.fifo,
        priority,
        inputs.integral_type,
        ratios.burst_ratio,
        ratios.total_burst_ratio,
        ratios.total_flow_ratio,
    )


def _function_inputs(upd: _Update, st: _Statics) -> building.FunctionInputs:
    """What the update's functions (b.5) are built from besides guarantees and limits; the placements are the kept
    guarantees' where those stand (``reuse.derived_value``)."""
    tree, settings, inputs = upd.tree, upd.settings, upd.inputs
    derived = reuse.derived_statics(st.kept, bool(inputs.fifo.any()))
    placements = reuse.derived_value(
        derived, "placement", lambda: building.placements(tree, inputs.fifo, st.strong.weight, st.fifo.rank)
    )
    step = building.step_flags(tree, inputs.step, settings.enable_step_function_for_gang_operations)
    staircases = None
    if settings.enable_discretized_fair_share:
        staircases = discretized.DiscretizedInputs(
            tree,
            upd.total,
            settings.discretized_job_resources,
            settings.max_discretized_steps,
            inputs.apply_limits,
            st.attrs.usage,
            st.attrs.demand,
            st.attrs.dominant,
            upd.state.discretized_fair_share or {},
        )
    improved = settings.enable_improved_fair_share_by_fit_factor_computation
    return building.FunctionInputs(
        tree, st.attrs.usage_share, st.attrs.demand_share, step, placements, improved, staircases
    )


def _integral_shares(upd: _Update, st: _Statics, builds: reuse.FunctionBuilds) -> integral.IntegralShares:
    """Step 7 (b.7): the proposed integral shares and the integral pools' share ratios of this update."""
    tree = upd.tree
    n = len(tree.elements)
    if not len(st.ratios.integral_pools):
        return integral.IntegralShares(np.zeros((n, RESOURCE_COUNT)), st.volumes.last_ratio)
    # The base functions (strong guarantees only); integral stages rebuild just the pools they change.
    builds.build(np.arange(n), st.strong.sgs, st.limits.limits_share)
    return integral.integral_shares(
        tree,
        upd.total,
        upd.settings,
        st.ratios,
        st.volumes,
        st.strong.sgs,
        st.limits.limits_share,
        st.attrs.demand_share,
        builds.build,
    )


def _promised_guarantee_pools(tree: _Tree) -> tuple[list[int], list[int]]:
    """b.2 step 1: the pools computing a promised guarantee fair share, and those of them nested inside another
    such pool (only the outermost are computed)."""
    pool_idx = tree.memo("pool_idx", lambda: np.flatnonzero(~tree.is_op)).tolist()
    promised_pools = [
        i for i, p in zip(pool_idx, tree.pools, strict=True) if p.compute_promised_guarantee_fair_share
    ]
    promised_flag = np.zeros(len(tree.elements), dtype=bool)
    promised_flag[promised_pools] = True
    nested = []
    for i in promised_pools:
        p = int(tree.parent[i])
        while p >= 0:
            if promised_flag[p]:
                nested.append(i)
                break
            p = int(tree.parent[p])
    return promised_pools, nested


def _nested_promised_alert(tree: _Tree, nested: list[int]) -> PooltreeError | None:
    """b.2 step 1: alert 29001 naming the promised-guarantee pools nested inside another, if any."""
    if not nested:
        return None
    return PooltreeError(
        "Found pools with enabled promised guarantee fair share computation which are nested inside other such pools",
        code=NESTED_PROMISED_GUARANTEE_POOLS,
        attributes={"nested_promised_guarantee_fair_share_pools": [tree.ids[i] for i in nested]},
    )


def _promised_fair_share(
    tree: _Tree, table: fn.FunctionTable, suggestions: distribution.Suggestions, outermost: list[int]
) -> np.ndarray | None:
    """b.2 step 9: each outermost promised-guarantee pool's subtree distributed from the pool with suggestion 0
    (NaN elsewhere); None without such pools."""
    if not outermost:
        return None
    promised = np.full((len(tree.elements), RESOURCE_COUNT), np.nan)
    for i in outermost:
        part = distribution.distribute(tree, table, suggestions, np.array([i]), np.zeros(1))
        sub = tree.subtree(i)
        promised[sub] = part[sub]
    return promised


def _root_sum(
    tree: _Tree, fs: np.ndarray, sgs: np.ndarray, pis: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """b.2 step 10: the fair shares with the root's the sum of its children's, and the detailed parts (strong
    guarantee, integral guarantee, weight proportional) of every element, the root's from that sum."""
    top = np.array(list(tree.children(0)), dtype=np.int64)
    strong_part, integral_part, weight_part = _detailed(fs, sgs, pis)
    fs = fs.copy()
    if len(top):
        fs[0] = fs[top].sum(axis=0)
        used_strong = strong_part[top].sum(axis=0)
    else:
        fs[0] = 0.0
        used_strong = np.zeros(RESOURCE_COUNT)
    root_sg, root_ig, root_wp = _detailed(fs[0], used_strong, pis[0])
    strong_part[0], integral_part[0], weight_part[0] = root_sg, root_ig, root_wp
    return fs, (strong_part, integral_part, weight_part)


def _result(
    upd: _Update,
    st: _Statics,
    shares: integral.IntegralShares,
    fs: np.ndarray,
    parts: tuple[np.ndarray, np.ndarray, np.ndarray],
    limited_demand: np.ndarray,
    promised: np.ndarray | None,
) -> FairShareResult:
    """b.2 step 10 and §c: the update's result: per-element arrays, statuses, satisfaction and the next state."""
    tree, inputs, attrs, strong, ratios = upd.tree, upd.inputs, st.attrs, st.strong, st.ratios
    fifo_order = upd.settings.fifo_pool_scheduling_order == "fifo"
    status = results.statuses(
        tree,
        fs,
        attrs.usage_share,
        attrs.demand_share,
        inputs.tolerance,
        inputs.schedulable,
        inputs.fifo,
        st.fifo.rank,
        fifo_order,
    )
    volume, capacity = st.volumes.volume, st.volumes.capacity
    arrays: dict[str, Any] = {
        "resource_usage": attrs.usage,
        "resource_demand": attrs.demand,
        "usage_share": attrs.usage_share,
        "demand_share": attrs.demand_share,
        "limits_share": st.limits.limits_share,
        "resource_limits": st.limits.resource_limits,
        "strong_guarantee_share": strong.sgs,
        "inferred_strong_guarantee_resources": strong.inferred,
        "estimated_guarantee_share": strong.egs,
        "proposed_integral_share": shares.pis,
        "fair_share": fs,
        "strong_part": parts[0],
        "integral_part": parts[1],
        "weight_part": parts[2],
        "limited_demand_share": limited_demand,
        "promised": promised,
        "dominant": attrs.dominant,
        "weight": strong.weight,
        "satisfaction_ratio": status.satisfaction,
        "local_satisfaction_ratio": status.local,
        "below": status.below,
        "fifo_index": st.fifo.index,
        "burst_ratio": ratios.burst_ratio,
        "resource_flow_ratio": ratios.flow_ratio,
        "total_burst_ratio": ratios.total_burst_ratio,
        "total_resource_flow_ratio": ratios.total_flow_ratio,
        "integral_rows": {int(i): (volume[i], capacity[i]) for i in ratios.integral_pools},
    }
    elements = ElementResults(arrays, tree.ids, tree.parent, tree.is_op, tree.id_index())
    state = results.next_state(
        tree, upd.now, ratios.integral_pools, volume, shares.last_ratio, st.historic_usage
    )
    return FairShareResult(elements=elements, state=state, errors=upd.errors)
