"""``node_reconnection_timeout`` in the live service (in process): for that long after the scheduler connects
(revives at start), an element's ``scheduling_tag_filter`` does not cap its limits by the matching nodes, which may
not have reconnected yet (YTsaurus's ``AreTotalResourceLimitsStable``); afterwards it does again. The simulator has
no connection: nothing changes there."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store
from pooltree.strategy.reconnection import total_resource_limits_stable

LIMITS = {"user_slots": 8, "cpu": 4, "memory": 8 << 30}
SPEC = {"pool": "tagged", "tasks": {"main": {"command": "sleep 100", "job_count": 8}}}


def _live(tmp_path: Path, timeout_ms: int | None) -> LiveScheduler:
    config = {} if timeout_ms is None else {"node_reconnection_timeout": timeout_ms}
    trees = {"default": {"config": config, "pools": {"tagged": {"scheduling_tag_filter": "gpu"}}}}
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    for node, tags in (("n1", ["gpu"]), ("n2", [])):
        live.process_heartbeat(
            parse_heartbeat(
                {"node_address": node, "resource_limits": LIMITS, "tags": tags, "running_jobs": []}
            ),
            0.0,
        )
    return live


def _pool_cpu_share(live: LiveScheduler, now: float) -> float:
    live.update_fair_share("default", now)
    return float(live.cores["default"].last_result.elements["tagged"].fair_share[1])


def test_the_tag_filter_is_not_trusted_until_the_timeout_after_the_connection(tmp_path: Path) -> None:
    live = _live(tmp_path, 60_000)
    live.start_operation("vanilla", SPEC, "alice", 0.0)
    assert _pool_cpu_share(live, 1.0) == pytest.approx(0.5)  # never connected: the gpu node's 4 of 8 cpu
    live.revive(10.0)  # the scheduler connects at 10 s
    assert live.cores["default"].connection_time == 10.0
    assert _pool_cpu_share(live, 20.0) == pytest.approx(1.0)  # within 60 s: not capped by the gpu nodes
    assert _pool_cpu_share(live, 71.0) == pytest.approx(0.5)  # stable again


def test_the_default_is_five_minutes(tmp_path: Path) -> None:
    live = _live(tmp_path, None)
    live.start_operation("vanilla", SPEC, "alice", 0.0)
    live.connect(0.0)
    assert _pool_cpu_share(live, 299.0) == pytest.approx(1.0)
    assert _pool_cpu_share(live, 300.0) == pytest.approx(0.5)


def test_the_rule() -> None:
    assert total_resource_limits_stable(None, 300.0, 0.0)
    assert not total_resource_limits_stable(10.0, 300.0, 309.0)
    assert total_resource_limits_stable(10.0, 300.0, 310.0)
