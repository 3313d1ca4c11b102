"""One fair-share update of a pool tree (yt-semantics §b, steps in the order of b.2).

The element tree is flattened once in breadth-first order (``layout.py``), so the children of every pool are
contiguous and every depth level is a contiguous range: per-element rules then run as numpy operations over
whole levels, and fair-share functions are built level by level in ``FunctionBatch`` objects. The steps live
by concern: ``inputs.py`` (reading, b.1), ``guarantees.py`` (attributes, strong and estimated guarantees,
weights), ``integral.py`` (b.7), ``building.py`` (functions, b.5), ``distribution.py`` (top-down), and
``results.py``: each step is a function of ``_Update`` (the state of one run) and ``update_fair_share`` runs
them in order.
"""

from __future__ import annotations

import dataclasses
import math
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
    reuse,
)
from pooltree.fairshare import functions as fn
from pooltree.fairshare.distribution import _truncate_unsatisfied_gangs_in_fifo_pools
from pooltree.fairshare.guarantees import (
    GUARANTEES_OVERCOMMIT,
    PRIORITY_POOLS_WITHOUT_DONOR,
)
from pooltree.fairshare.inputs import _read_inputs
from pooltree.fairshare.integral import IntegralRatios, Volumes, adjust_proposed_integral_share
from pooltree.fairshare.layout import EPSILON, _flatten, _Tree, floating_point_inverse_lower_bound
from pooltree.fairshare.model import FairShareResult, Pool, UpdateSettings, UpdateState
from pooltree.fairshare.results import ElementResults, _detailed, _results
from pooltree.fairshare.reuse import _StaticGuarantees
from pooltree.resources import RESOURCE_COUNT, RESOURCES, Vector

_UNSET: np.ndarray = np.empty(0)
_UNSET.flags.writeable = False
"""An array attribute of ``_Update`` that no step has set yet."""

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
    """The state of one update run: its inputs and what the steps of b.2 computed, by element row.

    The orchestrator's record, not a rule's argument: every step is a plain function of the arrays and dataclasses
    it reads (``guarantees``, ``integral``, ``building``, ``distribution``, ``results``), and ``update_fair_share``
    calls them in order, with the decisions of ``reuse`` beside them. Every attribute is declared here; an array a
    step has not set yet is the empty ``_UNSET``.
    """

    def __init__(
        self, root: Pool, total: Vector, settings: UpdateSettings, now: float, state: UpdateState | None
    ):
        self.settings = settings
        self.now = float(now)
        self.state = state or UpdateState()
        self.errors: list[PooltreeError] = []
        self.total = _checked(total, settings)
        self.tree = _flatten(root, self.state.layout, self.state.relaid, self.state.renewed)
        # the guarantees the previous update of this tree kept (``reuse``), or this update's once kept
        self.statics: _StaticGuarantees | None = None
        # inputs (b.1), set by inputs._read_inputs
        self.usage: np.ndarray = _UNSET
        self.demand: np.ndarray = _UNSET
        self.tag_limits: np.ndarray = _UNSET
        self.specified_limits: np.ndarray = _UNSET
        self.strong_config: np.ndarray = _UNSET
        self.spec_mask: np.ndarray = _UNSET
        self.weight_cfg: np.ndarray = _UNSET
        self.max_share_ratio: np.ndarray = _UNSET
        self.tolerance: np.ndarray = _UNSET
        self.apply_limits: np.ndarray = _UNSET
        self.schedulable: np.ndarray = _UNSET
        self.step: np.ndarray = _UNSET
        self.fifo: np.ndarray = _UNSET
        self.integral_type: np.ndarray = _UNSET
        self.priority: np.ndarray = _UNSET
        # attributes, guarantees and weights (b.1, b.3, b.4, b.6), set by the steps of guarantees.py
        self.resource_limits: np.ndarray = _UNSET
        self.limits_share: np.ndarray = _UNSET
        self.usage_share: np.ndarray = _UNSET
        self.demand_share: np.ndarray = _UNSET
        self.dominant: np.ndarray = _UNSET
        self.inferred: np.ndarray = _UNSET
        self.sgs: np.ndarray = _UNSET
        self.weight: np.ndarray = _UNSET
        self.egs: np.ndarray = _UNSET
        self.fifo_rank: np.ndarray = _UNSET
        self.fifo_index: dict[int, int] = {}
        # (pool id, child id) -> historic usage average, set by historic_usage.apply_historic_weights
        self.historic_usage: dict[tuple[str, str], Any] = {}
        # integral guarantees (b.7), set by the steps of integral.py
        self.burst_ratio: np.ndarray = _UNSET
        self.flow_ratio: np.ndarray = _UNSET
        self.total_burst_ratio: np.ndarray = _UNSET
        self.total_flow_ratio: np.ndarray = _UNSET
        self.integral_pools: np.ndarray = _UNSET
        self.volume: dict[int, np.ndarray] = {}
        self.capacity: dict[int, np.ndarray] = {}
        self.last_ratio: dict[int, float] = {}
        self.ratios: IntegralRatios | None = None
        self.volumes: Volumes | None = None
        # functions (b.5), set by building.build_functions
        self._base_functions: tuple[fn.FunctionTable, np.ndarray, np.ndarray] | None = None
        self._placement: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # the period's delta of inputs as the read took it (inputs._read_inputs): the rows it read, None for all;
        # and the previous read (``_KeptInputs``) whose arrays hold every other row
        self.read_rows: np.ndarray | None = None
        self.read_from: Any = None
        _read_inputs(self)
        self.any_fifo = bool(self.fifo.any())


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
    upd = _Update(root, total_resources, settings, now, state)
    tree = upd.tree
    n = len(tree.elements)
    upd.tag_limits = best_allocation.cap_memory_limits(tree, upd.tag_limits, settings.best_allocation_memory)
    promised_pools, nested = _promised_guarantee_pools(tree)  # b.2 step 1
    _alert(upd, _nested_promised_alert(tree, nested))
    tier = tree.priority_tier or guarantees.priority_tier(
        tree
    )  # per tree: its pools are the objects they were
    tree.priority_tier = tier
    upd.priority = tier.priority
    _alert(upd, guarantees.priority_alert(tree, tier))
    _guarantees_and_weights(upd)  # steps 2-6
    # Step 7: integral guarantees.
    pis = np.zeros((n, RESOURCE_COUNT))
    if len(upd.integral_pools):
        # The base functions (strong guarantees only); integral stages rebuild just the pools they change.
        building.build_functions(upd, np.arange(n), upd.sgs, upd.limits_share)
        pis = _integral_shares(upd)
    guarantee = upd.sgs + pis
    # Step 8: functions and the top-down distribution from the root with suggestion 1.
    table = building.build_functions(upd, np.arange(n), guarantee, upd.limits_share)
    if settings.enable_improved_fair_share_by_fit_factor_computation:
        fs = distribution.distribute_improved(upd, table)
    else:
        fs = distribution.distribute(upd, table, np.array([0]), np.ones(1))
    _truncate_unsatisfied_gangs_in_fifo_pools(upd, fs)
    limited_demand, _ = table.evaluate(np.arange(n), np.ones(n))
    # Step 9: promised guarantee fair share.
    promised = _promised_fair_share(upd, table, [i for i in promised_pools if i not in nested])
    # Step 10: root fair share = sum of children.
    strong_part, integral_part, weight_part = _root_sum(upd, fs, pis)
    result = _results(upd, fs, strong_part, integral_part, weight_part, limited_demand, promised, pis)
    if settings.enable_discretized_fair_share:
        ops = np.flatnonzero(tree.is_op)
        active, last = discretized.finish(upd, fs, ops, building._step_flags(upd, ops))
        result.discretized_fair_share_active, result.state.discretized_fair_share = active, last
    return result


