"""The job keeper (``pooltree/node/keeper.py``) on its own: the job's status comes through unchanged, what the job
leaves behind dies with it, and everything below the keeper dies when the node's end of the lifeline closes."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from polling import wait_for
from process_table import processes_with

from pooltree.node.keeper import KEEPER_EXIT_NODE_GONE, keeper_argv
from pooltree.node.zygotes import KeeperZygote


@pytest.fixture
def lifeline() -> Iterator[tuple[int, int]]:
    """A pipe as the executor holds it: (read end for the keeper, write end for the 'node')."""
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):
            os.close(fd)


def _keeper(read: int, command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        keeper_argv(read, ["/bin/sh", "-c", command]), pass_fds=(read,), start_new_session=True
    )


def _marker() -> str:
    return f"{300 + random.random() * 60:.6f}"  # a sleep duration no other process on the host uses


def _kill_all(marker: str) -> None:
    for pid in processes_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_the_jobs_exit_status_and_signal_come_through(lifeline: tuple[int, int]) -> None:
    read, _ = lifeline
    assert _keeper(read, "exit 3").wait(30) == 3
    assert _keeper(read, "kill -TERM $$").wait(30) == -signal.SIGTERM


def test_what_the_job_left_behind_is_gone_when_the_keeper_exits(lifeline: tuple[int, int]) -> None:
    read, _ = lifeline
    marker = _marker()
    try:
        keeper = _keeper(read, f"(setsid sleep {marker} &) ; sleep {marker} & echo started")
        assert keeper.wait(30) == 0
        assert processes_with(marker) == [], "the keeper exits only once every process of the job is gone"
    finally:
        _kill_all(marker)


def test_closing_the_lifeline_kills_the_whole_subtree(lifeline: tuple[int, int]) -> None:
    read, write = lifeline
    marker = _marker()
    try:
        keeper = _keeper(read, f"(setsid sleep {marker} &) ; sleep {marker}")
        wait_for(lambda: len(processes_with(marker)) >= 3, timeout=30)  # keeper, sh, and the sleeps
        os.close(write)  # what the kernel does when the node dies
        assert keeper.wait(30) == KEEPER_EXIT_NODE_GONE
        assert processes_with(marker) == []
    finally:
        _kill_all(marker)


def test_a_keeper_started_after_the_node_died_never_starts_the_job(
    lifeline: tuple[int, int], tmp_path: Path
) -> None:
    read, write = lifeline
    os.close(write)
    flag = tmp_path / "ran"
    assert _keeper(read, f"touch {flag}").wait(30) == KEEPER_EXIT_NODE_GONE
    assert not flag.exists()


# ----------------------------------------------------------------------------- keepers forked by the node's zygote


class _Node:
    """A zygote as the executor holds one, with the lifeline's write end in hand."""

    def __init__(self, read: int, write: int, out: int) -> None:
        self.read, self.write, self.out = read, write, out
        self.zygote = KeeperZygote(read)

    def spawn(self, command: str, cwd: str = "/") -> int:
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        return self.zygote.spawn(
            ["/bin/sh", "-c", command], env=env, cwd=cwd, stdout=self.out, stderr=self.out
        ).pid


@pytest.fixture
def node(lifeline: tuple[int, int]) -> Iterator[_Node]:
    out = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    keeping = _Node(*lifeline, out)
    yield keeping
    keeping.zygote.close()
    os.close(out)


def _status(pid: int, timeout: float = 30) -> int:
    """The exit status of ``pid`` (this process's child), as ``Popen.returncode`` gives it."""
    found: list[int] = []

    def exited() -> bool:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            found.append(os.waitstatus_to_exitcode(status))
        return bool(done)

    wait_for(exited, timeout=timeout, period=0.01)
    return found[0]


def test_a_zygote_keeper_is_this_processes_child_and_leads_its_session(node: _Node) -> None:
    pid = node.spawn("sleep 30")
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        assert int(stat[stat.rfind(b")") + 2 :].split()[1]) == os.getpid(), (
            "the node reaps its keepers itself"
        )
        assert os.getsid(pid) == pid, "the keeper leads its session before the node learns its pid"
    finally:
        os.killpg(pid, signal.SIGKILL)
        _status(pid)


