"""``schedule_in_single_tree`` in the live service (in process, same SQLite store across a restart): the operation
runs in the tree the core chooses, its other trees are erased (``runtime_parameters.erased_trees``, as YTsaurus
keeps them) and stay erased after a revival."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}
TREES = {
    "a": {"config": {"node_tag_filter": "ta"}, "pools": {"research": {}}},
    "b": {
        "config": {"node_tag_filter": "tb"},
        "pools": {"research": {"strong_guarantee_resources": {"cpu": 2}}},
    },
}
SPEC: dict[str, Any] = {
    "pool": "research",
    "pool_trees": ["a", "b"],
    "schedule_in_single_tree": True,
    "tasks": {"main": {"command": "sleep 100", "job_count": 2}},
}


def _live(tmp_path: Path, now: float) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "a", now)
    for node, tag in (("na", "ta"), ("nb", "tb")):
        live.process_heartbeat(
            parse_heartbeat(
                {"node_address": node, "resource_limits": LIMITS, "tags": [tag], "running_jobs": []}
            ),
            now,
        )
    for tree in ("a", "b"):
        live.update_fair_share(tree, now)
    return live


def test_the_operation_runs_in_the_chosen_tree_and_stays_there_after_a_restart(tmp_path: Path) -> None:
    live = _live(tmp_path, 0.0)
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    assert op.trees == ["b"]
    assert op.runtime_parameters["erased_trees"] == ["a"]
    assert list(op.runtime_parameters["scheduling_options_per_pool_tree"]) == ["b"]
    assert op.id not in live.cores["a"].pool_tree.operations
    live.store.close()
    revived = _live(tmp_path, 2.0)
    revived.revive(2.0)
    assert revived.operations[op.id].trees == ["b"]
    assert op.id not in revived.cores["a"].pool_tree.operations


def test_consider_guarantees_refuses_a_start_without_a_guaranteed_tree(tmp_path: Path) -> None:
    live = _live(tmp_path, 0.0)
    spec = {**SPEC, "pool": "other", "consider_guarantees_for_single_tree": True}
    with pytest.raises(PooltreeError, match="Found no best single non-empty tree for operation"):
        live.start_operation("vanilla", spec, "alice", 1.0)
    assert not live.operations