def _alert(upd: _Update, alert: PooltreeError | None) -> None:
    if alert is not None:
        upd.errors.append(alert)


def _guarantees_and_weights(upd: _Update) -> None:
    """Steps 2-6: integral ratios, limits, attributes, historic weights, guarantees and weights, volumes, FIFO order;
    the limits, guarantees and weights are the previous update's where those stand in for them (``reuse``: every
    input they are computed from is the same in every bit), else computed and kept for the next update."""
    tree, total, settings = upd.tree, upd.total, upd.settings
    # The integral ratios come first (they read only the pools' inputs): with the priority tier, they are among the
    # inputs of the steps the previous update's results may stand in for.
    ratios = integral.compute_integral_ratios(tree, total, upd.integral_type)
    key, sources = reuse.guarantees_key(settings, total), _static_sources(upd, ratios)
    reused = reuse.reuse_guarantees(tree, key, sources, upd.read_rows, upd.read_from)
    limits = reused.limits if reused is not None else _limits(upd)
    attrs = guarantees.compute_attributes(
        tree, total, upd.usage, upd.demand, upd.schedulable, upd.apply_limits, upd.specified_limits
    )
    historic = historic_usage.apply_historic_weights(
        tree, upd.now, upd.state.historic_usage, attrs.usage_share, upd.weight_cfg
    )
    if historic is not None:
        upd.weight_cfg, upd.historic_usage = historic.weight_cfg, historic.averages
        reused = reuse.check_weights(reused, upd.weight_cfg)
    volumes = integral.consume_and_refill(
        tree, total, settings, upd.state, upd.now, ratios, upd.integral_type
    )
    if reused is None:
        strong, adjusted = _guarantees(upd, limits, ratios)
        ratios = dataclasses.replace(ratios, burst_ratio=adjusted.burst_ratio)
        upd.errors.extend(adjusted.alerts)
        if not adjusted.alerts:
            reused = reuse.keep_guarantees(tree, key, sources, upd.weight_cfg, limits, strong)
    else:
        strong = reused.strong
    fifo = guarantees.compute_fifo_order(tree, upd.fifo, strong.weight)
    upd.statics = reused
    upd.resource_limits, upd.limits_share = limits.resource_limits, limits.limits_share
    upd.usage, upd.demand, upd.usage_share, upd.demand_share, upd.dominant = (
        attrs.usage,
        attrs.demand,
        attrs.usage_share,
        attrs.demand_share,
        attrs.dominant,
    )
    upd.inferred, upd.sgs, upd.weight, upd.egs = strong.inferred, strong.sgs, strong.weight, strong.egs
    upd.fifo_rank, upd.fifo_index = fifo.rank, fifo.index
    upd.burst_ratio, upd.flow_ratio = ratios.burst_ratio, ratios.flow_ratio
    upd.total_burst_ratio, upd.total_flow_ratio = ratios.total_burst_ratio, ratios.total_flow_ratio
    upd.integral_pools = ratios.integral_pools
    upd.ratios = ratios
    upd.volume, upd.capacity, upd.last_ratio = volumes.volume, volumes.capacity, volumes.last_ratio
    upd.volumes = volumes


