"""The tree's ``min_node_resource_limits`` (with ``min_node_resource_limits_check_period``): an alert naming the
tree's nodes that are smaller than the tree expects.

YTsaurus (``CheckMinNodeResourceLimits``, every ``min_node_resource_limits_check_period``): a node of the tree with
jobs enabled (``user_slots`` above zero) whose resource limits do not dominate ``min_node_resource_limits`` (every
resource at least the given amount; unset resources are zero) is a violating node; when there are some, the tree
alert ``nodes_with_insufficient_resource_limits`` says "Found violating nodes in tree ..." with up to 10 addresses
(``violating_nodes``, and ``violating_nodes_truncated`` when there were more). Scheduling is not changed by it.
pooltree computes the alert whenever the tree's alerts are read (the live orchid and ``//sys/scheduler/@alerts``),
so it is never older than the check period.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.errors import join_path
from pooltree.resources import RESOURCES, parse_resources

NODES_WITH_INSUFFICIENT_RESOURCE_LIMITS = "nodes_with_insufficient_resource_limits"
MAX_VIOLATING_NODES_IN_ERROR = 10
_USER_SLOTS = 0


def min_node_resource_limits(tree_config: Any, path: str = "config") -> np.ndarray | None:
    """The tree config's ``min_node_resource_limits`` (kept raw in the model's extras; unset resources 0)."""
    raw = (
        tree_config.get("min_node_resource_limits")
        if isinstance(tree_config, Mapping)
        else (getattr(tree_config, "model_extra", None) or {}).get("min_node_resource_limits")
    )
    if raw is None:
        return None
    return parse_resources(raw, join_path(path, "min_node_resource_limits"), missing=0.0)


def violating_nodes(nodes: Mapping[str, tuple[Any, np.ndarray]], minimum: np.ndarray) -> list[str]:
    """Addresses (sorted) of the nodes with jobs enabled whose limits are below ``minimum`` in some resource."""
    found = []
    for address, (_tags, limits) in nodes.items():
        limits = np.asarray(limits, dtype=float)
        if limits[_USER_SLOTS] <= 0:
            continue  # jobs disabled on the node
        if not bool(np.all(limits + 1e-9 >= minimum)):
            found.append(address)
    return sorted(found)


def insufficient_node_limits(
    tree: str, tree_config: Any, nodes: Mapping[str, tuple[Any, np.ndarray]]
) -> tuple[str, dict[str, Any]] | None:
    """The message and attributes of YTsaurus's tree alert for the tree's violating nodes, or None (also without
    the option); ``pooltree.server.live.alerts`` makes the alert."""
    minimum = min_node_resource_limits(tree_config, f"pool_trees.{tree}.config")
    if minimum is None:
        return None
    found = violating_nodes(nodes, minimum)
    if not found:
        return None
    attributes: dict[str, Any] = {"pool_tree": tree}
    if len(found) > MAX_VIOLATING_NODES_IN_ERROR:
        found = found[:MAX_VIOLATING_NODES_IN_ERROR]
        attributes["violating_nodes_truncated"] = True
    attributes["violating_nodes"] = found
    attributes["min_node_resource_limits"] = {
        name: float(value) for name, value in zip(RESOURCES, minimum.tolist(), strict=True) if value > 0
    }
    return f"Found violating nodes in tree {tree!r}", attributes
