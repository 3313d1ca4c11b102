"""The node agent core: heartbeat contents, applying responses, reports re-sent until acknowledged."""

from __future__ import annotations

import json

import pytest
from node_support import py, run, wait_for_output

from pooltree.errors import ConfigError
from pooltree.node import JobExecutor
from pooltree.node.agent import NodeAgent, detect_resource_limits
from pooltree.resources import CPU, MEMORY, USER_SLOTS, vector

GiB = 1024**3
INTERRUPTIBLE = py(
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *a: sys.exit(0))\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)


def make_agent(tmp_path, **kwargs) -> NodeAgent:
    executor = JobExecutor(
        tmp_path / "slots", memory_sample_period=0.05, memory_meter="psutil", abort_grace=0.5
    )
    limits = vector(user_slots=4, cpu=4, memory=8 * GiB, network=100)
    return NodeAgent("node-1:9012", executor, limits, clock=lambda: 1000.0, **kwargs)


def test_heartbeat_reports_limits_usage_and_running_jobs(tmp_path):
    async def scenario():
        agent = make_agent(tmp_path)
        try:
            summary = await agent.apply_response_map(
                {
                    "start": [
                        {
                            "job_id": "j1",
                            "operation_id": "op",
                            "command": "sleep 5",
                            "resources": {"cpu": 1.5},
                            "memory_reserve": "1Gi",
                        },
                        {
                            "job_id": "j2",
                            "operation_id": "op",
                            "command": "sleep 5",
                            "memory_reserve": "512Mi",
                            "job_proxy_memory_reserve": "64Mi",
                        },
                    ]
                }
            )
            assert summary["started"] == ["j1", "j2"]
            heartbeat = agent.build_heartbeat()
            json.dumps(heartbeat)  # plain, serialisable
            return heartbeat
        finally:
            await agent.shutdown()

    heartbeat = run(scenario())
    assert heartbeat["node_address"] == "node-1:9012"
    assert heartbeat["sequence"] == 1 and heartbeat["time"] == 1000.0
    assert heartbeat["resource_limits"]["memory"] == 8 * GiB and heartbeat["resource_limits"]["cpu"] == 4
    usage = heartbeat["resource_usage"]
    assert usage["user_slots"] == 2 and usage["cpu"] == 1.5
    assert usage["memory"] == GiB + 512 * 2**20 + 64 * 2**20
    assert heartbeat["memory"]["limit"] == 8 * GiB
    jobs = {job["job_id"]: job for job in heartbeat["running_jobs"]}
    assert set(jobs) == {"j1", "j2"}
    assert jobs["j1"]["phase"] == "running" and jobs["j1"]["state"] == "running"
    assert "user_job/max_memory" in jobs["j1"]["statistics"]
    assert heartbeat["finished_jobs"] == []


def test_running_entries_report_memory_never_below_the_reserve_and_statistics_at_the_backoff(tmp_path):
    """A running job's entry reports its measured memory, never less than its reserve (YTsaurus's job proxy), so a
    job below its reserve sends the same entry every heartbeat; the running jobs' statistics go in one heartbeat
    every ``running_statistics_backoff`` seconds of the agent's clock (YTsaurus's
    ``running_job_statistics_sending_backoff``), the first heartbeat included."""
    now = [1000.0]
    executor = JobExecutor(
        tmp_path / "slots", memory_sample_period=0.05, memory_meter="psutil", abort_grace=0.5
    )
    limits = vector(user_slots=4, cpu=4, memory=8 * GiB, network=100)
    agent = NodeAgent("node-1:9012", executor, limits, clock=lambda: now[0], running_statistics_backoff=30.0)
    measured = {"below": 100 * 2**20, "above": 3 * GiB, "unmeasured": 0.0}
    executor.memory_usage = measured.__getitem__  # the meter's samples, fixed

    async def scenario():
        try:
            start = [
                {"job_id": job_id, "operation_id": "op", "command": "sleep 30", "memory_reserve": "1Gi"}
                for job_id in measured
            ]
            await agent.apply_heartbeat_response(start=start)
            beats = []
            for moment in (1000.0, 1001.0, 1029.0, 1030.0, 1031.0):
                now[0] = moment
                beats.append({entry["job_id"]: entry for entry in agent.build_heartbeat()["running_jobs"]})
            reserves = {job_id: float(executor.spec(job_id).resources[MEMORY]) for job_id in measured}
            return beats, reserves
        finally:
            await agent.shutdown()

    beats, reserves = run(scenario())
    assert all(reserve >= GiB for reserve in reserves.values())
    for entries in beats:
        assert entries["below"]["memory_usage"] == reserves["below"]
        assert entries["above"]["memory_usage"] == 3 * GiB
        assert entries["unmeasured"]["memory_usage"] == 0
    with_statistics = [
        sorted(job for job, entry in entries.items() if entry["statistics"]) for entries in beats
    ]
    assert with_statistics == [sorted(measured), [], [], sorted(measured), []]
    assert "time/total" in beats[3]["below"]["statistics"]
    steady = [
        {key: value for key, value in entries["below"].items() if key != "phase"} for entries in beats[1:3]
    ]
    assert steady[0] == steady[1], "the same entry while nothing the scheduler reads moved"


