"""``LiveOperation.running_job_count`` (what ``brief_progress.jobs.running`` shows) equals a count of the
operation's running jobs after every kind of change: starts, finished reports, jobs missing from reports, a
suspension that aborts, a silent node swept, and a revival whose nodes confirm some jobs and omit others."""

from __future__ import annotations

from pathlib import Path

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.model import LOST_AFTER_MISSED_HEARTBEATS
from pooltree.server.live.views import progress
from pooltree.server.store import open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 16 << 30}
SPEC = {"tasks": {"main": {"command": "true", "job_count": 6, "cpu_limit": 1}}}


def _check(live: LiveScheduler) -> None:
    for op in live.operations.values():
        walked = sum(1 for job in op.jobs.values() if job.state == "running")
        assert op.running_job_count == walked, op.id
        assert progress(op)["running"] == (0 if op.is_final else walked)


def _beat(live: LiveScheduler, address: str, now: float, *, keep: int | None = None, finish: int = 0) -> None:
    """A heartbeat of ``address`` reporting its first ``finish`` jobs finished (completed and failed in turn) and
    the next ``keep`` (all others when None) running; the rest of its jobs are missing from the report."""
    jobs = sorted(live.jobs.on_node(address), key=lambda job: job.id)
    done, rest = jobs[:finish], jobs[finish:]
    running = rest if keep is None else rest[:keep]
    data = {
        "node_address": address,
        "resource_limits": LIMITS,
        "running_jobs": [{"job_id": j.id, "operation_id": j.operation_id} for j in running],
        "finished_jobs": [
            {"job_id": j.id, "operation_id": j.operation_id, "state": ("completed", "failed")[i % 2]}
            for i, j in enumerate(done)
        ],
    }
    live.process_heartbeat(parse_heartbeat(data), now)
    _check(live)


def test_the_running_job_count_follows_every_change(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    live = LiveScheduler(open_store(url), node_heartbeat_timeout=5.0)
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), "default", 0.0)
    first = live.start_operation("vanilla", SPEC, "alice", 1.0)
    second = live.start_operation("vanilla", SPEC, "bob", 1.0)
    for address in ("n1", "n2", "n3"):
        _beat(live, address, 2.0)
    assert sum(op.running_job_count for op in live.operations.values()) == 12
    _beat(live, "n1", 3.0, finish=2)  # a completed and a failed job; new ones start in their place
    for beat in range(LOST_AFTER_MISSED_HEARTBEATS + 1):  # one running job missing: lost
        _beat(live, "n2", 4.0 + beat, keep=3)
    live.suspend_operation(second.id, 8.0, abort_running_jobs=True)
    _check(live)
    live.resume_operation(second.id, 8.5)
    live.commands.abort_on_node_by_job(
        live.jobs.on_node("n1")[0], "operation_aborted", 8.6
    )  # orphans.py's way
    _check(live)
    _beat(live, "n1", 9.0)
    _beat(live, "n3", 9.0)
    assert live.sweep_nodes(13.0) == ["n2"]  # silent since 7.0: its jobs are lost
    _check(live)
    assert first.running_job_count + second.running_job_count > 0
    live.store.close()
    revived = LiveScheduler(open_store(url), node_heartbeat_timeout=5.0)
    revived.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), "default", 20.0)
    revived.revive(20.0)
    _check(revived)
    assert sum(op.running_job_count for op in revived.operations.values()) > 0
    _beat(revived, "n1", 21.0)  # confirms its reserved jobs
    _beat(revived, "n3", 21.0, keep=1)  # omits some: they go back to pending, lost
    _beat(revived, "n3", 22.0)
