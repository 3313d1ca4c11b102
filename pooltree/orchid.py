"""The read-only scheduler view (orchid layout of PRODUCT.md §3), built from the tree runtime and a fair-share result."""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.fairshare.model import FairShareResult
from pooltree.resources import Vector, resources_to_dict, share_to_dict
from pooltree.tree.pool_tree import PoolTree

ROOT = "<Root>"


def _ratio(x: Vector) -> float:
    return float(np.max(x)) if len(x) else 0.0


def _element_view(result: Any) -> dict[str, Any]:
    detailed = result.detailed_fair_share
    return {
        "fair_share_ratio": _ratio(result.fair_share),
        "usage_ratio": _ratio(result.usage_share),
        "demand_ratio": _ratio(result.demand_share),
        "detailed_fair_share": {
            "strong_guarantee": share_to_dict(detailed.strong_guarantee),
            "integral_guarantee": share_to_dict(detailed.integral_guarantee),
            "weight_proportional": share_to_dict(detailed.weight_proportional),
            "total": share_to_dict(detailed.total),
        },
        "usage_share": share_to_dict(result.usage_share),
        "demand_share": share_to_dict(result.demand_share),
        "limits_share": share_to_dict(result.limits_share),
        "strong_guarantee_share": share_to_dict(result.strong_guarantee_share),
        "effective_strong_guarantee_resources": resources_to_dict(result.inferred_strong_guarantee_resources),
        "estimated_guarantee_share": share_to_dict(result.estimated_guarantee_share),
        "dominant_resource": result.dominant_resource,
        "weight": float(result.weight),
        "resource_usage": resources_to_dict(result.resource_usage),
        "resource_demand": resources_to_dict(result.resource_demand),
        "resource_limits": resources_to_dict(result.resource_limits, drop_infinite=True),
        "scheduling_status": result.scheduling_status,
        "starvation_status": "non_starving",
        "satisfaction_ratio": float(result.satisfaction_ratio),
        "parent": result.parent,
    }


def tree_view(tree: PoolTree, result: FairShareResult, total_resources: Vector) -> dict[str, Any]:
    """One tree in the orchid layout: pools (including ``<Root>``) and operations with shares and counters."""
    pools: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for element_id, element in result.elements.items():
        view = _element_view(element)
        if element.is_operation:
            operations[element_id] = {**tree.operation_orchid(element_id), **view}
        else:
            pools[element_id] = {**tree.pool_orchid(element_id), **view}
    root = result.elements[ROOT]
    return {
        "resource_limits": resources_to_dict(total_resources),
        "resource_usage": resources_to_dict(root.resource_usage),
        "pool_count": len(pools) - 1,
        "pools": pools,
        "operations": operations,
    }
