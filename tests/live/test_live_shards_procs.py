"""kill -9 with node shards: a real ``pooltree scheduler --node-shards 2`` with real ``pooltree node`` processes
(one on each shard) running jobs. A SIGKILLed shard process is started again, its nodes heartbeat to the leader
meanwhile, and every job runs exactly once; a SIGKILLed leader takes its shards with it, and the restarted
scheduler re-attaches the running jobs and keeps every operation it acknowledged. Both start while the shards
answer their idle nodes' heartbeats themselves (proven empty by the leader), so the operations' starts must
reach the nodes through the shards' state generation."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import NODE_HEADERS, ROOT_TOKEN, Procs, client, free_port, slotless_heartbeat, state, vanilla
from polling import wait_for

from pooltree.node import wire
from pooltree.shards.host import shard_of

NODES = ("n1", "n2")  # on shards 1 and 0 of 2


def _shard_pids(scheduler_pid: int) -> set[int]:
    """The scheduler's shard processes: its spawned children that listen on a port (the forecast's worker
    processes are spawned children too, but listen nowhere)."""
    try:
        children = psutil.Process(scheduler_pid).children()
    except psutil.NoSuchProcess:
        return set()
    pids = set()
    for child in children:
        try:
            listening = any(c.status == psutil.CONN_LISTEN for c in child.net_connections(kind="tcp"))
            if listening and any("spawn_main" in part for part in child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids


def _jobs(yt, op_id: str) -> list[dict]:
    return yt.list_jobs(op_id)["jobs"]


def _running(yt, op_id: str) -> list[dict]:
    return [job for job in _jobs(yt, op_id) if job["state"] == "running"]


def _per_shard(url: str, metric: str) -> dict[str, float]:
    """A per-shard counter so far (``/metrics``)."""
    text = httpx.get(url + "/metrics", headers={"Authorization": f"OAuth {ROOT_TOKEN}"}, timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            out[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out


def _carried(url: str) -> dict[str, float]:
    """Heartbeats each shard carried to the leader so far."""
    return _per_shard(url, "pooltree_node_shard_heartbeats_total")


def _seen(url: str) -> dict[str, float]:
    """Heartbeats each shard took: carried to the leader or answered itself."""
    local = _per_shard(url, "pooltree_node_shard_local_answers_total")
    return {shard: count + local.get(shard, 0.0) for shard, count in _carried(url).items()}


def _counter(url: str, metric: str) -> float:
    """A counter without labels so far (``/metrics``)."""
    text = httpx.get(url + "/metrics", headers={"Authorization": f"OAuth {ROOT_TOKEN}"}, timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(metric + " "))


def _answered_by_shards(url: str) -> float:
    """Heartbeats the shards answered themselves (proven empty by the leader), as far as the leader heard."""
    return sum(_per_shard(url, "pooltree_node_shard_local_answers_total").values())


SHARD_MODES = [[], ["--shard-starts"]]
"""The shards answer proven-empty heartbeats only, or also run their nodes' scheduling passes."""


@pytest.mark.parametrize("mode", SHARD_MODES, ids=["verdicts", "starts"])
def test_a_killed_shard_comes_back_and_no_job_is_lost_or_run_twice(tmp_path: Path, mode: list[str]) -> None:
    assert {shard_of(name, 2) for name in NODES} == {0, 1}
    procs = Procs(tmp_path)
    try:
        scheduler, url = procs.scheduler(tmp_path / "data", 0, "--node-shards", "2", *mode)
        wait_for(lambda: len(_shard_pids(scheduler.pid)) == 2, timeout=60)
        for name in NODES:
            procs.node(url, name)
        yt = client(url)
        wait_for(lambda: len(yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)
        # idle nodes: the shards answer their heartbeats themselves; the start below must reach them anyway
        wait_for(lambda: _answered_by_shards(url) > 0, timeout=30)
        assert _counter(url, "pooltree_node_shard_proofs_made_total") >= 1  # what the shards answered by
        op_id = yt.run_operation(vanilla("sleep 6", 4), sync=False).id
        running = wait_for(lambda: len(_running(yt, op_id)) == 4 and _running(yt, op_id), timeout=30)
        assert {job["address"] for job in running} == set(NODES)
        wait_for(lambda: all(_carried(url).get(shard, 0) > 0 for shard in ("0", "1")), timeout=30)
        if mode:  # the shards ran their nodes' scheduling passes
            assert all(_per_shard(url, "pooltree_node_shard_passes_total").get(s, 0) > 0 for s in ("0", "1"))
        before = _shard_pids(scheduler.pid)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: len(_shard_pids(scheduler.pid)) == 2 and victim not in _shard_pids(scheduler.pid),
            timeout=60,
        )
        second = yt.run_operation(
            vanilla("true", 2), sync=False
        ).id  # acknowledged while a shard is down or new
        wait_for(lambda: state(yt, op_id) == "completed", timeout=60)
        wait_for(lambda: state(yt, second) == "completed", timeout=60)
        jobs = _jobs(yt, op_id)
        assert {job["id"] for job in jobs} == {job["id"] for job in running}  # none lost, none started again
        assert {job["state"] for job in jobs} == {"completed"}
        assert len(_jobs(yt, second)) == 2
        seen = _seen(url)  # both shards take their nodes' heartbeats again (carried or answered themselves)
        wait_for(lambda: all(_seen(url)[shard] > seen[shard] for shard in ("0", "1")), timeout=30)
        log = "".join(path.read_text() for path in tmp_path.glob("proc-*-scheduler.log"))
        assert "ended (exit code -9)" in log
        assert scheduler.poll() is None
    finally:
        procs.close()


