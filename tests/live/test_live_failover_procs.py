"""Scheduler and nodes as separate ``pooltree scheduler`` / ``pooltree node`` processes: kill -9 and restart the
scheduler mid-operation, kill a node and see its job rescheduled, SIGTERM a node (jobs reported at once),
``--config`` loading, token auth, and the CLI's clear errors."""

from __future__ import annotations

import datetime as dt
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import PYTHON, Procs, client, free_port, state, vanilla, yt_cli
from polling import wait_for


def _ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def running_jobs(yt, op_id: str) -> list[dict]:
    return [job for job in yt.list_jobs(op_id)["jobs"] if job["state"] == "running"]


def test_scheduler_killed_and_restarted_mid_operation(tmp_path: Path) -> None:
    """Job 0 finishes while the scheduler is down (its report is re-sent), job 1 is still running at the restart
    (re-attached): the operation completes with the same two jobs and nothing re-run."""
    procs = Procs(tmp_path)
    try:
        port = free_port()
        scheduler, url = procs.scheduler(tmp_path / "data", port)
        node = procs.node(url, "n1")
        yt = client(url)
        command = 'if [ "$YT_JOB_INDEX" = 0 ]; then sleep 0.5; else sleep 7; fi'
        op_id = yt.run_operation(vanilla(command, 2), sync=False).id
        wait_for(lambda: len(running_jobs(yt, op_id)) == 2)
        before = {job["id"] for job in running_jobs(yt, op_id)}
        procs.stop(scheduler, signal.SIGKILL)
        node_log = next(tmp_path.glob("proc-*-node.log"))
        time.sleep(1.5)  # the scheduler stays down while job 0 (0.5 s) finishes: the scenario, not a wait
        wait_for(lambda: "unreachable" in node_log.read_text(), timeout=30)  # the node found it gone
        restarted_at = time.time()
        scheduler, url2 = procs.scheduler(tmp_path / "data", port)
        assert url2 == url
        wait_for(lambda: state(yt, op_id) == "completed", timeout=30)
        jobs = yt.list_jobs(op_id)["jobs"]
        assert {job["id"] for job in jobs} == before
        assert {job["state"] for job in jobs} == {"completed"}
        finished = sorted(_ts(job["finish_time"]) for job in jobs)
        assert finished[0] < restarted_at < finished[1]
        # The node logs its re-registration once it has applied the restarted scheduler's first answer, which
        # can be the very answer that completed the operation (a restart slower than job 1's 7 s, under load):
        # so the operation can be seen completed before the node has logged it.
        wait_for(lambda: "re-registered" in node_log.read_text(), timeout=30)
        assert node.poll() is None
    finally:
        procs.close()


