"""Live scheduling over real agents: preemption (abort and graceful interruption), memory limits, PostgreSQL
revival."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from job_python import JOB_PYTHON
from live_cluster import Cluster, auth_headers
from polling import wait_for
from test_live_service import vanilla

FAST_PREEMPTION = {
    "fair_share_starvation_timeout": "200ms",
    "fair_share_aggressive_starvation_timeout": "200ms",
    "preemptive_scheduling_backoff": "100ms",
    "allocation_preemption_timeout": "2s",
}


def _two_pools(client: ytw.YtClient) -> None:
    client.set("//sys/pool_trees/default/@config", FAST_PREEMPTION)
    client.create("scheduler_pool", attributes={"name": "a", "pool_tree": "default"})
    client.create("scheduler_pool", attributes={"name": "b", "pool_tree": "default"})


def test_starving_operation_preempts_with_abort(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, slots=2)
    try:
        client = cluster.client()
        _two_pools(client)
        greedy = client.run_operation(vanilla("sleep 60", 2, pool="a"), sync=False)
        wait_for(lambda: len(client.list_jobs(greedy.id, job_state="running")["jobs"]) == 2)
        starving = client.run_operation(vanilla("sleep 60", 1, pool="b"), sync=False)
        wait_for(lambda: client.list_jobs(starving.id, job_state="running")["jobs"], timeout=20)
        aborted = wait_for(lambda: client.list_jobs(greedy.id, job_state="aborted")["jobs"])
        assert len(aborted) == 1 and aborted[0]["abort_reason"] == "preemption"
        metrics = httpx.get(f"{cluster.url}/metrics", headers=auth_headers(cluster.token), timeout=10).text
        assert 'pooltree_preemptions_total{reason="preemption",tree="default"} 1.0' in metrics
        progress = client.get_operation(greedy.id)["brief_progress"]["jobs"]
        assert progress["running"] == 1 and progress["pending"] == 1 and progress["aborted"] == 1
        client.abort_operation(greedy.id)
        client.abort_operation(starving.id)
    finally:
        cluster.close()


def test_graceful_interruption_with_signal(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, slots=2)
    try:
        client = cluster.client()
        _two_pools(client)
        # Each job says it is ready once its trap is installed: "running" only means the process exists, and a
        # signal arriving before the trap would end the job differently.
        command = "trap 'echo interrupted >&2; exit 0' INT; touch ready; sleep 60 & wait"  # "ready" lands in the job's own sandbox: the only place outside its tmp a job may write
        greedy = client.run_operation(vanilla(command, 2, pool="a", interruption_signal="SIGINT"), sync=False)
        wait_for(lambda: len(client.list_jobs(greedy.id, job_state="running")["jobs"]) == 2)
        wait_for(lambda: len(list(tmp_path.glob("nodes/*/*/sandbox/ready"))) == 2)
        starving = client.run_operation(vanilla("sleep 60", 1, pool="b"), sync=False)
        wait_for(lambda: client.list_jobs(starving.id, job_state="running")["jobs"], timeout=20)
        finished = wait_for(
            lambda: [j for j in client.list_jobs(greedy.id)["jobs"] if j["state"] != "running"]
        )
        assert len(finished) == 1
        assert finished[0].get("interruption_reason") == "preemption", finished[0]
        assert client.get_job_stderr(greedy.id, finished[0]["id"]).read() == b"interrupted\n"
        # an interrupted vanilla job is not done: the operation still waits for it
        assert client.get_operation(greedy.id)["brief_progress"]["jobs"]["pending"] == 1
        client.abort_operation(greedy.id)
        client.abort_operation(starving.id)
    finally:
        cluster.close()


def test_job_over_memory_limit_fails(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        client = cluster.client()
        command = f"{JOB_PYTHON} -c 'import time; x = b\"x\" * (300 * 1024 * 1024); time.sleep(5)'"
        builder = (
            ytw.VanillaSpecBuilder()
            .begin_task("main")
            .command(command)
            .job_count(1)
            .memory_limit(100 * 1024 * 1024)
            .end_task()
            .spec({"max_failed_job_count": 1})
        )
        op_id = client.run_operation(builder, sync=False).id
        wait_for(lambda: client.get_operation(op_id, attributes=["state"])["state"] == "failed", timeout=30)
        job = client.list_jobs(op_id, job_state="failed")["jobs"][0]
        assert job["error"]["message"] == "Memory limit exceeded"
        error = client.get_operation(op_id)["result"]["error"]
        assert error["inner_errors"][0]["message"] == "Memory limit exceeded"
    finally:
        cluster.close()
