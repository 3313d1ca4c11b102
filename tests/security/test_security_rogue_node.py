"""A rogue node: nodes speak only for their own jobs.

Two real node identities (the cluster secret, each its own address and its own host on loopback): node-0 runs a
job; node-1 reports that job finished (completed, with forged stderr) and running. The reports are refused for
that job, logged at WARNING with both addresses, and node-0's job keeps running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yt.wrapper as ytw

from pooltree.node.service import NODE_SECRET_HEADER
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

SECRET = "ptns-rogue-test-" + "ab" * 16
TOKEN = "ytct-0000-" + "cd" * 16
LIMITS = {"user_slots": 1, "cpu": 1, "memory": 1 << 30}
NODE0 = ("node-0:9012", "127.0.0.2")
NODE1 = ("node-1:9012", "127.0.0.3")


def _heartbeat(url: str, node: tuple[str, str], **jobs: list[dict[str, Any]]) -> dict[str, Any]:
    address, source = node
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as client:
        answer = client.post(
            f"{url}/internal/node_heartbeat",
            json={"node_address": address, "resource_limits": LIMITS, **jobs},
            headers={NODE_SECRET_HEADER: SECRET},
        )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _scheduler(tmp_path: Path, serve: Callable[[object], str]) -> tuple[SchedulerService, str, ytw.YtClient]:
    """A scheduler with pool tree ``default``, served on loopback, and root's client."""
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN, node_secret=SECRET
    )
    url = serve(service.app)
    client = ytw.YtClient(proxy=url, token=TOKEN, config={"proxy": {"enable_proxy_discovery": False}})
    client.create("scheduler_pool_tree", "//sys/pool_trees/default")
    return service, url, client


def test_a_node_cannot_finish_or_claim_another_nodes_job(
    tmp_path: Path, serve: Callable[[object], str], caplog: pytest.LogCaptureFixture
) -> None:
    service, url, client = _scheduler(tmp_path, serve)
    spec = ytw.VanillaSpecBuilder().task("main", {"command": "sleep 1000", "job_count": 1})
    operation_id = client.run_operation(spec, sync=False).id

    started = _heartbeat(url, NODE0)["start"]
    assert len(started) == 1
    job_id = started[0]["job_id"]
    running = [{"job_id": job_id, "operation_id": operation_id, "resource_usage": started[0]["resources"]}]
    forged = {
        "job_id": job_id,
        "operation_id": operation_id,
        "state": "completed",
        "exit_code": 0,
        "start_time": 1.0,
        "finish_time": 2.0,
        "stderr": "forged by node-1",
    }
    requests = 0
    with caplog.at_level(logging.WARNING, logger="pooltree.server.live.jobs"):
        for _ in range(3):
            rogue = _heartbeat(url, NODE1, running_jobs=running, finished_jobs=[forged])
            requests += 1
            assert {"job_id": job_id, "reason": "unknown_job"} in rogue["abort"]  # not node-1's job
            assert rogue["start"] == []
        own = _heartbeat(url, NODE0, running_jobs=running)
    assert own["abort"] == [] and own["start"] == []
    assert requests == 3

    job = service.scheduler.jobs[job_id]
    assert job.state == "running" and job.address == NODE0[0] and job.stderr in ("", None)
    assert client.get_operation(operation_id, attributes=["state"])["state"] == "running"
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and job_id in r.getMessage()
    ]
    assert warnings and all(NODE0[0] in m and NODE1[0] in m for m in warnings)
    assert any("completed" in m for m in warnings) and any("running" in m for m in warnings)

    # node-0's own report completes the job, with its stderr
    done = dict(forged, stderr="node-0's own stderr")
    assert _heartbeat(url, NODE0, finished_jobs=[done])["acknowledge"] == [job_id]
    stored = service.store.get_job(operation_id, job_id)
    assert stored is not None and stored.state == "completed" and stored.address == NODE0[0]
    assert client.get_operation(operation_id, attributes=["state"])["state"] == "completed"


def test_a_report_naming_the_wrong_operation_is_refused(
    tmp_path: Path, serve: Callable[[object], str], caplog: pytest.LogCaptureFixture
) -> None:
    service, url, client = _scheduler(tmp_path, serve)
    spec = ytw.VanillaSpecBuilder().task("main", {"command": "sleep 1000", "job_count": 1})
    first = client.run_operation(spec, sync=False).id
    second = client.run_operation(spec, sync=False).id
    started = _heartbeat(url, NODE0)["start"]
    assert len(started) == 1 and started[0]["operation_id"] in (first, second)
    job_id = started[0]["job_id"]
    other = second if started[0]["operation_id"] == first else first
    wrong = {"job_id": job_id, "operation_id": other, "state": "failed", "exit_code": 1}
    with caplog.at_level(logging.WARNING, logger="pooltree.server.live.jobs"):
        _heartbeat(url, NODE0, finished_jobs=[wrong])
    assert service.scheduler.jobs[job_id].state == "running"
    assert any(other in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
