"""``min_node_resource_limits`` in the live service (in process): the tree alert naming nodes smaller than the tree
expects (YTsaurus's ``CheckMinNodeResourceLimits``); nodes with jobs disabled are left out; at most 10 named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.errors import ConfigError
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

GIB = 1 << 30


def _live(tmp_path: Path, config: dict[str, Any], nodes: dict[str, dict[str, float]]) -> LiveScheduler:
    trees = parse_pool_trees({"default": {"config": config, "pools": {}}})
    assert unsupported_options(trees) == []
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(trees, "default", 0.0)
    for address, limits in nodes.items():
        heartbeat = {"node_address": address, "resource_limits": limits, "running_jobs": []}
        live.process_heartbeat(parse_heartbeat(heartbeat), 0.0)
    return live


def _alerts(live: LiveScheduler) -> list[dict[str, Any]]:
    with live.lock:
        alerts = live.alert_center.tree_alerts("default")
    return [a for a in alerts if a["attributes"]["alert_type"] == "nodes_with_insufficient_resource_limits"]


def test_small_nodes_are_named(tmp_path: Path) -> None:
    nodes = {
        "big": {"user_slots": 8, "cpu": 8, "memory": 32 * GIB},
        "small": {"user_slots": 8, "cpu": 2, "memory": 32 * GIB},
        "disabled": {"user_slots": 0, "cpu": 2, "memory": 32 * GIB},
    }
    live = _live(tmp_path, {"min_node_resource_limits": {"cpu": 4, "memory": 16 * GIB}}, nodes)
    [alert] = _alerts(live)
    assert alert["message"] == "Found violating nodes in tree 'default'"
    assert alert["attributes"]["violating_nodes"] == ["small"]
    assert "violating_nodes_truncated" not in alert["attributes"]


def test_at_most_ten_are_named(tmp_path: Path) -> None:
    nodes = {f"n{index:02d}": {"user_slots": 4, "cpu": 1, "memory": GIB} for index in range(12)}
    live = _live(tmp_path, {"min_node_resource_limits": {"cpu": 4}}, nodes)
    [alert] = _alerts(live)
    assert alert["attributes"]["violating_nodes"] == [f"n{index:02d}" for index in range(10)]
    assert alert["attributes"]["violating_nodes_truncated"] is True


def test_no_alert_without_the_option_or_when_every_node_fits(tmp_path: Path) -> None:
    nodes = {"n": {"user_slots": 4, "cpu": 1, "memory": GIB}}
    assert _alerts(_live(tmp_path / "a", {}, nodes)) == []
    assert _alerts(_live(tmp_path / "b", {"min_node_resource_limits": {"cpu": 1}}, nodes)) == []


def test_a_bad_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match="min_node_resource_limits"):
        parse_pool_trees({"t": {"config": {"min_node_resource_limits": {"cpu": "many"}}}})
