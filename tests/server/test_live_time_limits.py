"""time_limit and job_time_limit in the live service (in process, no HTTP): the core's rule, YTsaurus's errors."""

from __future__ import annotations

from pathlib import Path

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}


def _live(tmp_path: Path) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    return live


def _beat(live: LiveScheduler, now: float, running: list[dict] | None = None) -> dict:
    return live.process_heartbeat(
        parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS, "running_jobs": running or []}), now
    )


def test_an_operation_past_its_time_limit_fails(tmp_path: Path) -> None:
    live = _live(tmp_path)
    spec = {"time_limit": 5000, "tasks": {"main": {"command": "sleep 100", "job_count": 1}}}
    op = live.start_operation("vanilla", spec, "alice", 1.0)
    live.update_fair_share("default", 5.5)
    assert op.id in live.operations
    live.update_fair_share("default", 6.5)
    assert op.id not in live.operations
    record = live.store.get_operation(op.id)
    assert record is not None and record.state == "failed"
    assert record.document["error"]["message"] == "Operation is running for too long, aborted"
    assert record.document["error"]["attributes"]["time_limit"] == 5000


def test_a_job_past_its_job_time_limit_is_aborted_on_its_node(tmp_path: Path) -> None:
    live = _live(tmp_path)
    spec = {"tasks": {"main": {"command": "sleep 100", "job_count": 2, "job_time_limit": 1000}}}
    live.start_operation("vanilla", spec, "alice", 1.0)
    live.update_fair_share("default", 1.0)
    started = _beat(live, 2.0)["start"]
    assert len(started) == 2
    running = [
        {"job_id": s["job_id"], "operation_id": s["operation_id"], "resource_usage": s["resources"]}
        for s in started
    ]
    live.update_fair_share("default", 2.5)
    assert _beat(live, 2.6, running)["abort"] == []
    live.update_fair_share("default", 3.5)
    aborts = _beat(live, 3.6, running)["abort"]
    assert sorted(entry["reason"] for entry in aborts) == ["job_time_limit_exceeded"] * 2
    job = live.jobs[aborts[0]["job_id"]]
    assert job.error is not None and job.error["code"] == 1202
