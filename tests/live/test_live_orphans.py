"""A node started on a root with leftovers of a SIGKILLed node kills their job processes and removes the job
directories before heartbeating (issue 7); real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from pooltree.cli import node as node_cli
from pooltree.cli.node import kill_orphans, processes_in_sandboxes


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def _leftover_job(root: Path, job_id: str) -> subprocess.Popen[bytes]:
    """What an executor leaves behind: <root>/<job>/sandbox and a job in its own session, with a child that
    moved elsewhere (found through its process group / HOME)."""
    sandbox = root / job_id / "sandbox"
    (sandbox / "tmp").mkdir(parents=True)
    (root / job_id / "stderr").write_bytes(b"")
    environment = {**os.environ, "HOME": str(sandbox), "PWD": str(sandbox)}
    return subprocess.Popen(
        ["sh", "-c", "(cd /; exec sleep 60) & sleep 60"],
        cwd=sandbox,
        env=environment,
        start_new_session=True,
    )


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


def _wait(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _read_until(stream: IO[bytes], marker: bytes, timeout: float) -> bytes:
    """Lines of ``stream`` up to and including the first holding ``marker`` (what was read if it never came)."""
    lines: list[bytes] = []
    found = threading.Event()

    def read() -> None:
        for line in iter(stream.readline, b""):
            lines.append(line)
            if marker in line:
                found.set()
                return
        found.set()

    threading.Thread(target=read, daemon=True).start()
    found.wait(timeout)
    return b"".join(lines)


@pytest.mark.parametrize("listed", ["as /proc lists them", "members before their leaders"])
def test_kill_orphans_kills_the_job_groups_and_removes_the_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: str
) -> None:
    # /proc lists by pid, and pids wrap: a job's child can come before its shell. Killed first alone, the child's
    # death woke the shell, which exited 137 before its group's SIGKILL came (seen once in CI): groups go first.
    if listed != "as /proc lists them":
        found = node_cli.processes_in_sandboxes
        monkeypatch.setattr(
            node_cli, "processes_in_sandboxes", lambda root: sorted(found(root), reverse=True)
        )
    root = tmp_path / "node"
    jobs = [_leftover_job(root, f"job-{i}") for i in range(2)]
    bystander = subprocess.Popen(["sleep", "60"], cwd=tmp_path, start_new_session=True)
    try:
        assert _wait(lambda: all(_children(job.pid) for job in jobs))
        children = [child for job in jobs for child in _children(job.pid)]
        assert set(processes_in_sandboxes(root)) >= {job.pid for job in jobs}
        killed, removed = kill_orphans(root)
        assert {job.pid for job in jobs} <= set(killed)
        assert removed == 2 and list(root.iterdir()) == []
        for job in jobs:
            assert job.wait(5) == -signal.SIGKILL
        assert _wait(lambda: not any(_alive(child) for child in children))
        assert _alive(bystander.pid)  # a process outside the root is left alone
        assert kill_orphans(root) == ([], 0)
    finally:
        for process in [*jobs, bystander]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def test_pooltree_node_cleans_its_root_before_heartbeating(tmp_path: Path) -> None:
    """``pooltree node`` on the root of a SIGKILLed node (scheduler unreachable: it keeps retrying)."""
    root = tmp_path / "node"
    job = _leftover_job(root, "job-1")
    node = None
    try:
        assert _wait(lambda: bool(_children(job.pid)))
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pooltree.cli",
                "node",
                "--scheduler",
                "http://127.0.0.1:9",
                "--root",
                str(root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "POOLTREE_NODE_SECRET": "ptns-orphans-test-node-secret"},
        )
        assert job.wait(30) == -signal.SIGKILL
        assert _wait(lambda: not (root / "job-1").exists())
        # SIGINT only once the node has said it heartbeats: it logs that after its loop took SIGINT/SIGTERM over
        # (the clean-up's own line comes before asyncio.run; a SIGINT between that line and the loop's handler was
        # lost in a full run at load 15, and the node went on retrying its unreachable scheduler)
        assert node.stderr is not None
        said = _read_until(node.stderr, b"heartbeating to", timeout=60)
        assert b"heartbeating to" in said and b"job directories left under" in said, said
        node.send_signal(signal.SIGINT)
        _, rest = node.communicate(timeout=30)
        stderr = said + rest
        # the job's shell, its sleep and the child that left the sandbox (found by HOME)
        assert b"killed 3 job processes and removed 1 job directories" in stderr
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait(5)
        if node is not None and node.poll() is None:
            node.kill()
            node.wait(5)
