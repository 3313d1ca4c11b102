"""The tree's ``waiting_for_resources_on_node_timeout`` reaches the nodes (issue 30): the live scheduler puts it in
the spec of every job it starts in that tree (``waiting_for_resources_timeout``, seconds), as YTsaurus carries it
in the allocation's attributes; the node waits that long for the job's GPUs (``tests/node/test_gpu.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store


def _started_specs(tmp_path: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    scheduler.apply_pool_trees(parse_pool_trees({"default": {"config": config, "pools": {}}}), None, 0.0)
    limits = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}
    scheduler.process_heartbeat(parse_heartbeat({"node_address": "n0", "resource_limits": limits}), 0.5)
    scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 1}}}, "alice", 1.0
    )
    for tree in list(scheduler.cores):
        scheduler.update_fair_share(tree, 1.0)
    answer = scheduler.process_heartbeat(
        parse_heartbeat({"node_address": "n0", "resource_limits": limits}), 1.5
    )
    return answer["start"]


def test_the_trees_timeout_goes_with_each_job(tmp_path: Path) -> None:
    (spec,) = _started_specs(tmp_path, {"waiting_job_timeout": 90000})  # the old name, milliseconds
    assert spec["waiting_for_resources_timeout"] == 90.0


def test_unset_the_node_keeps_its_own_default(tmp_path: Path) -> None:
    (spec,) = _started_specs(tmp_path, {})
    assert "waiting_for_resources_timeout" not in spec