def test_a_negative_statistics_backoff_is_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        make_agent(tmp_path, running_statistics_backoff=-1.0)
    assert info.value.path == "running_statistics_backoff"


def test_finished_reports_are_resent_until_acknowledged(tmp_path):
    async def scenario():
        agent = make_agent(tmp_path)
        try:
            await agent.apply_heartbeat_response(
                start=[{"job_id": "j1", "operation_id": "op", "command": "echo out; echo err >&2; exit 2"}]
            )
            assert await agent.wait_for_heartbeat_needed(10), "a finished job asks for an extra heartbeat"
            first = agent.build_heartbeat()
            second = agent.build_heartbeat()  # the scheduler did not answer: the report is sent again
            assert not agent.heartbeat_needed.is_set()
            # A re-sent response that starts j1 again must not re-run it.
            again = await agent.apply_heartbeat_response(
                start=[{"job_id": "j1", "operation_id": "op", "command": "exit 0"}]
            )
            summary = await agent.apply_heartbeat_response(acknowledge=["j1", "unknown"])
            third = agent.build_heartbeat()
            return first, second, again, summary, third
        finally:
            await agent.shutdown()

    first, second, again, summary, third = run(scenario())
    assert [r["job_id"] for r in first["finished_jobs"]] == ["j1"]
    report = first["finished_jobs"][0]
    assert report["state"] == "failed" and report["exit_code"] == 2
    assert report["stderr"] == "err\n" and report["address"] == "node-1:9012"
    assert report["statistics"]["time/exec"] >= 0
    assert second["finished_jobs"] == first["finished_jobs"]
    assert second["sequence"] == first["sequence"] + 1
    assert again["skipped"] == ["j1"] and again["started"] == []
    assert summary["acknowledged"] == ["j1"]
    assert third["finished_jobs"] == []
    assert not (tmp_path / "slots" / "j1").exists(), (
        "the job's directory goes once the report is acknowledged"
    )


def test_preempt_and_abort_from_a_response(tmp_path):
    async def scenario():
        agent = make_agent(tmp_path)
        try:
            await agent.apply_heartbeat_response(
                start=[
                    {
                        "job_id": "gentle",
                        "operation_id": "op",
                        "command": INTERRUPTIBLE,
                        "interruption_signal": "SIGINT",
                    },
                    {"job_id": "victim", "operation_id": "op", "command": "sleep 30"},
                ]
            )
            await wait_for_output(agent.executor, "gentle", b"ready")
            summary = await agent.apply_response_map(
                {
                    # a generous timeout: the job exits as soon as it is signalled, and a CPU-starved CI machine
                    # must not turn a slow exit into an abort (the error names what was left running if it does)
                    "preempt": [["gentle", "graceful_preemption", 30]],
                    "abort": [{"job_id": "victim", "reason": "preemption"}, "gone"],
                }
            )
            for job_id in ("gentle", "victim"):
                await agent.executor.wait(job_id, 35)
            return summary, agent.build_heartbeat()
        finally:
            await agent.shutdown()

    summary, heartbeat = run(scenario(), timeout=60)
    assert summary["interrupted"] == ["gentle"] and summary["aborted"] == ["victim"]
    assert summary["skipped"] == ["gone"]
    reports = {r["job_id"]: r for r in heartbeat["finished_jobs"]}
    assert reports["gentle"]["state"] == "completed", json.dumps(reports["gentle"], default=str)
    assert reports["gentle"]["interruption_reason"] == "graceful_preemption"
    assert reports["victim"]["state"] == "aborted" and reports["victim"]["abort_reason"] == "preemption"
    assert heartbeat["running_jobs"] == []
    assert heartbeat["resource_usage"]["user_slots"] == 0


@pytest.mark.parametrize(
    ("response", "path"),
    [
        ({"start": [{"job_id": "a", "operation_id": "op"}]}, "start[0].command"),
        ({"preempt": [["a", "preemption", -1]]}, "preempt[0].timeout"),
        (
            {
                "start": [{"job_id": "ok", "operation_id": "op", "command": "sleep 5"}],
                "abort": [{"reason": "x"}],
            },
            "abort[0].job_id",
        ),
        ({"acknowledge": [5]}, "acknowledge[0]"),
        ({"launch": []}, "response.launch"),
    ],
)
def test_bad_responses_name_the_field_and_change_nothing(tmp_path, response, path):
    async def scenario():
        agent = make_agent(tmp_path)
        try:
            with pytest.raises(ConfigError) as info:
                await agent.apply_response_map(response)
            return info.value.path, agent.executor.running_job_ids()
        finally:
            await agent.shutdown()

    error_path, running = run(scenario())
    assert error_path == path
    assert running == []


def test_detected_limits_use_the_machine_and_overrides():
    limits = detect_resource_limits({"user_slots": 3, "memory": "2Gi"})
    assert limits[USER_SLOTS] == 3 and limits[MEMORY] == 2 * GiB
    assert limits[CPU] >= 1
    with pytest.raises(ConfigError, match=r"resources\.disk"):
        detect_resource_limits({"disk": 1})
