"""The live scheduler end to end: real uvicorn on 127.0.0.1, real SQLite, real NodeAgents running /bin/sh jobs,
and the official client (``yt.wrapper.YtClient`` and the ``yt`` CLI)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
import yt.wrapper as ytw

from pooltree.node.service import NODE_SECRET_HEADER

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import Cluster, Node, auth_headers
from polling import wait_for

ORCHID = "//sys/scheduler/orchid/scheduler/pool_trees"


def vanilla(command: str, job_count: int = 1, **spec: object) -> ytw.VanillaSpecBuilder:
    builder = ytw.VanillaSpecBuilder().begin_task("main").command(command).job_count(job_count).end_task()
    if spec:
        builder = builder.spec(spec)
    return builder


def state(client: ytw.YtClient, op_id: str) -> str:
    return str(client.get_operation(op_id, attributes=["state"])["state"])


def test_vanilla_runs_jobs_with_client_and_orchid_and_metrics(cluster: Cluster) -> None:
    client = cluster.client()
    op = client.run_operation(vanilla("echo out; echo err-$YT_JOB_INDEX >&2", 3), sync=False)
    op.wait(timeout=30_000)
    info = client.get_operation(op.id)
    assert info["state"] == "completed"
    assert info["brief_progress"]["jobs"]["completed"] == 3
    assert info["type"] == "vanilla" and info["start_time"].endswith("Z")
    assert info["events"][0]["state"] == "starting"
    jobs = client.list_jobs(op.id)["jobs"]
    assert len(jobs) == 3 and {j["state"] for j in jobs} == {"completed"}
    assert {j["address"] for j in jobs} == {"node0"}
    job = client.get_job(op.id, jobs[0]["id"])
    assert job["statistics"]["user_job/memory_limit"] == 512 * 1024**2
    # the reserve comes from the memory digest: default factor 0.5 of memory_limit; base job proxy estimate
    assert job["statistics"]["user_job/memory_reserve"] == 256 * 1024**2
    assert job["statistics"]["job_proxy/estimated_memory"] == 64 * 1024**2
    stderr = client.get_job_stderr(op.id, job["id"]).read()
    assert stderr == f"err-{job['job_index']}\n".encode()
    pools = client.get(f"{ORCHID}/default/pools")
    assert "<Root>" in pools and "fair_share_ratio" in pools["<Root>"]
    listed = client.list_operations()["operations"]
    assert [o["id"] for o in listed] == [op.id]
    metrics = httpx.get(f"{cluster.url}/metrics", headers=auth_headers(cluster.token), timeout=10).text
    assert 'pooltree_pool_fair_share_ratio{pool="<Root>",tree="default"}' in metrics
    assert "pooltree_pool_running_operations" in metrics and "pooltree_nodes 1.0" in metrics


def test_cli_vanilla_success_and_failure(cluster: Cluster) -> None:
    done = cluster.cli("vanilla", "--tasks", '{main={command="echo ok"; job_count=2}}')
    assert "completed" in done.stderr
    failed = cluster.cli(
        "vanilla",
        "--tasks",
        '{main={command="echo boom >&2; exit 3"; job_count=1}}',
        "--spec",
        "{max_failed_job_count=2}",
        check=False,
    )
    assert failed.returncode != 0
    assert "Failed jobs limit exceeded" in failed.stderr
    assert "Process exited with code 3" in failed.stderr
    assert "boom" in failed.stderr
    client = cluster.client()
    failed_ops = client.list_operations(state="failed")["operations"]
    assert len(failed_ops) == 1
    op = client.get_operation(failed_ops[0]["id"])
    assert op["result"]["error"]["message"] == "Failed jobs limit exceeded"
    assert op["brief_progress"]["jobs"]["failed"] == 2
    failed_jobs = client.list_jobs(op["id"], job_state="failed")["jobs"]
    assert len(failed_jobs) == 2 and failed_jobs[0]["error"]["message"] == "User job failed"
    listed = cluster.cli("list-jobs", op["id"]).stdout
    assert failed_jobs[0]["id"] in listed and '"state" = "failed"' in listed
    assert cluster.cli("get-job-stderr", failed_jobs[0]["id"], op["id"]).stdout == "boom\n"
    assert op["id"] in cluster.cli("list-operations", "--state", "failed").stdout


def test_pending_abort_suspend_and_parameters(cluster: Cluster) -> None:
    client = cluster.client()
    client.create(
        "scheduler_pool",
        attributes={"name": "small", "pool_tree": "default", "max_running_operation_count": 1},
    )
    client.create("scheduler_pool", attributes={"name": "other", "pool_tree": "default"})
    # jobs that never end by themselves: under load the steps below can take longer than a job would run, and
    # the client's abort_operation silently does nothing to an operation that has completed meanwhile
    first = client.run_operation(vanilla("sleep 1000", 1, pool="small"), sync=False)
    second = client.run_operation(vanilla("sleep 1000", 1, pool="small"), sync=False)
    wait_for(lambda: state(client, first.id) == "running")
    assert state(client, second.id) == "pending"
    shown = cluster.cli("get-operation", second.id).stdout
    assert '"state" = "pending"' in shown and "Max running operation count" in shown
    wait_for(lambda: client.get_operation(first.id)["brief_progress"]["jobs"]["running"] == 1)
    orchid_ops = wait_for(lambda: client.get(f"{ORCHID}/default/operations"))
    assert orchid_ops[first.id]["pool"] == "small" and "fair_share_ratio" in orchid_ops[first.id]
    # The orchid's pool view is refreshed by fair-share updates: under load it may lag the operation's state.
    wait_for(lambda: client.get(f"{ORCHID}/default/pools/small/pending_operation_count") == 1)
    metrics = httpx.get(f"{cluster.url}/metrics", headers=auth_headers(cluster.token), timeout=10).text
    assert 'pooltree_pool_pending_operations{pool="small",tree="default"} 1.0' in metrics
    assert f'pooltree_operation_usage_ratio{{operation="{first.id}",tree="default"}}' in metrics

    cluster.cli("suspend-op", first.id)
    assert client.get_operation(first.id, attributes=["suspended"])["suspended"]
    cluster.cli("resume-op", first.id)

    with pytest.raises(ytw.YtResponseError) as bad:
        client.update_operation_parameters(first.id, {"weight": -1})
    assert "weight" in str(bad.value)
    client.update_operation_parameters(second.id, {"pool": "other"})
    wait_for(lambda: state(client, second.id) == "running")
    params = client.get_operation(second.id)["runtime_parameters"]["scheduling_options_per_pool_tree"]
    assert params["default"]["pool"] == "other"

    cluster.cli("abort-op", first.id)
    info = client.get_operation(first.id)
    assert info["state"] == "aborted" and info["result"]["error"]["code"] != 0
    node = cluster.nodes[0]
    wait_for(lambda: not _running_jobs(node, first.id))
    client.abort_operation(second.id)
    wait_for(lambda: not node.agent.executor.running_job_ids())
    jobs = client.list_jobs(first.id)["jobs"]
    assert jobs and all(j["state"] == "aborted" for j in jobs)


def _running_jobs(node: Node, operation_id: str) -> list[str]:
    executor = node.agent.executor
    return [
        j
        for j in executor.running_job_ids()
        if (spec := executor.spec(j)) and spec.operation_id == operation_id
    ]


def test_revival_keeps_running_jobs(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        client = cluster.client()
        op = client.run_operation(vanilla("sleep 2; echo done", 2), sync=False)
        node = cluster.nodes[0]
        wait_for(lambda: len(_running_jobs(node, op.id)) == 2)
        before = set(_running_jobs(node, op.id))
        client.update_operation_parameters(op.id, {"weight": 3})
        cluster.restart_scheduler()
        client = cluster.client()
        # revived, and its jobs may already have ended: the node reports them to the restarted scheduler at its
        # first heartbeat, which can come before this read when the restart is slow (seen at load ~11); that the
        # jobs were kept, not run again, is checked below by their ids
        assert state(client, op.id) in ("running", "pending", "completed")
        params = client.get_operation(op.id)["runtime_parameters"]["scheduling_options_per_pool_tree"]
        assert float(params["default"]["weight"]) == 3.0
        assert "reviving" in [e["state"] for e in client.get_operation(op.id)["events"]]
        wait_for(lambda: state(client, op.id) == "completed", timeout=30)
        jobs = client.list_jobs(op.id)["jobs"]
        assert {j["id"] for j in jobs} == before
        assert all(j["state"] == "completed" for j in jobs)
        assert client.get_job_stderr(op.id, jobs[0]["id"]).read() == b""
    finally:
        cluster.close()


def test_revival_collects_jobs_finished_while_down(tmp_path: Path, store_url: str) -> None:
    cluster = Cluster(tmp_path, db=store_url)
    try:
        client = cluster.client()
        op = client.run_operation(vanilla("sleep 1; echo done >&2", 2), sync=False)
        node = cluster.nodes[0]
        wait_for(lambda: len(_running_jobs(node, op.id)) == 2)
        before = set(_running_jobs(node, op.id))
        cluster.restart_scheduler(
            while_down=lambda: wait_for(lambda: not node.agent.executor.running_job_ids())
        )
        client = cluster.client()
        wait_for(lambda: state(client, op.id) == "completed", timeout=30)
        jobs = client.list_jobs(op.id)["jobs"]
        assert {j["id"] for j in jobs} == before
        assert client.get_job_stderr(op.id, jobs[1]["id"]).read() == b"done\n"
        assert client.get_operation(op.id)["brief_progress"]["jobs"]["completed"] == 2
    finally:
        cluster.close()


def test_node_timeout_reschedules(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=2, slots=1, node_heartbeat_timeout=1.0)
    try:
        client = cluster.client()
        op = client.run_operation(vanilla("sleep 60", 1), sync=False)
        wait_for(lambda: client.list_jobs(op.id, job_state="running")["jobs"])
        first = client.list_jobs(op.id, job_state="running")["jobs"][0]
        silent = next(n for n in cluster.nodes if n.agent.address == first["address"])
        silent.paused = True
        wait_for(
            lambda: [
                j for j in client.list_jobs(op.id, job_state="running")["jobs"] if j["id"] != first["id"]
            ],
            timeout=20,
        )
        lost = client.get_job(op.id, first["id"])
        assert lost["state"] == "aborted" and lost["abort_reason"] == "node_offline"
        assert client.get_operation(op.id)["brief_progress"]["jobs"]["lost"] == 1
        silent.paused = False
        # the revived node still runs the old job: the scheduler tells it to abort it
        wait_for(lambda: not silent.agent.executor.running_job_ids(), timeout=20)
        client.abort_operation(op.id)
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "heartbeat"),
        (b"[]", "heartbeat"),
        (b"{}", "node_address"),
        (b'{"node_address": "n", "resource_limits": 5}', "resource_limits"),
        (b'{"node_address": "n", "resource_limits": {"cpu": -1}}', "resource_limits"),
        (
            b'{"node_address": "n", "resource_limits": {}, "running_jobs": [{"job_id": 1}]}',
            "running_jobs[0].job_id",
        ),
        (
            b'{"node_address": "n", "resource_limits": {}, "finished_jobs": [{"job_id": "j", "operation_id": "o",'
            b' "state": "lost"}]}',
            "finished_jobs[0].state",
        ),
        (b'{"node_address": "n", "resource_limits": {}, "tags": "gpu"}', "tags"),
    ],
)
def test_malformed_heartbeats_are_400_yt_errors(cluster: Cluster, body: bytes, field: str) -> None:
    response = httpx.post(
        f"{cluster.url}/internal/node_heartbeat",
        content=body,
        headers={NODE_SECRET_HEADER: cluster.node_secret},
        timeout=10,
    )
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["code"] != 0 and error["attributes"]["field"].startswith(field.split("[")[0])
    assert error["attributes"]["field"] == field or field == "heartbeat" or field == "resource_limits"


def test_bad_requests_and_token(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path, nodes=1, token="secret-token-0123456789", node_secret="node-secret-0123456789"
    )
    try:
        assert wait_for(lambda: cluster.nodes[0].heartbeats > 0)
        response = httpx.post(f"{cluster.url}/internal/node_heartbeat", json={}, timeout=10)
        assert response.status_code == 401
        user_token = {"Authorization": "OAuth secret-token-0123456789"}
        response = httpx.post(
            f"{cluster.url}/internal/node_heartbeat", json={}, headers=user_token, timeout=10
        )
        assert response.status_code == 401  # a user token, even root's, is no node credential
        client = cluster.client()
        with pytest.raises(ytw.YtResponseError) as error:
            client.run_operation(
                ytw.VanillaSpecBuilder().begin_task("main").command("true").job_count(0).end_task()
            )
        assert "job_count" in str(error.value)
        with pytest.raises(ytw.YtResponseError) as missing:
            client.get_operation("1-2-3-4")
        assert missing.value.error["code"] == 1915
        op = client.run_operation(vanilla("true", 1), sync=True)
        assert state(client, op.id) == "completed"
    finally:
        cluster.close()


def test_a_running_job_shows_its_statistics_so_far(tmp_path: Path) -> None:
    """A running job's statistics reach ``get_job`` and ``list_jobs`` while it runs, its own (descriptor 5)
    included: the node sends its running jobs' statistics every ``running_statistics_backoff`` (YTsaurus's
    ``running_job_statistics_sending_backoff``; short here) and the scheduler keeps the last ones."""
    cluster = Cluster(tmp_path, statistics_backoff=0.2)
    try:
        client = cluster.client()
        op = client.run_operation(vanilla("echo '{rows={rejected=3}};' >&5; sleep 60"), sync=False)

        def running_job() -> dict | None:
            jobs = client.list_jobs(op.id)["jobs"]
            if not jobs or jobs[0]["state"] != "running":
                return None
            job = client.get_job(op.id, jobs[0]["id"])
            rejected = job["statistics"].get("custom/rows/rejected")  # a YsonDouble: compared as a float
            return job if rejected is not None and float(rejected) == 3.0 else None

        job = wait_for(running_job, timeout=30)
        assert job["state"] == "running"
        assert job["statistics"]["time/total"] >= 0
        listed = client.list_jobs(op.id)["jobs"][0]
        assert float(listed["statistics"]["custom/rows/rejected"]) == 3.0
        client.abort_operation(op.id)
    finally:
        cluster.close()
