"""A heartbeat keeps what equals its node's last one (``LiveJobs._take_reports`` and ``_response``): the node's tags,
trees, alerts and empty stop lists stay the objects they were, instead of being replaced each heartbeat by equal
new ones that live a heartbeat period (long enough for the collector to walk each twice). What changes is still
taken, and the answers are the same: a stop queued for the node goes out once, with a list of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

GIB = 1 << 30


def _live(tmp_path: Path) -> LiveScheduler:
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    scheduler.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), "default", 0.0)
    return scheduler


def _heartbeat(scheduler: LiveScheduler, now: float, **extra: Any) -> dict[str, Any]:
    data = {
        "node_address": "n1",
        "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 * GIB},
        "tags": ["a", "b"],
        **extra,
    }
    return scheduler.process_heartbeat(parse_heartbeat(data), now)


def test_equal_state_is_kept_and_changes_are_taken(tmp_path: Path) -> None:
    scheduler = _live(tmp_path)
    first = _heartbeat(scheduler, 1.0)
    node = scheduler.nodes["n1"]
    tags, trees, alerts = node.tags, node.trees, node.alerts
    preempts, aborts = node.preempts, node.aborts
    second = _heartbeat(scheduler, 2.0)
    assert second == first
    assert node.tags is tags and node.trees is trees and node.alerts is alerts
    assert node.preempts is preempts and node.aborts is aborts
    # the answer's lists are its own
    assert second["preempt"] is not preempts and second["abort"] is not aborts
    assert scheduler.cores["default"].node_tags["n1"] is tags  # the strategy holds the kept set too

    node.aborts.append({"job_id": "j1", "reason": "user_request"})
    queued = node.aborts
    third = _heartbeat(scheduler, 3.0)
    assert third["abort"] == [{"job_id": "j1", "reason": "user_request"}]
    assert third["abort"] is queued and node.aborts == [] and node.aborts is not queued
    assert _heartbeat(scheduler, 4.0)["abort"] == []

    moved = _heartbeat(scheduler, 5.0, tags=["c"])
    assert node.tags == frozenset({"c"}) and moved["abort"] == []
    alert = {"code": 1, "message": "reduced isolation", "attributes": {}}
    _heartbeat(scheduler, 6.0, tags=["c"], alerts=[alert])
    assert [a["message"] for a in node.alerts] == ["reduced isolation"]
    _heartbeat(scheduler, 7.0, tags=["c"])
    assert node.alerts == []
