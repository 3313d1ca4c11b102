"""Issue 7: operations of one pool share a node fairly in the live scheduler (driven by heartbeats, no sleeps).

The reported case: one node of 2 slots, three vanilla operations of 30 × ``sleep 0.2`` in one pool; the agent
reports both jobs finished in the same heartbeat, every operation is then at usage 0, and the tie used to go to
the same two operations every time.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}


def _run(
    live: LiveScheduler,
    *,
    steps: int,
    job_duration: float,
    update_period: float,
    running: dict[str, dict[str, Any]] | None = None,
    start: float = 0.0,
) -> Counter[str]:
    """A fake agent: heartbeat every 0.1 s from ``start``, each job finishes ``job_duration`` after its start;
    ``running`` carries the agent's jobs over from an earlier run."""
    running = {} if running is None else running
    started: Counter[str] = Counter()
    next_update = start
    for step in range(steps):
        now = round(start + step * 0.1, 6)
        if now >= next_update:
            live.update_fair_share("default", now)
            next_update = now + update_period
        done = [job for job in running.values() if job["start"] + job_duration <= now + 1e-9]
        for job in done:
            del running[job["report"]["job_id"]]
        heartbeat = {
            "node_address": "n1",
            "resource_limits": LIMITS,
            "running_jobs": [job["report"] for job in running.values()],
            "finished_jobs": [dict(job["report"], state="completed") for job in done],
        }
        response = live.process_heartbeat(parse_heartbeat(heartbeat), now)
        for spec in response["start"]:
            report = {
                "job_id": spec["job_id"],
                "operation_id": spec["operation_id"],
                "resource_usage": spec["resources"],
            }
            running[spec["job_id"]] = {"report": report, "start": now}
            started[spec["operation_id"]] += 1
    return started


def test_three_operations_in_one_pool_take_turns(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {"p": {}}}}), None, 0.0)
    spec = {"pool": "p", "tasks": {"main": {"command": "sleep 0.2", "job_count": 30}}}
    ops = [live.start_operation("vanilla", spec, "alice", 0.0) for _ in range(3)]
    started = _run(live, steps=25, job_duration=0.2, update_period=0.5)
    counts = sorted(started[op.id] for op in ops)
    assert sum(counts) == 26  # both slots busy all the time
    assert counts[-1] - counts[0] <= 1, counts
    view = live.strategy_views["default"]
    assert all(view[op.id]["local_satisfaction_ratio"] < 1e9 for op in ops)  # fair shares are published


def test_operation_started_later_gets_the_next_free_slot(tmp_path: Path) -> None:
    """A new operation at usage 0 is the hungriest once a fair-share update has published it."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {"p": {}}}}), None, 0.0)
    spec = {"pool": "p", "tasks": {"main": {"command": "sleep 0.2", "job_count": 30}}}
    first = live.start_operation("vanilla", spec, "alice", 0.0)
    running: dict[str, dict[str, Any]] = {}
    before = _run(live, steps=3, job_duration=0.2, update_period=0.1, running=running)
    assert before[first.id] == 4 and len(running) == 2
    late = live.start_operation("vanilla", spec, "alice", 0.3)
    started = _run(live, steps=10, job_duration=0.2, update_period=0.1, running=running, start=0.3)
    assert abs(started[late.id] - started[first.id]) <= 1, started


def test_activated_operation_starts_in_the_heartbeat_that_finished_the_previous_one(tmp_path: Path) -> None:
    """max_running_operation_count 1: the pending operation is activated when the first completes, and its jobs
    start in that same heartbeat (no waiting for the periodic fair-share update and another node heartbeat)."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    trees = {"default": {"config": {}, "pools": {"p": {"max_running_operation_count": 1}}}}
    live.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    spec = {"pool": "p", "tasks": {"main": {"command": "true", "job_count": 2}}}
    first = live.start_operation("vanilla", spec, "alice", 0.0)
    second = live.start_operation("vanilla", spec, "alice", 0.0)
    assert second.state == "pending"
    response = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 0.1)
    assert {s["operation_id"] for s in response["start"]} == {first.id}
    finished = [
        {"job_id": s["job_id"], "operation_id": s["operation_id"], "state": "completed"}
        for s in response["start"]
    ]
    heartbeat = {"node_address": "n1", "resource_limits": LIMITS, "finished_jobs": finished}
    response = live.process_heartbeat(parse_heartbeat(heartbeat), 0.2)
    assert first.state == "completed" and second.state == "running"
    assert [s["operation_id"] for s in response["start"]] == [second.id, second.id]
