"""The scheduler's orchid (``//sys/scheduler/orchid/...``): ``LiveOrchid`` builds it from the live scheduler's last
fair-share views under the scheduling lock and keeps each path's last answer for reads that find the lock busy
(``live/reads.RecentReads``), as YTsaurus serves its orchid from a cache refreshed every
``static_orchid_cache_update_period``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pooltree.resources import RESOURCES
from pooltree.server.live import LiveScheduler
from pooltree.server.live.reads import RecentReads
from pooltree.server.tree_options import effective_tree_config

ORCHID_CACHE_PERIOD = 1.0
"""YTsaurus's ``static_orchid_cache_update_period`` (1 s): how old a published orchid may be when served."""
MAX_PUBLISHED_READS = 256
"""Orchid paths whose last answer is kept for reads that find the scheduling lock busy."""


def resource_map(values: Any) -> dict[str, float]:
    """A resource vector as YTsaurus labels it (``{user_slots, cpu, gpu, memory, network}``)."""
    return {name: float(amount) for name, amount in zip(RESOURCES, values, strict=True)}


def tree_orchid(tree: Any) -> dict[str, Any]:
    """The tree's effective ``config`` and ``user_to_ephemeral_pools`` (YTsaurus orchid names)."""
    if tree is None:
        return {}
    return {
        "config": effective_tree_config(tree.config),
        "user_to_ephemeral_pools": tree.user_to_ephemeral_pools(),
    }


PER_TREE_MAPS = ("pool_trees", "scheduling_info_per_pool_tree")
FAIR_SHARE_INFO = "fair_share_info"


class LiveOrchid:
    """``//sys/scheduler/orchid/...`` from the last fair-share views (the ``pooltree fair-share`` layout).

    As YTsaurus serves its scheduler orchid from a cache refreshed every ``static_orchid_cache_update_period``
    (1 s), a read that finds the scheduling lock busy (heartbeats, a fair-share update) is answered with the
    last answer built for the same path if that is at most ``ORCHID_CACHE_PERIOD`` old and no fair-share update
    was published since and no answer for any path was built after it, instead of waiting for the lock; otherwise
    it waits. So no answer goes back in time: a change between two updates (a tree config), once read at any
    path, is never read as before it again."""

    def __init__(
        self,
        scheduler: LiveScheduler,
        cypress_default: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scheduler = scheduler
        self.cypress_default = cypress_default
        self.clock = clock
        self.published = RecentReads(
            scheduler.lock,
            lambda: self.clock(),
            period=ORCHID_CACHE_PERIOD,
            size=MAX_PUBLISHED_READS,
            latest_only=True,
        )
        """(fair-share updates published, default tree, the read's path) → the last answer, as JSON text."""

    def get(self, path_tokens: Sequence[str]) -> Any:
        # Cypress calls this under its own lock: read the default tree first, so the lock order is always
        # Cypress, then scheduler (a pool trees change takes them in that order too).
        default_tree = self.cypress_default()
        tokens = list(path_tokens)
        if len(tokens) > 3 and tokens[1] in PER_TREE_MAPS and tokens[3] == FAIR_SHARE_INFO:
            # YTsaurus's <tree>/fair_share_info/{pools,operations,pool_count} are the tree's own keys here
            path_tokens = tokens = [*tokens[:3], *tokens[4:]]

        def wanted(*prefix: str) -> bool:
            """Whether the path reaches ``prefix`` (alerts are computed only for reads that include them)."""
            return all(len(tokens) <= i or tokens[i] in (p, "*") for i, p in enumerate(prefix))

        def answer() -> str:
            return json.dumps(
                _navigate(self._build(path_tokens, default_tree, wanted), path_tokens), default=float
            )

        key = (self.scheduler.updates.published_updates, default_tree, tuple(tokens))
        return json.loads(self.published.read(key, answer))

    @property
    def served_published(self) -> int:
        """Reads answered from a kept answer while the lock was busy (tests and metrics read it)."""
        return self.published.served

    def _build(
        self,
        path_tokens: Sequence[str],
        default_tree: str | None,
        wanted: Callable[..., bool],
    ) -> dict[str, Any]:
        """The orchid document (scheduling lock held)."""
        trees = self.scheduler.registry.trees
        pool_trees = {
            name: {
                "pools": view["pools"],
                "operations": view["operations"],
                "resource_limits": view["resource_limits"],
                "resource_usage": view["resource_usage"],
                "pool_count": view["pool_count"],
                **(
                    {"scheduling_segments": view["scheduling_segments"]}
                    if "scheduling_segments" in view
                    else {}
                ),
                **(
                    {"gpu_assignment_plan": view["gpu_assignment_plan"]}
                    if "gpu_assignment_plan" in view
                    else {}
                ),
                **tree_orchid(trees.get(name)),
            }
            for name, view in self.scheduler.views.items()
        }
        for name, tree in pool_trees.items():
            if wanted("scheduler", "pool_trees", name, "alerts"):
                tree["alerts"] = self.scheduler.alert_center.tree_alerts(name)
            # YTsaurus's per-tree node set (scheduling_info_per_pool_tree/<tree>/node_count, node_addresses)
            addresses = sorted(a for a, node in self.scheduler.nodes.items() if name in node.trees)
            tree["node_addresses"] = addresses
            tree["node_count"] = len(addresses)
        cluster_limits = np.zeros(len(RESOURCES))
        for node in self.scheduler.nodes.values():
            cluster_limits += np.asarray(node.resource_limits, dtype=float)
        root: dict[str, Any] = {
            "scheduler": {
                "pool_trees": pool_trees,
                "default_pool_tree": default_tree,
                "cluster": {
                    "resource_limits": resource_map(cluster_limits),
                    "node_count": len(self.scheduler.nodes),
                },
                "nodes": {
                    address: {
                        "resource_limits": resource_map(node.resource_limits),
                        "trees": list(node.trees),
                        "tree": node.trees[0] if len(node.trees) == 1 else None,  # YTsaurus's single tree
                        "tags": sorted(node.tags),
                        "last_seen": node.last_seen,
                        "alerts": list(node.alerts),
                    }
                    for address, node in self.scheduler.nodes.items()
                },
            }
        }
        # YTsaurus's older name of the per-tree map, still what its tests read
        root["scheduler"]["scheduling_info_per_pool_tree"] = pool_trees
        if default_tree is None:  # YTsaurus's orchid has no default tree key then
            del root["scheduler"]["default_pool_tree"]
        else:
            root["scheduler"]["default_fair_share_tree"] = default_tree  # YTsaurus's older name
        if wanted("scheduler", "alerts"):
            root["scheduler"]["alerts"] = self.scheduler.scheduler_alerts()
        if list(path_tokens[:2]) == ["scheduler", "event_log"]:
            # read only when asked for: it holds up to EVENT_LOG_SIZE events
            root["scheduler"]["event_log"] = list(self.scheduler.event_log)
        return root


def _navigate(root: Any, path_tokens: Sequence[str]) -> Any:
    value = root
    for token in path_tokens:
        if not isinstance(value, dict) or token not in value:
            raise LookupError(f"no key {token!r}")
        value = value[token]
    return value
