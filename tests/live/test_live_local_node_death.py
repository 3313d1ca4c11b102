"""Issue 13: ``pooltree local`` keeps the cluster running when one node dies.

Real processes: SIGKILL one node of ``pooltree local``; it is restarted under the same address, the scheduler and
the other node keep running, and an operation started after the death runs to completion. The crash-loop bound
(a node that keeps dying is left down, the cluster goes on) is checked on the supervisor with stand-in processes.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import Procs, client, state, vanilla
from polling import wait_for

from pooltree.local.cluster import NODE_RESTART_LIMIT, LocalCluster


def _node_pids(local_pid: int) -> dict[str, int]:
    """node address → pid of the ``pooltree node`` children of ``pooltree local``."""
    found = {}
    for child in psutil.Process(local_pid).children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if "node" in cmdline and "--address" in cmdline and child.status() != psutil.STATUS_ZOMBIE:
            found[cmdline[cmdline.index("--address") + 1]] = child.pid
    return found


def test_a_killed_node_is_restarted_and_the_cluster_keeps_scheduling(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        local = procs.spawn(
            "local",
            "--nodes",
            "2",
            "--data",
            str(tmp_path / "data"),
            "--node-resources",
            "user_slots=2,cpu=2",
        )
        url = procs.read_until(local, "scheduler at ").split("scheduler at ", 1)[1].split()[0]
        yt = client(url, (tmp_path / "data" / "token").read_text().strip())  # the token `pooltree local` made
        wait_for(lambda: len(yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)
        before = wait_for(lambda: (pids := _node_pids(local.pid)).keys() == {"node-0", "node-1"} and pids)

        psutil.Process(before["node-0"]).send_signal(signal.SIGKILL)
        after = wait_for(
            lambda: (pids := _node_pids(local.pid)).get("node-0") not in (None, before["node-0"]) and pids,
            timeout=30,
        )
        assert after["node-1"] == before["node-1"] and local.poll() is None

        op = yt.run_operation(vanilla("true", 6), sync=False).id
        wait_for(lambda: state(yt, op) == "completed", timeout=60)
        assert local.poll() is None
        log = (tmp_path / "proc-0-local.log").read_text()
        assert "node-0 exited with signal SIGKILL; restarting it" in log
        assert "node-0 restarted" in log and "stopping the cluster" not in log
    finally:
        procs.close()


class _Dead:
    """A stand-in for a node process that has exited with SIGKILL."""

    pid = 0
    returncode = -signal.SIGKILL


def test_a_node_in_a_crash_loop_is_left_down_and_the_others_go_on(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, nodes=2)
    alive: Any = type("Alive", (), {"pid": 1, "returncode": None})()
    cluster.node_processes = [_Dead(), alive]  # type: ignore[list-item]
    cluster.node_exits = [[], []]
    started: list[int] = []

    async def start_node(index: int) -> Any:
        started.append(index)
        return _Dead()

    cluster._start_node = start_node  # type: ignore[method-assign]

    async def run() -> list[str]:
        events: list[str] = []
        now = 0.0
        for _ in range(200):
            events += await cluster.supervise(now)
            now += 0.5
        return events

    events = asyncio.run(run())
    assert started == [0] * (NODE_RESTART_LIMIT - 1)  # restarted until the limit, the live node untouched
    assert cluster.given_up == {0}
    assert events[0] == "node-0 exited with signal SIGKILL; restarting it in 0.5 s"
    assert "not restarting it, the cluster goes on with 1 of 2 nodes" in events[-1]
    assert cluster.exited() is None  # the scheduler is what stops the cluster, not a node
