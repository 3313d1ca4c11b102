"""Shared pool trees for the tree runtime tests (the seeds' project-root example and small variants)."""

from __future__ import annotations

import copy
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.tree import PoolTree, PoolTrees

SEED_POOLS: dict[str, Any] = {
    "project-root": {
        "strong_guarantee_resources": {"cpu": 100},
        "weight": 1,
        "max_running_operation_count": 10,
        "max_operation_count": 50,
        "pools": {
            "project-adhoc": {
                "strong_guarantee_resources": {"cpu": 80},
                "weight": 1,
                "max_running_operation_count": 10,
                "max_operation_count": 50,
            },
            "project-batch": {
                "strong_guarantee_resources": {"cpu": 0},
                "weight": 10,
                "max_running_operation_count": 4,
                "max_operation_count": 50,
            },
            "project-backup": {
                "strong_guarantee_resources": {"cpu": 20},
                "weight": 1,
                "max_running_operation_count": 2,
                "max_operation_count": 50,
            },
        },
    }
}


def seed_document(
    config: dict[str, Any] | None = None, extra_pools: dict[str, Any] | None = None
) -> dict[str, Any]:
    pools = copy.deepcopy(SEED_POOLS)
    pools.update(copy.deepcopy(extra_pools or {}))
    return {"physical": {"config": dict(config or {}), "pools": pools}}


def definitions(document: dict[str, Any]) -> dict[str, Any]:
    return parse_pool_trees(document)


def make_trees(document: dict[str, Any], **kwargs: Any) -> PoolTrees:
    return PoolTrees(parse_pool_trees(document), **kwargs)


def make_tree(document: dict[str, Any], name: str = "physical", **kwargs: Any) -> PoolTree:
    return PoolTree(parse_pool_trees(document)[name], **kwargs)


def start(
    trees: PoolTrees,
    op_id: str,
    pool: str | None = None,
    *,
    user: str = "alice",
    now: float = 0.0,
    **spec: Any,
):
    if pool is not None:
        spec["pool"] = pool
    operation_type = spec.pop("type", "map")
    return trees.register_operation(op_id, spec, user=user, operation_type=operation_type, now=now)