def test_a_zygote_keeper_passes_the_exit_status_and_signal_through(node: _Node) -> None:
    assert _status(node.spawn("exit 3")) == 3
    assert _status(node.spawn("kill -TERM $$")) == -signal.SIGTERM


def test_a_zygote_keeper_starts_the_job_in_its_directory_and_the_zygote_leaves_it(
    node: _Node, tmp_path: Path
) -> None:
    assert _status(node.spawn('test "$PWD" = "$(pwd -P)" && touch here', cwd=str(tmp_path))) == 0
    assert (tmp_path / "here").exists()
    zygote = node.zygote._process
    assert zygote is not None
    assert os.readlink(f"/proc/{zygote.pid}/cwd") == "/", "a sweep of processes in sandboxes must spare it"
    with pytest.raises(FileNotFoundError):
        node.spawn("true", cwd=str(tmp_path / "missing"))


def test_what_the_job_left_behind_is_gone_when_a_zygote_keeper_exits(node: _Node) -> None:
    marker = _marker()
    try:
        assert _status(node.spawn(f"(setsid sleep {marker} &) ; sleep {marker} & echo started")) == 0
        assert processes_with(marker) == []
    finally:
        _kill_all(marker)


def test_closing_the_lifeline_kills_every_zygote_keepers_subtree_and_the_zygote(node: _Node) -> None:
    markers = [_marker() for _ in range(3)]
    try:
        pids = [node.spawn(f"(setsid sleep {marker} &) ; sleep {marker}") for marker in markers]
        wait_for(lambda: all(len(processes_with(marker)) >= 2 for marker in markers), timeout=30)
        os.close(node.write)  # what the kernel does when the node dies
        assert [_status(pid) for pid in pids] == [KEEPER_EXIT_NODE_GONE] * 3
        assert [processes_with(marker) for marker in markers] == [[], [], []]
        zygote = node.zygote._process
        assert zygote is not None and zygote.wait(30) == 0
    finally:
        for marker in markers:
            _kill_all(marker)


def test_descriptors_passed_through_a_zygote_keeper_are_the_jobs_3_and_4_and_the_lifeline_still_holds(
    node: _Node,
) -> None:
    """``pass_fds`` (a slot's setup bubblewrap gets its ``--info-fd`` so): the job finds them at 3, 4, ...; the
    keeper moved the lifeline out of their way, so closing it still ends the job."""
    pipes = [os.pipe() for _ in range(2)]
    marker = _marker()
    try:
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        pid = node.zygote.spawn(
            ["/bin/sh", "-c", f"echo three >&3; echo four >&4; exec 3>&- 4>&-; sleep {marker}"],
            env=env,
            cwd="/",
            stdout=node.out,
            stderr=node.out,
            pass_fds=tuple(write for _, write in pipes),
        ).pid
        for _, write in pipes:
            os.close(write)
        assert [os.read(read, 100) for read, _ in pipes] == [b"three\n", b"four\n"]
        wait_for(lambda: processes_with(marker), timeout=30)
        os.close(node.write)
        assert _status(pid) == KEEPER_EXIT_NODE_GONE
        assert processes_with(marker) == []
    finally:
        _kill_all(marker)
        for read, _ in pipes:
            os.close(read)


def test_a_job_asked_of_the_zygote_after_the_node_died_never_starts(node: _Node, tmp_path: Path) -> None:
    node.spawn("true")  # the zygote is up
    os.close(node.write)
    flag = tmp_path / "ran"
    try:
        pid = node.spawn(f"touch {flag}")
    except OSError:  # the zygote saw the end first and is gone
        pass
    else:
        assert _status(pid) == KEEPER_EXIT_NODE_GONE
    assert not flag.exists()


def test_zygote_keepers_start_from_many_threads_at_once(node: _Node) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        pids = list(pool.map(lambda code: node.spawn(f"exit {code}"), range(12)))
    assert [_status(pid) for pid in pids] == list(range(12))
