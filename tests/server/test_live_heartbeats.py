"""Heartbeat parsing and processing without HTTP: any JSON value is either a valid heartbeat or a ConfigError
naming a field; valid ones never crash the scheduler (unknown jobs are aborted, unknown reports acknowledged)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pooltree.config import parse_pool_trees
from pooltree.errors import ConfigError
from pooltree.node import wire
from pooltree.node.wire import RunningJobReport
from pooltree.resources import same_vector
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.model import LOST_AFTER_MISSED_HEARTBEATS
from pooltree.server.service import serve
from pooltree.server.store import open_store

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=False), st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)
job_keys = st.sampled_from(
    ["job_id", "operation_id", "task_name", "state", "start_time", "finish_time", "exit_code", "error",
     "statistics", "stderr", "stderr_size", "resource_usage", "memory_usage", "abort_reason"]
)  # fmt: skip
jobs = st.lists(
    st.dictionaries(job_keys, st.one_of(json_values, st.sampled_from(["completed", "j1"])), max_size=8)
)
heartbeats = st.fixed_dictionaries(
    {"node_address": st.one_of(st.just("n1"), json_values), "resource_limits": st.one_of(
        st.just({"user_slots": 2, "cpu": 2, "memory": 1 << 30}), json_values)},
    optional={"running_jobs": st.one_of(jobs, json_values), "finished_jobs": st.one_of(jobs, json_values),
              "tags": st.one_of(st.just(["a"]), json_values)},
)  # fmt: skip


@pytest.fixture
def scheduler(tmp_path: Path) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    live.start_operation("vanilla", {"tasks": {"main": {"command": "true", "job_count": 3}}}, "alice", 1.0)
    return live


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(heartbeats, json_values))
def test_any_heartbeat_is_parsed_or_rejected_by_field(scheduler: LiveScheduler, data: object) -> None:
    try:
        heartbeat = parse_heartbeat(data)
    except ConfigError as error:
        assert error.path
        return
    response = scheduler.process_heartbeat(heartbeat, 2.0)
    assert set(response) == {"start", "preempt", "abort", "acknowledge", "heartbeat_period"}
    assert response["acknowledge"] == [report.job_id for report in heartbeat.finished]
    unknown = {job.job_id for job in heartbeat.running} - set(scheduler.jobs)
    assert unknown <= {entry["job_id"] for entry in response["abort"]}


def test_start_then_finish_cycle(scheduler: LiveScheduler) -> None:
    limits = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}
    first = scheduler.process_heartbeat(
        parse_heartbeat({"node_address": "n1", "resource_limits": limits}), 2.0
    )
    assert len(first["start"]) == 2 and all(spec["command"] == "true" for spec in first["start"])
    running = [
        {"job_id": spec["job_id"], "operation_id": spec["operation_id"], "resource_usage": spec["resources"]}
        for spec in first["start"]
    ]
    finished = [
        {
            **running[0],
            "state": "failed",
            "error": {"code": 1205, "message": "User job failed"},
            "stderr": "x",
        }
    ]
    second = scheduler.process_heartbeat(
        parse_heartbeat(
            {
                "node_address": "n1",
                "resource_limits": limits,
                "running_jobs": running[1:],
                "finished_jobs": finished,
            }
        ),
        3.0,
    )
    assert second["acknowledge"] == [running[0]["job_id"]]
    assert len(second["start"]) == 1  # the failed job's slot is reused for the retry
    op = next(iter(scheduler.operations.values()))
    assert op.controller.failed_job_count == 1
    assert scheduler.store.get_job(op.id, running[0]["job_id"]).document["stderr"] == "x"  # type: ignore[union-attr]


def test_pending_operation_is_aborted_and_the_next_one_runs(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    trees = {"default": {"config": {}, "pools": {"p": {"max_running_operation_count": 1}}}}
    live.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    spec = {"pool": "p", "tasks": {"main": {"command": "true", "job_count": 1}}}
    first, second, third = (live.start_operation("vanilla", spec, "alice", 1.0) for _ in range(3))
    assert (first.state, second.state, third.state) == ("running", "pending", "pending")
    live.finish_operation(second.id, "aborted", 2.0)
    assert [e["state"] for e in second.events][-2:] == ["aborting", "aborted"]
    assert third.state == "pending"
    live.finish_operation(first.id, "completed", 3.0)
    assert third.state == "running"
    stored = live.store.get_operation(second.id)
    assert stored is not None and stored.state == "aborted" and stored.finish_time == 2.0


def test_serve_stops_on_event_and_on_cancellation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'serve.db'}"

    async def run(cancel: bool) -> str:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        task = asyncio.create_task(
            serve(
                url,
                create_default_tree=True,
                token="ytct-0000-" + "77" * 16,
                on_ready=ready.set_result,
                stop=None if cancel else stop,
            )
        )
        base = await asyncio.wait_for(ready, 30)
        auth = {"Authorization": "OAuth ytct-0000-" + "77" * 16}
        async with httpx.AsyncClient(timeout=10, headers=auth) as client:
            assert (await client.get(f"{base}/api/v4/get", params={"path": "//sys/pool_trees"})).json() == {
                "value": {"default": {}}
            }
            assert (await client.get(f"{base}/metrics")).status_code == 200
        if cancel:
            task.cancel()
        else:
            stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        return base

    for cancel in (False, True):
        base = asyncio.run(run(cancel))
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base}/api", timeout=2)


def test_running_reports_are_taken_in_one_pass(tmp_path: Path) -> None:
    """A node's running reports, read in one pass (``LiveJobs._take_running_reports``): unknown and other nodes'
    jobs aborted once each (duplicates too), known ones confirmed, and a known job missing from the report counted
    missed and lost after ``LOST_AFTER_MISSED_HEARTBEATS`` heartbeats in a row, as the separate walks did."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    live.start_operation("vanilla", {"tasks": {"main": {"command": "true", "job_count": 3}}}, "alice", 1.0)
    two = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}
    one = {"user_slots": 1, "cpu": 1, "memory": 4 << 30}
    first = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": two}), 2.0)
    other = live.process_heartbeat(parse_heartbeat({"node_address": "n2", "resource_limits": one}), 2.1)
    assert len(first["start"]) == 2 and len(other["start"]) == 1
    kept, dropped = (spec["job_id"] for spec in first["start"])
    foreign = other["start"][0]["job_id"]
    operation_id = other["start"][0]["operation_id"]

    def entry(job_id: str) -> dict[str, object]:
        return {"job_id": job_id, "operation_id": operation_id, "resource_usage": {"cpu": 1, "user_slots": 1}}

    running = [entry(kept), entry(kept), entry(foreign), entry("ghost"), entry("ghost")]
    for beat in range(LOST_AFTER_MISSED_HEARTBEATS + 1):
        now = 3.0 + beat
        answer = live.process_heartbeat(
            parse_heartbeat({"node_address": "n1", "resource_limits": two, "running_jobs": running}), now
        )
        aborts = sorted((item["job_id"], item["reason"]) for item in answer["abort"])
        assert aborts == sorted([(foreign, "unknown_job"), ("ghost", "unknown_job")])
        assert live.jobs[kept].missed_heartbeats == 0
        if beat < LOST_AFTER_MISSED_HEARTBEATS:
            assert live.jobs[dropped].missed_heartbeats == beat + 1
    assert dropped not in live.jobs  # lost: missing from more than LOST_AFTER_MISSED_HEARTBEATS heartbeats
    assert kept in live.jobs and live.jobs[foreign].address == "n2"  # n1 cannot speak for n2's job
    restarted = [job for job in live.jobs.on_node("n1") if job.id != kept]  # the lost job, run again on n1
    assert len(restarted) == 1 and live.jobs.count_on_node("n1") == 2


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.0]))


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(floats, min_size=5, max_size=5), b=st.lists(floats, min_size=5, max_size=5), same=st.booleans()
)
def test_same_vector_is_array_equal(a: list[float], b: list[float], same: bool) -> None:
    """The heartbeat's limits compare (``resources.same_vector``) answers as ``np.array_equal``: NaN never equal,
    -0.0 equal to 0.0."""
    left = np.array(a, dtype=float)
    right = np.array(a if same else b, dtype=float)
    assert same_vector(left, right) == np.array_equal(left, right)
    assert same_vector(left, right[:4]) is False


@settings(max_examples=300, deadline=None)
@given(
    measured=st.one_of(st.just(0.0), st.floats(min_value=1.0, max_value=2.0**40, allow_nan=False)),
    reserve=st.one_of(st.just(0.0), st.floats(min_value=1.0, max_value=2.0**40, allow_nan=False)),
)
def test_counted_memory_reports_what_the_scheduler_counts_from_the_measured(
    measured: float, reserve: float
) -> None:
    """The node reports a job's memory never below its reserve (``wire.counted_memory``); the scheduler counts the
    same usage from it as from the measured memory, and skips the same reports (none measured)."""
    usage = (1.0, 1.0, 0.0, reserve, 0.0)
    counted = wire.counted_memory(measured, reserve)
    as_measured = RunningJobReport("j", "op", "main", usage, measured)
    as_counted = RunningJobReport("j", "op", "main", usage, counted)
    assert (as_counted.memory_usage <= 0) == (as_measured.memory_usage <= 0)
    assert as_counted.counted_usage == as_measured.counted_usage
