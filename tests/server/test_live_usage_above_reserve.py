"""The live service passes measured memory above a job's reserve to the scheduler core (in process, no HTTP)."""

from __future__ import annotations

from pathlib import Path

from pooltree.config import parse_pool_trees
from pooltree.resources import MEMORY
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 4 << 30}


def test_measured_memory_above_the_reserve_is_the_allocations_usage(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    spec = {"tasks": {"main": {"command": "sleep 100", "job_count": 4, "memory_limit": 1 << 30}}}
    live.start_operation("vanilla", spec, "alice", 1.0)
    live.update_fair_share("default", 1.0)
    beat = {"node_address": "n1", "resource_limits": LIMITS}
    started = live.process_heartbeat(parse_heartbeat(beat), 2.0)["start"]
    assert started
    core = live.cores["default"]
    reserve = float(core.strategy.nodes["n1"].usage[MEMORY])
    first = started[0]
    running = [
        {
            "job_id": s["job_id"],
            "operation_id": s["operation_id"],
            "resource_usage": s["resources"],
            "memory_usage": 0,
        }
        for s in started
    ]
    running[0]["memory_usage"] = int(first["resources"]["memory"] + (512 << 20))  # 512 MiB above its reserve
    live.process_heartbeat(parse_heartbeat({**beat, "running_jobs": running}), 3.0)
    assert float(core.strategy.nodes["n1"].usage[MEMORY]) == reserve + (512 << 20)
