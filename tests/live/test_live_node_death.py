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

from pooltree.node.isolation import probe_bwrap

pytestmark = pytest.mark.skipif(
    probe_bwrap() is not None, reason=f"bubblewrap cannot sandbox jobs here: {probe_bwrap()}"
)


def _processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        if marker.encode() in cmdline and stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in b"ZX":
            found.append(int(name))
    return found


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        keys = ("State", "PPid", "NSpid", "Uid")
        out.append(f"{pid} {cmdline!r} " + " ".join(f"{k}={fields.get(k, '').strip()}" for k in keys))
    return out


def _sleeps(marker: str) -> list[int]:
    """The job's own ``sleep MARKER`` processes (not the wrappers whose command lines also hold the marker)."""
    found = []
    for pid in _processes_with(marker):
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
        wait_for(lambda: _processes_with(launching), timeout=30, period=0.002)
        before = _describe(_processes_with(running) + _processes_with(launching))
        os.kill(node.pid, signal.SIGKILL)
        node.wait(10)
        try:
            wait_for(lambda: not _processes_with(running) and not _processes_with(launching), timeout=20)
        except AssertionError:
            left = _processes_with(running) + _processes_with(launching)
            survivors = _describe(left)
            for pid in left:  # leave nothing running whatever the verdict
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError(
                f"job processes outlived the node: {survivors}; before the kill: {before}"
            ) from None
    finally:
        procs.close()