def test_killed_node_jobs_rescheduled_elsewhere(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        _, url = procs.scheduler(tmp_path / "data", 0, "--node-heartbeat-timeout", "2")
        nodes = {name: procs.node(url, name, "user_slots=1,cpu=1,memory=2Gi") for name in ("n1", "n2")}
        yt = client(url)
        wait_for(lambda: len(yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2)
        op_id = yt.run_operation(vanilla("sleep 2", 1), sync=False).id
        first = wait_for(lambda: running_jobs(yt, op_id))[0]
        procs.stop(nodes[first["address"]], signal.SIGKILL)
        wait_for(lambda: state(yt, op_id) == "completed", timeout=30)
        jobs = {job["state"]: job for job in yt.list_jobs(op_id)["jobs"]}
        assert jobs["aborted"]["id"] == first["id"] and jobs["aborted"]["address"] == first["address"]
        assert jobs["completed"]["address"] != first["address"]
    finally:
        procs.close()


def test_sigterm_node_reports_aborted_jobs_at_once(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        _, url = procs.scheduler(tmp_path / "data", 0)
        nodes = {name: procs.node(url, name, "user_slots=1,cpu=1,memory=2Gi") for name in ("n1", "n2")}
        yt = client(url)
        wait_for(lambda: len(yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2)
        op_id = yt.run_operation(vanilla("sleep 30", 1), sync=False).id
        first = wait_for(lambda: running_jobs(yt, op_id))[0]
        assert procs.stop(nodes[first["address"]], signal.SIGTERM) == 0
        # the node heartbeat timeout is 60 s: only the final heartbeat can make this happen within 10 s
        aborted = wait_for(lambda: yt.list_jobs(op_id, job_state="aborted")["jobs"], timeout=10)[0]
        assert aborted["id"] == first["id"]
        job = yt.get_job(op_id, first["id"])
        assert "node_shutdown" in str(job)
        second = wait_for(lambda: running_jobs(yt, op_id), timeout=10)[0]
        assert second["address"] != first["address"]
        yt.abort_operation(op_id)
    finally:
        procs.close()


def test_scheduler_config_file_and_token(tmp_path: Path) -> None:
    config = tmp_path / "trees.yaml"
    config.write_text(
        "pool_trees:\n"
        "  physical:\n"
        "    config: {main_resource: cpu}\n"
        "    pools:\n"
        "      research: {weight: 2, pools: {adhoc: {max_running_operation_count: 3}}}\n"
        "default_pool_tree: physical\n"
    )
    procs = Procs(tmp_path)
    try:
        process = procs.spawn(
            "scheduler", "--data", str(tmp_path / "data"), "--config", str(config),
            "--token-file", str(procs.token_file), "--node-secret-file", str(procs.node_secret_file),
        )  # fmt: skip
        url = procs.read_until(process, "listening on ").split()[-1]
        procs.spawn(
            "node", "--scheduler", url, "--address", "n1", "--root", str(tmp_path / "n1"),
            "--node-secret-file", str(procs.node_secret_file),
            "--resources", "user_slots=1,cpu=1,memory=1Gi", "--tags", "ssd,fast",
        )  # fmt: skip
        yt = client(url)
        assert yt.get("//sys/pool_trees/@default_tree") == "physical"
        assert float(yt.get("//sys/pool_trees/physical/research/@weight")) == 2.0
        assert yt.get("//sys/pool_trees/physical/research/adhoc/@max_running_operation_count") == 3
        op_id = yt.run_operation(vanilla("true", 1, pool="adhoc"), sync=False).id
        wait_for(lambda: state(yt, op_id) == "completed", timeout=20)
        anonymous = yt_cli(url, tmp_path, "list", "//sys/pool_trees", check=False, token=None)
        assert anonymous.returncode != 0 and "failed to authenticate" in anonymous.stderr
    finally:
        procs.close()


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "pooltree.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_cli_errors_are_clear(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for command in (
            ["scheduler", "--data", str(tmp_path)],
            ["local", "--data", str(tmp_path), "--nodes", "0"],
        ):
            result = run_cli(*command, "--port", str(port))
            assert result.returncode == 1
            assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
            assert "Traceback" not in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("physical:\n  pools:\n    a: {weight: -2}\n")
    result = run_cli("scheduler", "--data", str(tmp_path), "--config", str(bad))
    assert result.returncode == 1 and "pool_trees.physical.pools.a.weight" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("cpu=four", "--resources.cpu"),
        ("cpu", "name=value"),
        ("disk=3", "unknown resource 'disk'"),
        ("memory=lots", "--resources.memory"),
    ],
)
def test_bad_node_resources(tmp_path: Path, resources: str, message: str) -> None:
    result = run_cli(
        "node", "--scheduler", "http://127.0.0.1:9", "--root", str(tmp_path), "--resources", resources
    )
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    if resources == "cpu=four":  # the same validation runs in `pooltree local` before any child starts
        result = run_cli("local", "--data", str(tmp_path), "--node-resources", resources)
        assert result.returncode == 1 and message in result.stderr, result.stderr
