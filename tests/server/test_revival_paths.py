"""A store revived as before session 39 and as now gives the same scheduler state: operations, jobs by id and node,
reservations, each controller's pending jobs, reserved jobs, counts and demand, and the store's rows after.

"As before" is the plain path of each step made cheaper: every pending queue scanned per job record (no
``reviving`` index), documents read by ``json.loads``, every field of a job record read by name, the collector on.
The store holds the records revival has to tell apart: completed and running jobs, a completed job's loser still
running, two running jobs of one index on two nodes and on one node, indexes past the job count, an unknown task,
odd documents (an integer past 64 bits, ``NaN``, fields written with their defaults, unknown keys)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from job_record_reference import read_every_field

from pooltree.config import parse_pool_trees
from pooltree.server.live import LiveScheduler
from pooltree.server.live import revival as revival_module
from pooltree.server.live.model import LiveJob, LiveVanillaController
from pooltree.server.store import JobRecord, open_store
from pooltree.server.store import base as store_base
from pooltree.server.store import sql as store_sql

TREES = {"default": {"config": {}, "pools": {"p": {}}}}


def _spec(jobs: int, tasks: int = 1) -> dict[str, Any]:
    return {
        "pool": "p",
        "tasks": {f"t{n}": {"command": "true", "job_count": jobs, "cpu_limit": 1} for n in range(tasks)},
    }


def _job(op: str, job_id: str, state: str, node: str, task: str, index: int, **document: Any) -> JobRecord:
    finish = None if state == "running" else 50.0
    return JobRecord(
        op,
        job_id,
        state,
        node,
        10.0 + index,
        finish,
        None,
        {"task_name": task, "job_index": index, **document},
    )


def _records(ops: list[str]) -> list[JobRecord]:
    a, b, c = ops
    records = [_job(a, f"a{i}", "completed", f"n{i % 3}", "t0", i) for i in range(0, 40, 3)] + [
        _job(a, f"r{i}", "running", f"n{i % 4}", "t0", i, tree="default") for i in range(1, 60, 2)
    ]
    records += [
        _job(a, "loser", "running", "n1", "t0", 3, job_competition_id="a3"),  # its competitor completed
        _job(b, "s1", "running", "n0", "t1", 5),
        _job(b, "s2", "running", "n1", "t1", 5, job_competition_id="s1", has_competitors=True),
        _job(b, "same1", "running", "n2", "t0", 7),
        _job(b, "same2", "running", "n2", "t0", 7),  # one index twice on one node
        _job(b, "past", "running", "n0", "t0", 500),  # past the job count
        _job(b, "ghost", "running", "n0", "nope", 1),  # no such task
        _job(b, "big", "completed", "n3", "t1", 2, statistics={"bytes": 2**70, "x": 1}),
        _job(b, "nan", "failed", "n3", "t1", 3, statistics={"ratio": math_nan()}, exit_code=1),
        _job(b, "old", "completed", "n3", "t1", 4, error=None, statistics={}, stderr="", stderr_size=0),
        _job(b, "odd", "aborted", "n0", "t1", 6, unknown_key=[1, 2], gpu_devices=[0, 1], stderr_size=12),
        _job(c, "c1", "running", "n5", "t0", 0),
    ]
    return records


def math_nan() -> float:
    return float("nan")


def _build(path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    ops = [
        live.start_operation("vanilla", _spec(80), "alice", 1.0).id,
        live.start_operation("vanilla", _spec(20, tasks=2), "bob", 2.0).id,
        live.start_operation("vanilla", _spec(3), "carol", 3.0).id,
    ]
    live.store.put_jobs(_records(ops))
    live.commits.close()
    live.store.close()


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LiveVanillaController, "reviving", lambda self: contextlib.nullcontext())
    monkeypatch.setattr(store_base, "load_json", json.loads)
    monkeypatch.setattr(store_sql, "load_json", json.loads)
    monkeypatch.setattr(LiveJob, "from_record", staticmethod(read_every_field))
    monkeypatch.setattr(revival_module, "collector_paused", contextlib.nullcontext)


def _same_value(value: Any) -> Any:
    """``value`` with NaN spelled as a string (NaN != NaN) and a tuple told from a list, for comparing."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, dict):
        return {k: _same_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_same_value(v) for v in value]
    if isinstance(value, tuple):
        return ("tuple", [_same_value(v) for v in value])
    return value


