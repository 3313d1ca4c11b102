"""Speculative jobs in the live service (in process, no HTTP): the core's rule, the loser aborted on its node,
each job counted once, and a restart that never runs a finished job again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.model import LiveJob
from pooltree.server.store import open_store

LIMITS = {"user_slots": 1, "cpu": 1, "memory": 8 << 30}
SPEC: dict[str, Any] = {
    "job_speculation_timeout": 1000,
    "tasks": {"main": {"command": "sleep 100", "job_count": 1}},
}


def _live(tmp_path: Path) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    return live


def _beat(
    live: LiveScheduler, node: str, now: float, running: list[dict] = (), finished: list[dict] = ()
) -> dict[str, Any]:
    reports = [
        {"job_id": s["job_id"], "operation_id": s["operation_id"], "resource_usage": s["resources"]}
        for s in running
    ]
    heartbeat = {
        "node_address": node,
        "resource_limits": LIMITS,
        "running_jobs": reports,
        "finished_jobs": list(finished),
    }
    return live.process_heartbeat(parse_heartbeat(heartbeat), now)


def _done(spec: dict, state: str, now: float, **extra: Any) -> dict[str, Any]:
    return {
        "job_id": spec["job_id"],
        "operation_id": spec["operation_id"],
        "state": state,
        "start_time": now - 1,
        "finish_time": now,
        **extra,
    }


def _race(live: LiveScheduler) -> tuple[str, dict, dict]:
    """An operation whose job runs on n1 past its timeout and whose copy starts on n2: (id, original, copy)."""
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    live.update_fair_share("default", 1.0)
    [original] = _beat(live, "n1", 1.1)["start"]
    live.update_fair_share("default", 1.5)  # not yet past the 1 s timeout
    assert _beat(live, "n2", 1.6)["start"] == []
    live.update_fair_share("default", 2.5)  # past it: a copy is requested and published as demand
    assert live.progress(live.operations[op.id])["pending"] == 1
    [copy] = _beat(live, "n2", 2.6)["start"]
    assert copy["job_index"] == original["job_index"] == 0
    return op.id, original, copy


def test_the_copy_wins_and_the_original_is_aborted_on_its_node(tmp_path: Path) -> None:
    live = _live(tmp_path)
    op_id, original, copy = _race(live)
    progress = live.progress(live.operations[op_id])
    assert (progress["running"], progress["total"]) == (2, 2)
    _beat(live, "n2", 3.0, finished=[_done(copy, "completed", 3.0)])
    answer = _beat(live, "n1", 3.1, running=[original])
    assert answer["abort"] == [{"job_id": original["job_id"], "reason": "speculative_run_won"}]
    assert live.jobs[original["job_id"]].interruption_info is None  # a loser, not a preemption
    _beat(live, "n1", 3.2, finished=[_done(original, "aborted", 3.2, abort_reason="speculative_run_won")])
    record = live.store.get_operation(op_id)
    assert record is not None and record.state == "completed"
    assert record.document["progress"]["completed"] == 1  # never both results
    assert record.document["progress"]["aborted"] == 1
    jobs = {record.id: record for record in live.store.list_jobs(op_id)}
    assert jobs[original["job_id"]].state == "aborted" and jobs[copy["job_id"]].state == "completed"
    for record in jobs.values():  # stored with YTsaurus's competition attributes
        job = LiveJob.from_record(record)
        assert (job.competition_id, job.has_competitors) == (original["job_id"], True)
    live.store.close()


def test_a_restart_never_runs_the_won_job_again(tmp_path: Path) -> None:
    """The store says the copy completed and the original still runs (the scheduler died before the loser's
    abort came back): the revived operation holds nothing to run and the original is not re-attached."""
    live = _live(tmp_path)
    op_id, original, copy = _race(live)
    _beat(live, "n2", 3.0, finished=[_done(copy, "completed", 3.0)])
    live.store.close()

    revived = _live(tmp_path)
    revived.revive(10.0)
    op = revived.operations[op_id]
    assert op.controller.completed_job_count == 1
    assert op.controller.pending_allocation_count == 0
    revived.update_fair_share("default", 10.5)
    answer = _beat(revived, "n1", 11.0, running=[original])
    assert answer["start"] == []
    assert [entry["job_id"] for entry in answer["abort"]] == [original["job_id"]]  # not re-attached
    assert _beat(revived, "n2", 11.1)["start"] == []
    revived.update_fair_share("default", 12.0)
    record = revived.store.get_operation(op_id)
    assert record is not None and record.state == "completed"
    revived.store.close()


def test_a_revived_job_keeps_its_speculation_clock(tmp_path: Path) -> None:
    """A job running since 1.1 s when the scheduler restarts at 10 s is long past its 1 s timeout: the first
    period after its node re-attaches it asks for a copy (the clock runs from the job's start, not the restart)."""
    live = _live(tmp_path)
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    live.update_fair_share("default", 1.0)
    [original] = _beat(live, "n1", 1.1)["start"]
    live.store.close()

    revived = _live(tmp_path)
    revived.revive(10.0)
    revived.update_fair_share("default", 10.0)
    assert _beat(revived, "n1", 10.1, running=[original])["start"] == []  # re-attached, not started again
    revived.update_fair_share("default", 10.2)
    assert revived.progress(revived.operations[op.id])["pending"] == 1
    [copy] = _beat(revived, "n2", 10.3)["start"]
    assert copy["job_index"] == original["job_index"]
    revived.store.close()


def test_a_loser_that_completes_before_its_abort_is_recorded_aborted(tmp_path: Path) -> None:
    """Both runs end at about the same time: the original's completion arrives after the copy won, before the
    abort reached its node. YTsaurus aborts such a completing job: it is recorded aborted, counted once."""
    live = _live(tmp_path)
    op_id, original, copy = _race(live)
    _beat(live, "n2", 3.0, finished=[_done(copy, "completed", 3.0)])
    _beat(live, "n1", 3.05, finished=[_done(original, "completed", 3.05)])
    record = live.store.get_operation(op_id)
    assert record is not None and record.state == "completed"
    progress = record.document["progress"]
    assert (progress["completed"], progress["aborted"], progress["total"]) == (1, 1, 1)
    job = LiveJob.from_record(next(r for r in live.store.list_jobs(op_id) if r.id == original["job_id"]))
    assert (job.state, job.abort_reason) == ("aborted", "speculative_run_won")
    assert job.error is not None and job.error["attributes"]["abort_reason"] == "speculative_run_won"
    live.store.close()
