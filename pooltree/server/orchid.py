"""The scheduler's orchid (``//sys/scheduler/orchid/...``): ``LiveOrchid`` answers it from the read snapshot the
live scheduler publishes with its trees (``live/snapshot.py``), as YTsaurus serves its scheduler orchid from the
fair-share tree snapshot published after each update: a read never takes the scheduling lock, and sees the state
of the last publication (the last fair-share update run to its end, or a pool trees change since)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pooltree.resources import RESOURCES
from pooltree.server.live import LiveScheduler
from pooltree.server.live.snapshot import ReadSnapshot


def resource_map(values: Any) -> dict[str, float]:
    """A resource vector as YTsaurus labels it (``{user_slots, cpu, gpu, memory, network}``)."""
    return {name: float(amount) for name, amount in zip(RESOURCES, values, strict=True)}


PER_TREE_MAPS = ("pool_trees", "scheduling_info_per_pool_tree")
FAIR_SHARE_INFO = "fair_share_info"


class LiveOrchid:
    """``//sys/scheduler/orchid/...`` from the last published read snapshot (the ``pooltree fair-share`` layout).

    The document is assembled once per snapshot, and each path's answer (JSON text) once per snapshot and default
    tree, on first read; every read decodes its own copy. The default tree is Cypress's at the read (Cypress owns
    that attribute; it reads it, as the orchid path, without its lock)."""

    def __init__(self, scheduler: LiveScheduler, cypress_default: Callable[[], str | None]) -> None:
        self.scheduler = scheduler
        self.cypress_default = cypress_default

    def get(self, path_tokens: Sequence[str]) -> Any:
        default_tree = self.cypress_default()
        tokens = list(path_tokens)
        if len(tokens) > 3 and tokens[1] in PER_TREE_MAPS and tokens[3] == FAIR_SHARE_INFO:
            # YTsaurus's <tree>/fair_share_info/{pools,operations,pool_count} are the tree's own keys here
            tokens = [*tokens[:3], *tokens[4:]]
        snapshot = self.scheduler.snapshots.current

        def answer() -> str:
            root = snapshot.derived(("orchid", default_tree), lambda: orchid_document(snapshot, default_tree))
            if tokens[:2] == ["scheduler", "event_log"]:
                # read only when asked for: it holds up to EVENT_LOG_SIZE events
                root = {"scheduler": {**root["scheduler"], "event_log": list(snapshot.event_log)}}
            return json.dumps(_navigate(root, tokens), default=float)

        return json.loads(snapshot.derived(("orchid", default_tree, tuple(tokens)), answer))


def orchid_document(snapshot: ReadSnapshot, default_tree: str | None) -> dict[str, Any]:
    """The orchid document of ``snapshot`` (without ``event_log``, added for the reads of it)."""
    pool_trees = {}
    for name, tree in snapshot.trees.items():
        view = tree.view
        entry = {
            "pools": view["pools"],
            "operations": view["operations"],
            "resource_limits": view["resource_limits"],
            "resource_usage": view["resource_usage"],
            "pool_count": view["pool_count"],
            **({"scheduling_segments": view["scheduling_segments"]} if "scheduling_segments" in view else {}),
            **({"gpu_assignment_plan": view["gpu_assignment_plan"]} if "gpu_assignment_plan" in view else {}),
            **tree.orchid,
            "alerts": tree.alerts,
        }
        # YTsaurus's per-tree node set (scheduling_info_per_pool_tree/<tree>/node_count, node_addresses)
        addresses = sorted(node.address for node in snapshot.nodes if name in node.trees)
        entry["node_addresses"] = addresses
        entry["node_count"] = len(addresses)
        pool_trees[name] = entry
    cluster_limits = np.zeros(len(RESOURCES))
    for node in snapshot.nodes:
        cluster_limits += np.asarray(node.resource_limits, dtype=float)
    root: dict[str, Any] = {
        "scheduler": {
            "pool_trees": pool_trees,
            "default_pool_tree": default_tree,
            "cluster": {"resource_limits": resource_map(cluster_limits), "node_count": len(snapshot.nodes)},
            "nodes": {
                node.address: {
                    "resource_limits": resource_map(node.resource_limits),
                    "trees": list(node.trees),
                    "tree": node.trees[0] if len(node.trees) == 1 else None,  # YTsaurus's single tree
                    "tags": sorted(node.tags),
                    "last_seen": node.last_seen,
                    "alerts": list(node.alerts),
                }
                for node in snapshot.nodes
            },
        }
    }
    # YTsaurus's older name of the per-tree map, still what its tests read
    root["scheduler"]["scheduling_info_per_pool_tree"] = pool_trees
    if default_tree is None:  # YTsaurus's orchid has no default tree key then
        del root["scheduler"]["default_pool_tree"]
    else:
        root["scheduler"]["default_fair_share_tree"] = default_tree  # YTsaurus's older name
    root["scheduler"]["alerts"] = snapshot.scheduler_alerts
    return root


def _navigate(root: Any, path_tokens: Sequence[str]) -> Any:
    value = root
    for token in path_tokens:
        if not isinstance(value, dict) or token not in value:
            raise LookupError(f"no key {token!r}")
        value = value[token]
    return value
