"""Checks that fail an operation in a tree, as YTsaurus's strategy does (pure rules; `SchedulerCore` applies them
through ``enforce_time_limits``, whose failures both shells already carry out).

* **Job resource limits restrictions** (tree ``min_job_resource_limits`` / ``max_job_resource_limits``): when the
  operation materializes, every task's per-job needs must lie within the bounds; otherwise the operation fails with
  "Operation has jobs with resource demand that violates restrictions for resources [...] in tree ..." (YTsaurus's
  ``CheckOperationJobResourceLimitsRestrictions``, error ``JobResourceLimitsRestrictionsViolated``).
* **Limiting ancestor** (tree and spec ``enable_limiting_ancestor_check``, both true by default): an operation
  whose ancestor pool's *specified* ``resource_limits`` are below the operation's minimum per-allocation needs in
  some resource can never run; once that has lasted longer than the safe timeout (YTsaurus's strategy option
  ``operation_hangup_due_to_limiting_ancestor_safe_timeout``, 5 min) since both the operation's activation and the
  first time the ancestor was found, the operation fails with "Operation has ancestor ... whose specified limits
  for resources [...] are too small to satisfy operation's minimum allocation resource demand" (part of YTsaurus's
  hung-operation check).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from pooltree.errors import ConfigError, join_path
from pooltree.resources import RESOURCES, Vector, parse_resources, resources_to_dict

LIMITING_ANCESTOR_SAFE_TIMEOUT = 300.0
"""YTsaurus's ``operation_hangup_due_to_limiting_ancestor_safe_timeout`` default (5 min)."""


def _extra(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return (getattr(config, "model_extra", None) or {}).get(name)


def job_resource_bounds(tree_config: Any, path: str = "config") -> tuple[Vector | None, Vector | None]:
    """The tree's (``min_job_resource_limits``, ``max_job_resource_limits``), NaN where a resource is unbounded."""
    bounds: list[Vector | None] = []
    for name in ("min_job_resource_limits", "max_job_resource_limits"):
        raw = _extra(tree_config, name)
        if raw is None:
            bounds.append(None)
            continue
        if not isinstance(raw, Mapping):
            raise ConfigError(join_path(path, name), "expected a map of resources")
        bounds.append(parse_resources(raw, join_path(path, name), missing=math.nan))
    return bounds[0], bounds[1]


def job_resource_limits_violation(
    tree_name: str,
    operation_id: str,
    task_resources: Mapping[str, Vector],
    bounds: tuple[Vector | None, Vector | None],
) -> dict[str, Any] | None:
    """YTsaurus's error for the first task whose per-job needs lie outside the tree's bounds, else None."""
    lower, upper = bounds
    if lower is None and upper is None:
        return None
    for task, needs in sorted(task_resources.items()):
        violated = []
        for index, name in enumerate(RESOURCES):
            amount = float(needs[index])
            if (lower is not None and not math.isnan(lower[index]) and amount < lower[index]) or (
                upper is not None and not math.isnan(upper[index]) and amount > upper[index]
            ):
                violated.append(name)
        if violated:
            return {
                "code": 1,
                "message": f"Operation has jobs with resource demand that violates restrictions for resources "
                f"[{', '.join(violated)}] in tree {tree_name!r}",
                "attributes": {
                    "error_name": "JobResourceLimitsRestrictionsViolated",
                    "operation_id": operation_id,
                    "task": task,
                    "job_resource_demand": resources_to_dict(needs),
                    "lower_bounds": _bounds_dict(lower),
                    "upper_bounds": _bounds_dict(upper),
                },
            }
    return None


def _bounds_dict(bound: Vector | None) -> dict[str, float]:
    if bound is None:
        return {}
    return {name: float(bound[i]) for i, name in enumerate(RESOURCES) if not math.isnan(bound[i])}


def limiting_ancestor(
    pools: Iterable[tuple[str, Vector]], min_needed: Vector
) -> tuple[str, list[str]] | None:
    """The first pool (lowest first) whose specified limits are below ``min_needed`` in some resource."""
    for name, limits in pools:
        violated = [r for i, r in enumerate(RESOURCES) if min_needed[i] > limits[i]]
        if violated:
            return name, violated
    return None


def limiting_ancestor_error(pool: str, violated: list[str], limits: Vector, needed: Vector) -> dict[str, Any]:
    return {
        "code": 1,
        "message": f"Operation has ancestor {pool!r} whose specified limits for resources [{', '.join(violated)}] "
        "are too small to satisfy operation's minimum allocation resource demand",
        "attributes": {
            "safe_timeout": LIMITING_ANCESTOR_SAFE_TIMEOUT,
            "resource_limits": {
                r: float(limits[i]) for i, r in enumerate(RESOURCES) if math.isfinite(limits[i])
            },
            "min_needed_resources": resources_to_dict(needed),
        },
    }


class LimitingAncestorWatch:
    """When each operation was activated and first found with a limiting ancestor (YTsaurus keeps the same two
    times per operation); ``due`` answers whether the safe timeout has passed for both."""

    def __init__(self, safe_timeout: float = LIMITING_ANCESTOR_SAFE_TIMEOUT) -> None:
        self.safe_timeout = safe_timeout
        self.activated: dict[str, float] = {}
        self.first_found: dict[str, float] = {}

    def forget(self, operation_id: str) -> None:
        self.activated.pop(operation_id, None)
        self.first_found.pop(operation_id, None)

    def observe(self, operation_id: str, found: bool, now: float) -> bool:
        """Record this check; True when the operation has had a limiting ancestor for longer than the timeout."""
        activated = self.activated.setdefault(operation_id, now)
        if not found:
            self.first_found.pop(operation_id, None)
            return False
        first = self.first_found.setdefault(operation_id, now)
        return activated + self.safe_timeout < now and first + self.safe_timeout < now


def specified_limits(pool: Any) -> Vector | None:
    """A pool's specified ``resource_limits`` (``inf`` where unset), or None when it specifies none."""
    config = pool.config if pool.config is not None else getattr(pool, "ephemeral_config", None)
    vector_of = getattr(config, "limits_vector", None)
    if vector_of is None:
        return None
    limits = vector_of()
    return limits if any(math.isfinite(x) for x in limits) else None


def limiting_ancestor_check_enabled(tree_config: Any, spec: Any) -> bool:
    """Tree ``enable_limiting_ancestor_check`` and the spec's, both true unless set false."""
    tree = _extra(tree_config, "enable_limiting_ancestor_check")
    if tree is False:
        return False
    own = (
        spec.get("enable_limiting_ancestor_check")
        if isinstance(spec, Mapping)
        else _extra(spec, "enable_limiting_ancestor_check")
    )
    return own is not False
