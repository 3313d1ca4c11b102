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
