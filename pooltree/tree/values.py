"""Plain values and helpers of the pool tree runtime: error codes, placements, parameter updates, option readers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.resources import RESOURCE_COUNT, RESOURCES, Vector, parse_resources, unlimited
from pooltree.tree.elements import PoolElement

TOO_MANY_OPERATIONS_CODE = 202
"""YTsaurus ``TooManyOperations``; the HTTP client retries ``start_operation`` on it."""

NO_SUCH_OPERATION_CODE = 1915
DEFAULT_EPHEMERAL_POOL_NAME_REGEX = r"[-_a-z0-9:A-Z]+"
OPERATION_PENDING_ALERT = "operation_pending"


class TooManyOperationsError(PooltreeError):
    """A pool on the operation's path has reached its ``max_operation_count``."""

    code = TOO_MANY_OPERATIONS_CODE


@dataclass(frozen=True, slots=True)
class ParametersUpdate:
    """A validated runtime parameters change of one operation in one tree (``placement`` None = same pool)."""

    operation_id: str
    placement: PoolPlacement | None
    weight: float | None
    resource_limits: Vector


@dataclass(frozen=True, slots=True)
class PoolPlacement:
    """Where an operation goes in one tree, decided (and validated) before anything changes.

    ``pool`` is the existing target pool, or ``None`` when an ephemeral pool ``pool_name`` is to be created
    under ``parent``.
    """

    pool_name: str
    pool: PoolElement | None
    parent: PoolElement | None
    in_default_parent: bool


def _option(config: Any, name: str, default: Any) -> Any:
    """A tree option, or ``default`` when the tree config does not carry it (older configs)."""
    value = getattr(config, name, default)
    return default if value is None else value


def _limits_vector(value: Any) -> Vector:
    """Resource limits (``inf`` where unset) from a vector, a ``Resources`` map or a plain map."""
    if value is None:
        return unlimited()
    if isinstance(value, np.ndarray):
        return np.array(value, dtype=float)
    vector = getattr(value, "vector", None)
    if vector is not None:
        return np.array(vector, dtype=float)
    return parse_resources(value, "resource_limits", missing=math.inf)


def _threshold_vector(threshold: Any) -> Vector:
    """§c: a threshold with any resource set is absolute with unset resources infinite; else all zero."""
    specified = getattr(threshold, "specified", None)
    if not specified:
        return np.zeros(RESOURCE_COUNT)
    vector = np.full(RESOURCE_COUNT, math.inf)
    for name in specified:
        vector[RESOURCES.index(name)] = threshold[name]
    return vector


def spec_option(spec: Any, name: str, default: Any) -> Any:
    """An operation spec option from an ``OperationSpec`` or a plain map (``None`` → ``default``)."""
    if spec is None:
        return default
    value = spec.get(name, default) if isinstance(spec, Mapping) else getattr(spec, name, default)
    return default if value is None else value


@dataclass(slots=True)
class EffectiveParameters:
    """Starvation and preemption parameters after top-down inheritance (orchid ``effective_*``)."""

    fair_share_starvation_tolerance: float
    fair_share_starvation_timeout: float
    aggressive_starvation_enabled: bool
    fair_share_aggressive_starvation_timeout: float
    non_preemptible_resource_usage_threshold: Vector
    aggressive_preemption_allowed: bool
    normal_preemption_allowed: bool


def _check_weight(weight: Any, path: str) -> float | None:
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise PooltreeError(f"{path}: expected a positive number, got {weight!r}", attributes={"field": path})
    if not math.isfinite(weight) or weight <= 0:
        raise PooltreeError(
            f"{path}: weight must be a positive finite number, got {weight!r}", attributes={"field": path}
        )
    return float(weight)
