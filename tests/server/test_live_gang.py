"""A gang operation in the live service (in process, no HTTP): a job lost on one node restarts every other job
of the operation in its own allocation (YTsaurus's gang controller, a vanilla task with ``gang_options``)."""

from __future__ import annotations

from pathlib import Path

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 2, "cpu": 2, "memory": 8 << 30}


def _running(started: list[dict]) -> list[dict]:
    return [
        {"job_id": s["job_id"], "operation_id": s["operation_id"], "resource_usage": s["resources"]}
        for s in started
    ]


def _first_job_aborted(live: LiveScheduler, on_n1: list[dict]) -> dict:
    """n1's next heartbeat (t=3): its first job reported aborted, the others still running."""
    lost = on_n1[0]
    finished = [{"job_id": lost["job_id"], "operation_id": lost["operation_id"], "state": "aborted"}]
    heartbeat = {
        "node_address": "n1",
        "resource_limits": LIMITS,
        "running_jobs": _running(on_n1[1:]),
        "finished_jobs": finished,
    }
    return live.process_heartbeat(parse_heartbeat(heartbeat), 3.0)


def test_an_aborted_gang_job_restarts_the_gang_on_every_node(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    spec = {"is_gang": True, "tasks": {"main": {"command": "sleep 100", "job_count": 4, "gang_options": {}}}}
    live.start_operation("vanilla", spec, "alice", 1.0)
    live.update_fair_share("default", 1.0)
    on_n1 = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 2.0)[
        "start"
    ]
    on_n2 = live.process_heartbeat(parse_heartbeat({"node_address": "n2", "resource_limits": LIMITS}), 2.0)[
        "start"
    ]
    assert len(on_n1) == 2 and len(on_n2) == 2
    answer_n1 = _first_job_aborted(live, on_n1)
    # The other job on n1 is aborted and a new job starts in its allocation, in the same answer.
    assert [a["reason"] for a in answer_n1["abort"]] == ["operation_incarnation_changed"]
    assert answer_n1["abort"][0]["job_id"] == on_n1[1]["job_id"]
    # ...and the lost job, back to pending, is scheduled again in the slot its node freed.
    assert sorted(s["job_index"] for s in answer_n1["start"]) == sorted(s["job_index"] for s in on_n1)
    assert not {s["job_id"] for s in answer_n1["start"]} & {s["job_id"] for s in on_n1}
    # YTsaurus's gang environment: the incarnation, the gang size and each ranked job's rank.
    assert {s["environment"]["YT_OPERATION_INCARNATION"] for s in on_n1} == {"0"}
    assert {s["environment"]["YT_OPERATION_INCARNATION"] for s in answer_n1["start"]} == {"1"}
    assert {s["environment"]["YT_GANG_SIZE"] for s in answer_n1["start"]} == {"4"}
    assert sorted(s["environment"]["YT_GANG_RANK"] for s in answer_n1["start"]) == sorted(
        str(s["job_index"]) for s in on_n1
    )
    answer_n2 = live.process_heartbeat(
        parse_heartbeat({"node_address": "n2", "resource_limits": LIMITS, "running_jobs": _running(on_n2)}),
        3.1,
    )
    assert sorted(a["job_id"] for a in answer_n2["abort"]) == sorted(s["job_id"] for s in on_n2)
    assert {a["reason"] for a in answer_n2["abort"]} == {"operation_incarnation_changed"}
    assert len(answer_n2["start"]) == 2  # restarted in their allocations, before any other operation could


def test_is_gang_without_gang_options_loses_only_the_aborted_job(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    spec = {"is_gang": True, "tasks": {"main": {"command": "sleep 100", "job_count": 4}}}
    live.start_operation("vanilla", spec, "alice", 1.0)
    live.update_fair_share("default", 1.0)
    on_n1 = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 2.0)[
        "start"
    ]
    live.process_heartbeat(parse_heartbeat({"node_address": "n2", "resource_limits": LIMITS}), 2.0)
    answer_n1 = _first_job_aborted(live, on_n1)
    assert answer_n1["abort"] == []