@pytest.mark.parametrize("mode", SHARD_MODES, ids=["verdicts", "starts"])
def test_a_killed_leader_takes_its_shards_and_the_restart_keeps_every_job(
    tmp_path: Path, mode: list[str]
) -> None:
    procs = Procs(tmp_path)
    try:
        port = free_port()
        scheduler, url = procs.scheduler(tmp_path / "data", port, "--node-shards", "2", *mode)
        wait_for(lambda: len(_shard_pids(scheduler.pid)) == 2, timeout=60)
        shards = _shard_pids(scheduler.pid)
        for name in NODES:
            procs.node(url, name)
        yt = client(url)
        wait_for(lambda: len(yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)
        wait_for(lambda: _answered_by_shards(url) > 0, timeout=30)  # shards answer the idle nodes
        # job 0 ends soon (while no scheduler runs, or just after); the others outlive the restart. Job 0 runs 3 s,
        # not 0.5: with shards the two nodes' heartbeats need not fall together, and all four must be seen
        # running at once (a node's jobs can start a heartbeat period after the other's).
        command = 'if [ "$YT_JOB_INDEX" = 0 ]; then sleep 3; else sleep 8; fi'
        op_id = yt.run_operation(vanilla(command, 4), sync=False).id
        running = wait_for(lambda: len(_running(yt, op_id)) == 4 and _running(yt, op_id), timeout=30)
        queued = yt.run_operation(vanilla("true", 2), sync=False).id  # acknowledged just before the kill
        procs.stop(scheduler, signal.SIGKILL)
        wait_for(lambda: not any(psutil.pid_exists(pid) and _alive(pid) for pid in shards), timeout=20)
        time.sleep(1.0)  # job 0 finishes while no scheduler runs; its report is sent again
        scheduler, url2 = procs.scheduler(tmp_path / "data", port, "--node-shards", "2", *mode)
        assert url2 == url
        wait_for(lambda: state(yt, op_id) == "completed", timeout=60)
        wait_for(lambda: state(yt, queued) == "completed", timeout=60)
        jobs = _jobs(yt, op_id)
        assert {job["id"] for job in jobs} == {job["id"] for job in running}  # re-attached, none run twice
        assert {job["state"] for job in jobs} == {"completed"}
        wait_for(lambda: len(_shard_pids(scheduler.pid)) == 2, timeout=60)
    finally:
        procs.close()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _shard_port(scheduler_pid: int) -> int:
    """The port the scheduler's one shard process listens on."""
    (pid,) = _shard_pids(scheduler_pid)
    (port,) = {
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    return port


def _heartbeat(
    port: int, address: str, *, source: str = "127.0.0.1", forwarded: str | None = None
) -> httpx.Response:
    body = slotless_heartbeat(address)
    headers = dict(NODE_HEADERS)
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30) as http:
        return http.post(f"http://127.0.0.1:{port}{wire.HEARTBEAT_PATH}", content=body, headers=headers)


def test_a_shard_takes_a_nodes_address_from_its_connection_not_from_forwarded_for(tmp_path: Path) -> None:
    """A shard process checks a heartbeat's host against the registered node networks by its connection: an
    ``X-Forwarded-For`` header (which uvicorn trusts from 127.0.0.1 by default) does not let a local process
    holding the node secret pass as a host of a registered network."""
    procs = Procs(tmp_path)
    try:
        scheduler, _url = procs.scheduler(
            tmp_path / "data", 0, "--node-shards", "1", "--shard-starts", "--node-networks", "127.0.0.2/32"
        )
        wait_for(lambda: len(_shard_pids(scheduler.pid)) == 1, timeout=60)
        port = _shard_port(scheduler.pid)
        spoofed = _heartbeat(port, "n-spoofed", forwarded="127.0.0.2")
        assert spoofed.status_code == 401 and "not a registered node network" in spoofed.text, spoofed.text
        registered = _heartbeat(port, "n-registered", source="127.0.0.2")
        assert registered.status_code == 200, registered.text
    finally:
        procs.close()
