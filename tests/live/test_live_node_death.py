"""Jobs die with their node (issue 13): kill -9 of a ``pooltree node`` leaves none of its jobs' processes running,
even those that left the job's process group and session (double fork + setsid) and those of a job whose sandbox
was still being set up, so a rescheduled job never runs twice at once. Real scheduler and node processes; the
check reads /proc within a bounded wait."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import Procs, client, vanilla
from polling import wait_for
from process_table import describe, processes_with

from pooltree.node.isolation import probe_bwrap

pytestmark = pytest.mark.skipif(
    probe_bwrap() is not None, reason=f"bubblewrap cannot sandbox jobs here: {probe_bwrap()}"
)


def _sleeps(marker: str) -> list[int]:
    """The job's own ``sleep MARKER`` processes (not the wrappers whose command lines also hold the marker)."""
    found = []
    for pid in processes_with(marker):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as handle:
            if handle.read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                found.append(pid)
    return found


def test_kill_9_of_a_node_kills_every_process_of_its_jobs(tmp_path: Path) -> None:
    """One job runs with a daemon that left its group and session; a second one is being launched when the node
    is killed (its sandbox half set up: the moment bubblewrap's parent-death signal is not yet armed)."""
    running, launching = (f"{300 + random.random() * 60:.6f}" for _ in range(2))  # durations nobody else uses
    procs = Procs(tmp_path)
    try:
        _, url = procs.scheduler(tmp_path / "data", 0, "--node-heartbeat-timeout", "2")
        node = procs.node(url, "n1", "user_slots=8,cpu=8,memory=8Gi")
        yt = client(url)
        # a grandchild in a new session (what a daemon does) and one child in the job's group
        yt.run_operation(
            vanilla(f"(setsid sleep {running} &) ; sleep {running} & echo started; wait", 1), sync=False
        )
        wait_for(lambda: len(_sleeps(running)) == 2, timeout=30)
        yt.run_operation(vanilla(f"sleep {launching}", 7), sync=False)  # launched side by side
        wait_for(lambda: processes_with(launching), timeout=30, period=0.002)
        before = describe(processes_with(running) + processes_with(launching))
        os.kill(node.pid, signal.SIGKILL)
        node.wait(10)
        try:
            wait_for(lambda: not processes_with(running) and not processes_with(launching), timeout=20)
        except AssertionError:
            left = processes_with(running) + processes_with(launching)
            survivors = describe(left)
            for pid in left:  # leave nothing running whatever the verdict
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError(
                f"job processes outlived the node: {survivors}; before the kill: {before}"
            ) from None
    finally:
        procs.close()
