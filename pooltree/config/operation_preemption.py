"""An operation's own preemption settings and how they combine with its pool's (YTsaurus's operation element).

The operation spec may set ``fair_share_starvation_tolerance``, ``fair_share_starvation_timeout`` and
``non_preemptible_resource_usage_threshold`` (YTsaurus ``TStrategyOperationSpec``). As in YTsaurus's
``TPoolTreeOperationElement::UpdateRecursiveAttributes``, an operation may only make them *more conservative*
than what it inherits from its pool (the pool's effective value, itself inherited from the tree):

- tolerance: the smaller of the pool's and the spec's (a lower tolerance starves later);
- timeout: the larger of the pool's and the spec's (a longer timeout starves later);
- non-preemptible threshold, per resource: the spec's amount where the pool sets none for that resource or where
  the spec's is lower (fewer allocations are kept out of preemption).

Plain functions over plain values: the fair-share input (the operation's tolerance), the strategy's settings
(tolerance, timeout, threshold) and the orchid read them, in the core, the simulator and the live service alike.
Thresholds are absolute vectors with ``inf`` for a resource not set; ``None`` means no threshold at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.resources import RESOURCES, USER_SLOTS, Vector, parse_duration, parse_resources

STARVATION_TOLERANCE = "fair_share_starvation_tolerance"
STARVATION_TIMEOUT = "fair_share_starvation_timeout"
NON_PREEMPTIBLE_THRESHOLD = "non_preemptible_resource_usage_threshold"


def _spec_value(spec: Any, name: str) -> Any:
    if spec is None:
        return None
    return spec.get(name) if isinstance(spec, Mapping) else getattr(spec, name, None)


def specified_starvation_tolerance(spec: Any) -> float | None:
    """The spec's ``fair_share_starvation_tolerance`` (an ``OperationSpec`` or a plain map), or None."""
    value = _spec_value(spec, STARVATION_TOLERANCE)
    return None if value is None else float(value)


def specified_starvation_timeout(spec: Any) -> float | None:
    """The spec's ``fair_share_starvation_timeout`` in seconds (a plain map holds YTsaurus milliseconds)."""
    value = _spec_value(spec, STARVATION_TIMEOUT)
    if value is None:
        return None
    return parse_duration(value, f"spec.{STARVATION_TIMEOUT}") if isinstance(spec, Mapping) else float(value)


def specified_non_preemptible_threshold(spec: Any) -> Vector | None:
    """The spec's ``non_preemptible_resource_usage_threshold`` (``inf`` where a resource is not set), with the
    ``max_unpreemptible_allocation_count`` cap on ``user_slots``; None when the spec sets neither."""
    value = _spec_value(spec, NON_PREEMPTIBLE_THRESHOLD)
    threshold: Vector | None = None
    if isinstance(value, Mapping):
        threshold = parse_resources(value, f"spec.{NON_PREEMPTIBLE_THRESHOLD}", missing=math.inf)
    elif value is not None:
        threshold = np.full(len(RESOURCES), math.inf)
        for name in value.specified:
            threshold[RESOURCES.index(name)] = float(value[name])
    cap = _spec_value(spec, "max_unpreemptible_allocation_count")
    if cap is None:
        cap = _spec_value(spec, "max_unpreemptible_job_count") if isinstance(spec, Mapping) else None
    if cap is not None:
        if threshold is None:
            threshold = np.full(len(RESOURCES), math.inf)
        threshold[USER_SLOTS] = min(threshold[USER_SLOTS], float(cap))
    return threshold


def operation_starvation_tolerance(inherited: float, specified: float | None) -> float:
    """The operation's effective tolerance: the spec may only lower its pool's."""
    return inherited if specified is None else min(inherited, specified)


def operation_starvation_timeout(inherited: float, specified: float | None) -> float:
    """The operation's effective starvation timeout (seconds): the spec may only raise its pool's."""
    return inherited if specified is None else max(inherited, specified)


def operation_non_preemptible_threshold(inherited: Vector | None, specified: Vector | None) -> Vector | None:
    """The operation's effective threshold: per resource, the spec's amount where the pool sets none or the spec's
    is lower; None when neither sets any resource."""
    if specified is None:
        return inherited
    base = np.full(len(RESOURCES), math.inf) if inherited is None else np.asarray(inherited, dtype=float)
    own = np.asarray(specified, dtype=float)
    merged = np.where(np.isinf(base) | (own < base), own, base)
    return None if bool(np.all(np.isinf(merged))) else merged
