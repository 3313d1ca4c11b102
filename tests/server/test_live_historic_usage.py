"""A pool's ``infer_children_weights_from_historic_usage`` in the live service (in process): the live scheduler's
updates carry each child's historic usage from one update to the next, so a child that has used the cluster weighs
less than a newcomer (the rule: ``tests/fairshare/test_historic_usage_weights.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 16 << 30}


def _spec(pool: str) -> dict[str, object]:
    return {
        "pool": pool,
        "tasks": {"main": {"command": "sleep 100", "job_count": 4, "memory_limit": 1 << 30}},
    }


def test_a_busy_child_weighs_less(tmp_path: Path) -> None:
    parent = {"infer_children_weights_from_historic_usage": True, "pools": {"child1": {}, "child2": {}}}
    trees = {"default": {"pools": {"parent": parent}}}
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    heartbeat = {"node_address": "n1", "resource_limits": LIMITS, "tags": [], "running_jobs": []}
    live.process_heartbeat(parse_heartbeat(heartbeat), 0.0)
    live.start_operation("vanilla", _spec("child1"), "alice", 0.0)
    live.update_fair_share("default", 1.0)
    live.process_heartbeat(parse_heartbeat(heartbeat), 1.0)  # child1's four jobs take the whole node
    for now in (2.0, 3.0, 4.0):
        live.update_fair_share("default", now)
    elements = live.cores["default"].last_result.elements
    # samples of child1's dominant usage share: 0 at 1 s, then 1 at 2, 3 and 4 s (half-life 10 s)
    decay = [2.0 ** (-(4.0 - t) / 10.0) for t in (1.0, 2.0, 3.0, 4.0)]
    average = sum(decay[1:]) / sum(decay)
    assert elements["child1"].weight == pytest.approx(2.0**-average)
    assert elements["child2"].weight == 1.0