def _limits(upd: _Update) -> guarantees.Limits:
    """b.1's limits rule over this update's inputs."""
    return guarantees.compute_limits(upd.total, upd.tag_limits, upd.max_share_ratio, upd.specified_limits)


def _guarantees(
    upd: _Update, limits: guarantees.Limits, ratios: integral.IntegralRatios
) -> tuple[guarantees.Guarantees, guarantees.Adjusted]:
    """b.3, b.4, b.6 in order: inferred strong guarantees, their adjustment, weights, estimated guarantees."""
    tree, total, settings = upd.tree, upd.total, upd.settings
    inferred = guarantees.infer_strong_guarantees(
        tree, total, settings.main_resource, upd.strong_config, upd.spec_mask
    )
    adjusted = guarantees.adjust_guarantees(tree, total, inferred, limits.limits_share, upd.priority, ratios)
    multiplier = settings.infer_weight_from_guarantees_share_multiplier
    weight = guarantees.compute_weights(
        tree, upd.weight_cfg, multiplier, adjusted.sgs, ratios.total_flow_ratio
    )
    egs = guarantees.compute_estimated_guarantees(tree, adjusted.sgs, ratios.total_flow_ratio, weight)
    return guarantees.Guarantees(inferred, adjusted.sgs, weight, egs), adjusted


def _static_sources(upd: _Update, ratios: integral.IntegralRatios) -> tuple[np.ndarray, ...]:
    """The element inputs of the steps the previous update's results may stand in for, in the order of
    ``reuse._STATIC_INPUTS``."""
    return (
        upd.tag_limits,
        upd.max_share_ratio,
        upd.specified_limits,
        upd.strong_config,
        upd.spec_mask,
        upd.weight_cfg,
        upd.fifo,
        upd.priority,
        upd.integral_type,
        ratios.burst_ratio,
        ratios.total_burst_ratio,
        ratios.total_flow_ratio,
    )


def _integral_shares(upd: _Update) -> np.ndarray:
    """Step 7 with b.7: the proposed integral shares (also this update's integral share ratios)."""
    assert upd.ratios is not None and upd.volumes is not None
    shares = integral.integral_shares(
        upd.tree,
        upd.total,
        upd.settings,
        upd.ratios,
        upd.volumes,
        upd.sgs,
        upd.limits_share,
        upd.demand_share,
        lambda elements, guarantee, limits: building.build_functions(upd, elements, guarantee, limits),
    )
    upd.last_ratio = shares.last_ratio
    return shares.pis


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


def _promised_fair_share(upd: _Update, table: Any, outermost: list[int]) -> np.ndarray | None:
    """b.2 step 9: each outermost promised-guarantee pool's subtree distributed from the pool with suggestion 0
    (NaN elsewhere); None without such pools."""
    if not outermost:
        return None
    tree = upd.tree
    promised = np.full((len(tree.elements), RESOURCE_COUNT), np.nan)
    for i in outermost:
        part = distribution.distribute(upd, table, np.array([i]), np.zeros(1))
        sub = tree.subtree(i)
        promised[sub] = part[sub]
    return promised


def _root_sum(upd: _Update, fs: np.ndarray, pis: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """b.2 step 10: the root's fair share is the sum of its children's (written into ``fs``); returns the detailed
    parts (strong guarantee, integral guarantee, weight proportional) of every element, the root's from that sum."""
    top = np.array(list(upd.tree.children(0)), dtype=np.int64)
    strong_part, integral_part, weight_part = _detailed(fs, upd.sgs, pis)
    if len(top):
        fs[0] = fs[top].sum(axis=0)
        used_strong = strong_part[top].sum(axis=0)
    else:
        fs[0] = 0.0
        used_strong = np.zeros(RESOURCE_COUNT)
    root_sg, root_ig, root_wp = _detailed(fs[0], used_strong, pis[0])
    strong_part[0], integral_part[0], weight_part[0] = root_sg, root_ig, root_wp
    return strong_part, integral_part, weight_part
