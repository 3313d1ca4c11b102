"""Children's weights inferred from their historic usage (pool ``infer_children_weights_from_historic_usage``).

YTsaurus (``TPoolTreeCompositeElement::InitializeUpdate``, ``TPoolTreeElement::GetWeight``): a pool with
``infer_children_weights_from_historic_usage`` keeps, for each child, an adjusted exponential moving average of the
child's dominant usage share (its largest ``usage / total`` component, a resource the tree has none of counting 0),
one sample per fair-share update, with ``historic_usage_aggregation_period`` as the half-life (default 10 s,
YTsaurus's ``TAdjustedExponentialMovingAverage::DefaultHalflife``). The child's weight is then its specified weight
(or 1) × 2^−average, whatever ``infer_weight_from_guarantees_share_multiplier`` says: a child that used the whole
cluster lately weighs half, one that used nothing keeps its weight, so a newcomer gets more than an even split.

The average (YTsaurus's "adjusted" EMA): after samples v₁..vₙ at times t₁..tₙ, with mᵢ = 2^−(tₙ − tᵢ)/h, it is
Σ mᵢ vᵢ / Σ mᵢ; the first sample (or any sample with a zero half-life) is the average itself; a sample older than
the previous one is ignored; a new half-life starts the average again. A child that leaves the pool (or moves to
another) loses its average, as YTsaurus resets an element's persistent attributes when it is enabled again.

The update is pure: the averages are carried from one update to the next in ``UpdateState.historic_usage`` (keyed
by (pool id, child id)), like the integral guarantees' volumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.fairshare import functions as fn
from pooltree.fairshare.layout import _Tree

DEFAULT_HALFLIFE = 10.0
"""Seconds: YTsaurus's ``TAdjustedExponentialMovingAverage::DefaultHalflife``, the half-life when the pool sets
``infer_children_weights_from_historic_usage`` without ``historic_usage_aggregation_period``."""


def historic_usage_halflife(config: Any) -> float | None:
    """The half-life (seconds) of a pool's children's historic usage, or None when the pool does not infer its
    children's weights from it (YTsaurus's ``TPoolConfig`` postprocessor: the period counts only with
    ``infer_children_weights_from_historic_usage``, and defaults to 10 s)."""
    if config is None or not getattr(config, "infer_children_weights_from_historic_usage", False):
        return None
    period = getattr(config, "historic_usage_aggregation_period", None)
    return DEFAULT_HALFLIFE if period is None else float(period)


@dataclass(frozen=True, slots=True)
class HistoricUsage:
    """One child's adjusted exponential moving average of its dominant usage share (YTsaurus's
    ``TAdjustedExponentialMovingAverage``): ``numerator / denominator``, last sampled at ``last_update_time``."""

    halflife: float
    last_update_time: float | None = None
    denominator: float = 1.0
    numerator: float = 0.0

    @property
    def average(self) -> float:
        return self.numerator / self.denominator

    def sampled(self, now: float, value: float, halflife: float) -> HistoricUsage:
        """The average after a sample ``value`` at ``now`` with this half-life (a new half-life starts again)."""
        state = self if halflife == self.halflife else HistoricUsage(halflife)
        last = state.last_update_time
        if last is not None and now < last:
            return state
        if last is None or halflife == 0.0:
            return HistoricUsage(halflife, now, 1.0, value)
        decay = 2.0 ** (-(now - last) / halflife)
        return HistoricUsage(halflife, now, 1.0 + state.denominator * decay, value + state.numerator * decay)


def _historic_pools(tree: _Tree) -> list[tuple[int, float]]:
    """(row, half-life) of every pool of the tree that infers its children's weights (memoised per tree)."""

    def build() -> list[tuple[int, float]]:
        rows = tree.memo("pool_idx", lambda: np.flatnonzero(~tree.is_op)).tolist()
        return [
            (row, float(pool.historic_usage_halflife))
            for row, pool in zip(rows, tree.pools, strict=True)
            if pool.historic_usage_halflife is not None and tree.child_count[row] > 0
        ]

    return tree.memo("historic_pools", build)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class HistoricWeights:
    """The configured weights by element with the historic pools' children's made from their averages, and the
    averages by (pool id, child id) for the next update."""

    weight_cfg: np.ndarray
    averages: dict[tuple[str, str], HistoricUsage]


def apply_historic_weights(
    tree: _Tree,
    now: float,
    previous: Mapping[tuple[str, str], HistoricUsage],
    usage_share: np.ndarray,
    weight_cfg: np.ndarray,
) -> HistoricWeights | None:
    """YTsaurus ``infer_children_weights_from_historic_usage``: each historic pool's child's weight (or 1) ×
    2^−(EMA of its dominant usage share); None when the tree has no such pool."""
    pools = _historic_pools(tree)
    if not pools:
        return None
    averages: dict[tuple[str, str], HistoricUsage] = {}
    dominant = fn.row_max(usage_share)
    weight_cfg = weight_cfg.copy()
    for row, halflife in pools:
        pool_id = tree.ids[row]
        for child in tree.children(row):
            key = (pool_id, tree.ids[child])
            usage = previous.get(key) or HistoricUsage(halflife)
            usage = usage.sampled(now, float(dominant[child]), halflife)
            averages[key] = usage
            specified = weight_cfg[child]
            weight_cfg[child] = (1.0 if np.isnan(specified) else specified) * 2.0 ** (-usage.average)
    weight_cfg.flags.writeable = False
    return HistoricWeights(weight_cfg, averages)