def _controller(controller: LiveVanillaController) -> Any:
    return {
        "pending": {
            task: [(job.index, job.fraction, job.attempt) for job in state.pending]
            for task, state in controller._tasks.items()
        },
        "completed": {task: state.completed for task, state in controller._tasks.items()},
        "reserved": {
            node: {key: (job.index, job_id) for key, (job, job_id) in jobs.items()}
            for node, jobs in controller._reserved.items()
        },
        "reserved_by_task": controller._reserved_by_task,
        "reserved_start": controller._reserved_start,
        "counts": (
            controller.completed_job_count,
            controller.failed_job_count,
            controller.pending_allocation_count,
        ),
        "needed": controller.needed_resources.tobytes(),
        "min_needed": controller.min_needed_resources.tobytes(),
    }


def _state(path: Path) -> Any:
    live = LiveScheduler(open_store(f"sqlite:///{path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    revived = live.revive(100.0)
    operations = {
        op.id: {
            "fields": (op.state, op.trees, op.pools, op.aborted_jobs, op.lost_jobs, op.running_job_count),
            "events": op.events,
            "jobs": {job_id: _same_value(dataclasses.asdict(job)) for job_id, job in op.jobs.items()},
            "controller": _controller(op.controller),
        }
        for op in live.operations.values()
    }
    state = {
        "revived": revived,
        "operations": operations,
        "jobs": {job_id: _same_value(dataclasses.asdict(job)) for job_id, job in live.jobs.items()},
        "by_node": {node: sorted(live.jobs.node_index(node)) for node in (f"n{i}" for i in range(6))},
        "reservations": {node: live.reservations.operations_on(node) for node in (f"n{i}" for i in range(6))},
        "expected": dict(live.expected_nodes),
        "rows": {
            op_id: sorted(
                (r.id, r.state, r.address, r.finish_time, json.dumps(_same_value(r.document), sort_keys=True))
                for r in live.store.list_jobs(op_id)
            )
            for op_id in operations
        },
    }
    live.commits.close()
    live.store.close()
    return state


def test_a_store_revives_as_the_plain_path_revives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build(tmp_path / "built")
    shutil.copytree(tmp_path / "built", tmp_path / "now")
    shutil.copytree(tmp_path / "built", tmp_path / "plain")
    now = _state(tmp_path / "now")
    with monkeypatch.context() as patch:
        _plain(patch)
        plain = _state(tmp_path / "plain")
    assert now == plain
    assert len(now["operations"]) == 3 and now["jobs"]  # something was revived and reserved
    assert any(op["controller"]["reserved"] for op in now["operations"].values())


def test_a_revival_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    """Paused while it revives and on again after, with one collection of the young and middle generations at
    the end (what it made walked once); untouched when it was off already."""
    _build(tmp_path)
    enabled = gc.isenabled()
    collections: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            during: list[bool] = []
            collections.clear()
            with revival_module.collector_paused():
                during.append(gc.isenabled())
                made = [{"n": n} for n in range(3 * gc.get_threshold()[0])]  # past the young threshold
                assert collections == []
            assert during == [False] and gc.isenabled() == before and made
            assert collections == ([1] if before else [])
        gc.enable()
        live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
        live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
        live.revive(100.0)
        assert gc.isenabled()
        live.commits.close()
        live.store.close()
    finally:
        gc.callbacks.remove(seen)
        (gc.enable if enabled else gc.disable)()
