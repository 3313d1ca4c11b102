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
from pooltree.fairshare.integral import _integral_shares, adjust_proposed_integral_share
from pooltree.fairshare.layout import EPSILON, _flatten, floating_point_inverse_lower_bound
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
    """The state of one update run: its inputs and every array the steps of b.2 compute, by element row.

    The steps are plain functions of it, one module per concern (``inputs``, ``guarantees``, ``integral``,
    ``building``, ``distribution``, ``results``); ``update_fair_share`` calls them in order. Every attribute is
    declared here; an array a step has not set yet is the empty ``_UNSET``.
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
        # what the previous update of this tree left to reuse (reuse.reuse_guarantees / keep_guarantees)
        self.reused: _StaticGuarantees | None = None
        self.statics: _StaticGuarantees | None = None  # reused or kept by this update
        self._key: tuple[Any, ...] = ()
        self._sources: tuple[np.ndarray, ...] = ()
        """The element inputs of those steps (``reuse._STATIC_INPUTS``)."""
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
        self.burst_pools: list[int] = []
        self.relaxed_pools: list[int] = []
        self.volume: dict[int, np.ndarray] = {}
        self.capacity: dict[int, np.ndarray] = {}
        self.last_ratio: dict[int, float] = {}
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
    best_allocation.cap_memory_limits(upd)
    tree = upd.tree
    n = len(tree.elements)
    promised_pools, nested = _promised_guarantee_pools(upd)  # b.2 step 1
    guarantees.validate_priority_pools(upd)
    # Steps 2-6. The integral ratios come first (they read only the pools' inputs): with the priority tier,
    # they are among the inputs of the steps the previous update's results may stand in for.
    integral.compute_integral_ratios(upd)
    reuse.reuse_guarantees(upd)
    _limits(upd)
    guarantees.compute_attributes(upd)
    if historic_usage.apply_historic_weights(upd):
        reuse.check_weights(upd)
    _guarantees_and_weights(upd)
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


def _promised_guarantee_pools(upd: _Update) -> tuple[list[int], list[int]]:
    """b.2 step 1: the pools computing a promised guarantee fair share, and those of them nested inside another
    such pool (an alert names them; only the outermost are computed)."""
    tree = upd.tree
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
    if nested:
        upd.errors.append(
            PooltreeError(
                "Found pools with enabled promised guarantee fair share computation which are nested inside other such pools",
                code=NESTED_PROMISED_GUARANTEE_POOLS,
                attributes={"nested_promised_guarantee_fair_share_pools": [tree.ids[i] for i in nested]},
            )
        )
    return promised_pools, nested


def _limits(upd: _Update) -> None:
    """b.1's resource limits and their shares, or the previous update's where they stand in (``reuse``)."""
    reused = upd.reused
    if reused is None:
        guarantees.compute_limits(upd)
    else:
        upd.resource_limits, upd.limits_share = reused.resource_limits, reused.limits_share


def _guarantees_and_weights(upd: _Update) -> None:
    """b.3-b.6 with b.7's volume accounting: inferred strong guarantees, their adjustment, weights, estimated
    guarantees, or, where the previous update's results stand in for them (``reuse``: their inputs are the same),
    those; the FIFO order is computed either way."""
    reused = upd.reused
    if reused is None:
        guarantees.infer_strong_guarantees(upd)
    else:
        upd.inferred = reused.inferred
    integral.consume_and_refill(upd)
    if reused is None:
        alerts = len(upd.errors)
        guarantees.adjust_guarantees(upd)
        guarantees.compute_weights(upd)
        guarantees.compute_estimated_guarantees(upd)
        if len(upd.errors) == alerts:
            reuse.keep_guarantees(upd)
    else:
        upd.sgs, upd.weight, upd.egs = reused.sgs, reused.weight, reused.egs
        guarantees.compute_fifo_order(upd)


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
