"""``schedule_allocations_timeout`` in the live service (in process): a heartbeat's scheduling stops at the wall-time
deadline (YTsaurus's ``CheckScheduleAllocationTimeoutExpired``); the simulator has no clock, so it never applies."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store
from pooltree.strategy.heartbeat_deadline import HeartbeatDeadline

LIMITS = {"user_slots": 8, "cpu": 8, "memory": 32 << 30}
SPEC = {"tasks": {"main": {"command": "sleep 100", "job_count": 8, "cpu_limit": 1}}}


class _Clock:
    """A clock that moves ``step`` seconds every time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _live(tmp_path: Path, config: dict[str, Any]) -> LiveScheduler:
    trees = parse_pool_trees({"default": {"config": config, "pools": {}}})
    assert unsupported_options(trees) == []
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(trees, "default", 0.0)
    live.start_operation("vanilla", SPEC, "alice", 0.0)
    live.update_fair_share("default", 0.0)
    return live


def _started(live: LiveScheduler) -> list[dict[str, Any]]:
    heartbeat = {"node_address": "n1", "resource_limits": LIMITS, "running_jobs": []}
    return live.process_heartbeat(parse_heartbeat(heartbeat), 1.0)["start"]


def test_the_live_service_bounds_a_heartbeat_by_wall_time(tmp_path: Path) -> None:
    live = _live(tmp_path, {"schedule_allocations_timeout": 25_000})
    assert live.cores["default"].strategy.clock is time.monotonic  # the live service's wall clock
    live.cores["default"].strategy.clock = _Clock(
        10.0
    )  # every check costs 10 s: the 25 s deadline passes soon
    assert 0 < len(_started(live)) < 8


def test_within_the_timeout_everything_is_scheduled(tmp_path: Path) -> None:
    live = _live(tmp_path, {})  # 40 s by default, far away on a real clock
    assert len(_started(live)) == 8


def test_without_a_clock_there_is_no_deadline() -> None:
    deadline = HeartbeatDeadline(None, 0.0)
    assert not deadline.passed() and not deadline.expired
    clock = _Clock(1.0)
    bounded = HeartbeatDeadline(clock, 2.5)  # deadline 3.5
    assert not bounded.passed()  # 2.0
    assert not bounded.passed()  # 3.0
    assert bounded.passed() and bounded.expired  # 4.0
